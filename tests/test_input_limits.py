"""Bad input at the client, the layer every surface calls (the CLI, the API, the dashboard):
one line naming what is wrong, never a Postgres error dressed as an outage, never a crash,
and a failed add leaves nothing behind (issue 40 points 6-8). Through a real `serve`:
tests/test_api_schema.py and the cases at the end here."""

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio.service import RPCError, RPCStatusCode

from client import plans
from client.inputs import BadInput, Unknown, moment, storable
from client.manifest import Entry, ManifestError
from client.pricewatch import Pricewatch
from pricewatch.models import EARLIEST, LATEST
from pricewatch.settings import Settings
from tests.conftest import PageServer
from tests.helpers import cli, serve_process

HOOK = "json://127.0.0.1:9/hook"


@given(text=st.text(st.characters(exclude_categories=())))
def test_a_text_postgres_cannot_hold_is_refused_by_name(text: str) -> None:
    unstorable = "\x00" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    try:
        assert storable("search", text) == text and not unstorable
    except BadInput as err:
        assert unstorable and str(err).startswith("search: holds ") and "\n" not in str(err)


@given(
    value=st.datetimes(timezones=st.none() | st.timezones())
    | st.datetimes(timezones=st.sampled_from([timezone(timedelta(hours=h)) for h in (-23, 23)]))
)
def test_a_time_outside_the_record_is_refused_by_name(value: datetime) -> None:
    """Year 1 east of UTC and 9999 west of it overflow on the way to UTC: refused alike."""
    try:
        got = moment("before", value)
    except BadInput as err:
        assert str(err).startswith("before: must be from 1970-01-01 to before 2200-01-01")
        return
    assert EARLIEST <= got < LATEST and got.tzinfo is UTC


class FailingStart(RPCError):
    def __init__(self) -> None:
        super().__init__("grpc: message larger than max", RPCStatusCode.RESOURCE_EXHAUSTED, b"")


@pytest.fixture
async def refused(
    pool: asyncpg.Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Pricewatch:
    """A client whose every workflow start is refused by Temporal (as a too-big payload
    is), with no target running yet."""

    async def refuse(*args: Any, **kwargs: Any) -> None:
        raise FailingStart()

    async def none(self: Pricewatch, target_id: str) -> None:
        raise Unknown(target_id)

    async def nothing(*args: Any) -> dict[str, Any]:
        return {}

    async def temporal(self: Pricewatch) -> object:
        return object()  # only `start_monitor` is handed it

    monkeypatch.setattr(plans, "start_monitor", refuse)
    monkeypatch.setattr(Pricewatch, "workflow", none)
    monkeypatch.setattr(plans, "current", nothing)
    monkeypatch.setattr(Pricewatch, "temporal", temporal)
    return Pricewatch(Settings(database_url=database_url, allow_networks="127.0.0.1/32"))


async def test_an_add_that_temporal_refuses_leaves_no_notify_url(
    refused: Pricewatch, pool: asyncpg.Pool
) -> None:
    """The Apprise URL is stored before the workflow is started (its credentials never
    enter Temporal): a refused start deletes it again, and keeps one stored before."""
    await pool.execute("INSERT INTO notify_urls (url) VALUES ('json://127.0.0.1:9/kept')")
    entry = Entry(id="big", url="http://127.0.0.1:9/", notify=[HOOK, "json://127.0.0.1:9/kept"])
    async with refused:
        with pytest.raises(FailingStart):
            await plans.put(refused, entry)
    urls = await pool.fetch("SELECT url FROM notify_urls")
    assert [row["url"] for row in urls] == ["json://127.0.0.1:9/kept"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"selector": "p\x00"}, "selector: holds a NUL character"),
        ({"user_agent": "\ud800"}, "user_agent: holds a lone surrogate"),
        ({"notify": ["json://a/\x00"]}, "notify: holds a NUL character"),
    ],
)  # fmt: skip
async def test_a_target_postgres_could_not_mirror_is_refused_before_anything(
    refused: Pricewatch, pool: asyncpg.Pool, change: dict[str, Any], says: str
) -> None:
    """A NUL in a setting went into the workflow, and its registration then failed for
    good in Postgres' jsonb."""
    entry = Entry.model_validate({"id": "nul", "url": "http://127.0.0.1:9/", **change})
    async with refused:
        with pytest.raises(ManifestError, match=says):
            await plans.put(refused, entry)
    assert await pool.fetchval("SELECT count(*) FROM notify_urls") == 0


