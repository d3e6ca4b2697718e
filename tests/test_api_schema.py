"""The committed OpenAPI document run against the live API, over a real worker and `serve`
with a token: schemathesis' engine with every check (`--checks all`: positive data accepted,
negative data refused, unsupported methods answered 405 with Allow, auth not ignored, no
5xx, every answer as documented) through its examples, coverage, fuzzing and stateful
phases; then a state machine of our own adding, reading, pausing, resuming and removing
real targets in random orders. Bounded: about a minute and a half in all."""

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

from tests.conftest import PageServer
from tests.helpers import serve_process, worker_process

pytestmark = pytest.mark.e2e
TOKEN = "schema-test-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = 5  # per operation and phase: about 600 requests, a minute here


def engine_config(base: str) -> SchemathesisConfig:
    """Every check on, every phase. A well-formed request may still ask for what is not:
    an entry whose id is not its path's, a host that does not resolve, a `since` outside
    1970..2200, a screenshot of a check without one. The document says 400 for that, so
    positive data may get it (negative data must get a 4xx all the same); a 5xx stays a
    failure (`not_a_server_error`)."""
    return SchemathesisConfig.from_dict(
        {
            "base-url": base,
            "seed": 40,
            "headers": BEARER,
            "max-time": 75,
            "request-timeout": 60,  # past a check-now's bounds (10 s + 30 s); the default is 10 s
            "generation": {"max-examples": EXAMPLES, "deterministic": True, "database": "none"},
            "phases": {"stateful": {"max-steps": 30}},
            "checks": {
                "enabled": True,
                "positive_data_acceptance": {
                    "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "429"]
                },
            },
        }
    )


def run_engine(base: str, document: dict[str, Any], answers: Counter[str]) -> list[str]:
    """Each failed check, with the request and answer that failed it; answers counted by
    operation and status."""
    schema = schemathesis.openapi.from_dict(document, config=engine_config(base))
    failed = []
    for event in from_schema(schema).execute():
        if isinstance(event, events.FatalError | events.NonFatalError):
            failed.append(f"{event!r}")
        if not isinstance(event, events.ScenarioFinished):
            continue
        for interaction in event.recorder.interactions.values():
            if interaction.response is not None:
                label = f"{interaction.request.method} {interaction.request.uri.split('?')[0]}"
                answers[f"{label} {interaction.response.status_code}"] += 1
        for case_id, checks in event.recorder.checks.items():
            for check in checks:
                if check.failure_info is None:
                    continue
                seen = event.recorder.interactions.get(case_id)
                request = (
                    f"{seen.request.method} {seen.request.uri} {seen.request.body!r:.500}"
                    if seen
                    else ""
                )
                response = (
                    f"{seen.response.status_code} {seen.response.content!r:.300}"
                    if seen and seen.response
                    else ""
                )
                failed.append(
                    f"{event.phase} {check.name}: {check.failure_info.failure}\n"
                    f"  {request}\n  -> {response}"
                )
    return failed


@pytest.mark.long
async def test_the_api_passes_every_schemathesis_check(
    env: dict[str, str], page_server: PageServer
) -> None:
    page_server.set("/shop", "<p>Pro 10 EUR</p>")
    env = {**env, "PRICEWATCH_API_TOKEN": TOKEN}
    async with worker_process(env), serve_process(env) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60, headers=BEARER) as http:
            shop = {"id": "shop", "url": page_server.url("/shop"), "prices": {}}
            assert (await http.put("/api/v1/targets/shop", json=shop)).status_code == 200
            assert (await http.post("/api/v1/targets/shop/check")).status_code == 200
            document = (await http.get("/api/v1/openapi.json")).json()
        answers: Counter[str] = Counter()
        failed = await asyncio.to_thread(run_engine, base, document, answers)
    assert not failed, "\n\n".join(failed)
    assert sum(answers.values()) >= 200, answers
    statuses = {answer.rsplit(" ", 1)[1] for answer in answers}
    assert {"200", "400", "401", "404", "405", "422"} <= statuses, answers  # 204: below


class Targets(RuleBasedStateMachine):
    """Targets added, read, paused, resumed and removed in any order through the API, each
    answer the one the model expects: what exists is listed, what does not is a 404."""

    http: httpx.Client
    page: str
    added = Bundle("added")

    def __init__(self) -> None:
        super().__init__()
        self.paused: dict[str, bool] = {}

    @rule(target=added, target_id=st.sampled_from(["s-a", "s-b", "s-c"]), paused=st.booleans())
    def put(self, target_id: str, paused: bool) -> str:
        entry = {"id": target_id, "url": self.page, "every": "1h", "paused": paused}
        answer = self.http.put(f"/api/v1/targets/{target_id}", json=entry)
        assert answer.status_code == 200, answer.text
        was = self.paused.get(target_id)
        expected = (
            ["add"] if was is None else ["unchanged"] if was == paused else
            ["pause" if paused else "resume"]
        )  # fmt: skip
        assert answer.json()["actions"] == expected, (was, answer.text)
        self.paused[target_id] = paused
        return target_id

    @rule(target_id=added, pause=st.booleans())
    def steer(self, target_id: str, pause: bool) -> None:
        answer = self.http.post(f"/api/v1/targets/{target_id}/{'pause' if pause else 'resume'}")
        if target_id not in self.paused:
            assert answer.status_code == 404, answer.text
            return
        assert answer.status_code == 204, answer.text
        self.paused[target_id] = pause

    @rule(target_id=added)
    def read(self, target_id: str) -> None:
        answer = self.http.get(f"/api/v1/targets/{target_id}")
        if target_id not in self.paused:
            assert answer.status_code == 404, answer.text
            return
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"]["paused"] is self.paused[target_id]

    @rule(target_id=consumes(added))
    def remove(self, target_id: str) -> None:
        answer = self.http.delete(f"/api/v1/targets/{target_id}")
        assert answer.status_code == (204 if target_id in self.paused else 404), answer.text
        self.paused.pop(target_id, None)

    @invariant()
    def listed(self) -> None:
        # The list is Postgres' mirror: a start shows there once its worker registered it.
        answer = self.http.get("/api/v1/targets")
        assert answer.status_code == 200, answer.text
        assert {row["id"] for row in answer.json()} <= set(self.paused)

    def teardown(self) -> None:
        for target_id in list(self.paused):
            self.http.delete(f"/api/v1/targets/{target_id}")


async def test_targets_added_steered_and_removed_in_any_order(
    env: dict[str, str], page_server: PageServer
) -> None:
    page_server.set("/s", "<p>10 EUR</p>")
    async with worker_process(env), serve_process(env) as base:
        with httpx.Client(base_url=base, timeout=150) as http:
            Targets.http, Targets.page = http, page_server.url("/s")
            await asyncio.to_thread(
                run_state_machine_as_test,
                Targets,
                settings=settings(
                    max_examples=4,
                    stateful_step_count=10,
                    deadline=None,
                    database=None,
                    derandomize=True,
                    suppress_health_check=list(HealthCheck),
                ),
            )
