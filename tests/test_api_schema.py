"""The committed OpenAPI document run against the live API (schemathesis): requests generated
from every operation's parameters and bodies, valid and not, over a real worker and the dev
server. No answer is a 500, and every answer is one the document describes."""

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import PageServer
from tests.helpers import serve_process, worker_process

pytestmark = pytest.mark.e2e
EXAMPLES = 20  # per operation and pass: about 900 requests in all, a minute here
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def run_schema(
    base: str, document: dict[str, Any], known: dict[str, str], answers: Counter[str]
) -> list[str]:
    """Each operation's generated requests, valid and invalid, and valid ones again with
    the `known` path parameters (a real target, a real check) where it takes them, except
    for a removal; their answers counted by operation and status. The operations that failed
    a check, with why."""
    schema = schemathesis.openapi.from_dict(document)
    failed = []
    for found in schema.get_all_operations():
        operation = found.ok()  # type: ignore[union-attr]
        takes = {p.name: known[p.name] for p in operation.path_parameters if p.name in known}
        passes: list[tuple[GenerationMode, dict[str, str]]] = [
            (GenerationMode.POSITIVE, {}),
            (GenerationMode.NEGATIVE, {}),
        ]
        if takes and operation.method.upper() not in ("DELETE", "PUT"):
            passes.append((GenerationMode.POSITIVE, takes))
        for mode, pins in passes:
            try:
                one_pass(base, operation, mode, pins, answers)
            except Exception as err:  # a check's failure: report them all, not the first
                failed.append(f"{operation.label} ({mode.value}): {str(err)[:2000]}")
    return failed


def one_pass(
    base: str,
    operation: schemathesis.APIOperation,  # type: ignore[type-arg]
    mode: GenerationMode,
    pins: dict[str, str],
    answers: Counter[str],
) -> None:
    @settings(
        max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(case=operation.as_strategy(generation_mode=mode))
    def requests(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
        if pins:
            case.path_parameters = {**(case.path_parameters or {}), **pins}
        response = case.call(base_url=base, timeout=60)
        answers[f"{operation.label} {response.status_code}"] += 1
        case.validate_response(response, checks=CHECKS)

    requests()


async def test_no_generated_request_gets_a_server_error(
    env: dict[str, str], page_server: PageServer
) -> None:
    page_server.set("/shop", "<p>Pro 10 EUR</p>")
    async with worker_process(env), serve_process(env) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            shop = {"id": "shop", "url": page_server.url("/shop"), "prices": {}}
            assert (await http.put("/api/v1/targets/shop", json=shop)).status_code == 200
            document = (await http.get("/api/v1/openapi.json")).json()
            checked = (await http.post("/api/v1/targets/shop/check")).json()[0]
        known = {"target_id": "shop", "work_id": checked["work_id"]}
        answers: Counter[str] = Counter()
        failed = await asyncio.to_thread(run_schema, base, document, known, answers)
    assert not failed, "\n\n".join(failed)
    operations = {answer.rsplit(" ", 1)[0] for answer in answers}
    assert len(operations) == sum(len(methods) for methods in document["paths"].values())
    assert sum(answers.values()) >= len(operations) * 10, answers
    assert any(a.endswith(" 200") for a in answers) and any(a.endswith(" 422") for a in answers)