async def test_a_start_no_grid_can_follow_is_refused(refused: Pricewatch) -> None:
    async with refused:
        for start in (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC)):
            entry = Entry(id="old", url="http://127.0.0.1:9/", start_at=start)
            with pytest.raises(BadInput, match=r"^start_at: must be from 1970-01-01"):
                await plans.put(refused, entry)


@pytest.mark.e2e
async def test_the_api_and_the_cli_answer_bad_input_with_its_field(
    env: dict[str, str], page_server: PageServer
) -> None:
    """Each as it was on 1.8.1: a 500, a 503 "Postgres", or taken as something else."""
    page = page_server.url("/p")

    def put(target_id: str, **fields: Any) -> Callable[[httpx.AsyncClient], Any]:
        body = {"id": target_id, "url": page, **fields}
        return lambda http: http.put(f"/targets/{target_id}", json=body)

    def get(path: str, **params: str) -> Callable[[httpx.AsyncClient], Any]:
        return lambda http: http.get(path, params=params)

    cases: list[tuple[Callable[[httpx.AsyncClient], Any], int, str]] = [
        (put("y1", start_at="0001-01-01T00:00:00Z"), 400, "start_at: must be from 1970-01-01"),
        (put("y2", start_at="9999-12-31T23:59:59-01:00"), 400, "start_at: must be from 1970"),
        (put("z", every="0s"), 400, "every: must be at least 1s"),
        (put("z", every=3600), 422, "every: write a duration like 90s, 15m, 24h or 1d"),
        (put("z", at="08:00", tz=""), 400, "unknown time zone ''"),
        (put("z", at="08:00", on=""), 400, "--on '': use day names"),
        (put("z", url="file:///etc/passwd"), 400, "url: URL scheme should be 'http' or 'https'"),
        (put("z", max_attempts=0), 400, "max_attempts: Input should be greater than or equal"),
        (put("z", unhealthy_after=-1), 400, "unhealthy_after: Input should be greater than"),
        (put("z", selector="p\x00"), 400, "selector: holds a NUL character"),
        (put("z", webhooks=["ftp://hooks.example/"]), 400, "webhooks: URL scheme should be"),
        # Found by schemathesis: a body the document calls well formed answered 422.
        (put("z", prices={"attribute": "content"}), 400, "prices: a price attribute needs"),
        (put("z", steps=["click #a"]), 400, "steps run in the browser: they need render"),
        (put("z", prices={"below": "1_000"}), 422, "prices.below: write an amount like 9.50"),
        (put("z", at="08:00", jitter="9999999d"), 422, "jitter: invalid duration '9999999d'"),
        (get("/targets", search="a\x00b"), 422, "search: String should match pattern"),
        (get("/targets/z/history", before="0001-01-01T00:00:00+01:00"), 400, "before: must be"),
        (get("/targets/z/history", before="9999-12-31T23:59:59-01:00"), 400, "before: must be"),
        (get("/targets/z/prices", since="0001-01-01T00:00:00+01:00"), 400, "since: must be"),
    ]
    async with (
        serve_process(env) as base,
        httpx.AsyncClient(base_url=f"{base}/api/v1", timeout=30) as http,
    ):
        for request, status, says in cases:
            answer = await request(http)
            assert answer.status_code == status, (says, answer.text)
            assert answer.json() == {"error": answer.json()["error"]}, answer.text
            assert answer.json()["error"].startswith(says), answer.text
        assert (await http.get("/targets")).json() == []  # nothing was added
    for args, says in [
        (["--start-at", "0001-01-01T00:00:00Z"], "--start-at: must be from 1970-01-01"),
        (["--at", "08:00", "--tz", ""], "unknown time zone ''"),
        (["--at", "08:00", "--on", ""], "--on '': use day names"),
    ]:
        code, out, err = await cli(env, "add", "z", page, *args)
        assert (code, out) == (2, ""), err
        assert says in err and err.count("\n") == 1, err
