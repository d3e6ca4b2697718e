"""A page slower than the default limits (10 s per read, 30 s in all) is checked when its
target's own timeout allows it (`--timeout`, `timeout:`, 5 s to 120 s), and a timeout names
the limit that ran out and the setting that raises it: against a real page server that
takes 20 s to send its first byte, through `fetch_page` and end to end through the CLI."""

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import asyncpg
import httpx
import pytest
from aiohttp import web
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities import checks, store
from activities.checks import HEARTBEAT_EVERY, CheckActivities
from fetchers.http import FETCH_DEADLINE, FetchError, Request, fetch_page, timed_out
from pricewatch.models import CheckInput, CheckResult, CheckStatus, TargetConfig
from pricewatch.names import Activity
from pricewatch.policy import (
    CHECK_LEASE,
    CHECK_TIMEOUT,
    HEARTBEAT_TIMEOUT,
    LEASE_HELD,
    MAX_FETCH_TIMEOUT,
    check_timeout,
)
from tests.chaos.stack import serve
from tests.conftest import PageServer, Start
from tests.helpers import (
    HOUR,
    SLOT,
    cli,
    local_attempt,
    new_target,
    rows,
    running_worker,
    worker_process,
)
from tests.helpers import attempt as shared_attempt
from tests.waits import wait_for

SLOW_SECONDS = 20.0
"""How long the slow page takes to send anything: past the default 10 s per read."""
BODY = "<p>Pro plan: 19.90 EUR / month</p>"
DEFAULT_READ_LIMIT = (
    "timed out: the page sent nothing for 10s (the default limit; raise it with --timeout, "
    "up to 120s)"
)
THIRTY = timedelta(seconds=30)
T = TypeVar("T")


async def slow(request: web.Request) -> web.Response:
    await asyncio.sleep(SLOW_SECONDS)
    return web.Response(text=BODY, content_type="text/html")


async def to_slow(request: web.Request) -> web.Response:
    raise web.HTTPFound("/slow")


async def drip(request: web.Request) -> web.StreamResponse:
    """Headers at once, then a byte a second for 6 s: every read well inside 10 s, the whole
    inside the default 30 s, past 5 s."""
    response = web.StreamResponse(headers={"content-type": "text/html"})
    await response.prepare(request)
    try:
        for _ in range(6):
            await asyncio.sleep(1)
            await response.write(b"x")
    except ConnectionResetError:
        pass  # the client gave up, as it should
    return response


@pytest.fixture
async def pages() -> AsyncIterator[str]:
    routes = [web.get("/slow", slow), web.get("/moved", to_slow), web.get("/drip", drip)]
    async with serve(routes) as base:
        yield base


async def failure(http: httpx.AsyncClient, request: Request) -> FetchError:
    with pytest.raises(FetchError) as raised:
        await fetch_page(http, request)
    return raised.value


async def timed(work: Awaitable[T]) -> tuple[T, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    value = await work
    return value, loop.time() - started


async def test_a_20s_page_is_fetched_with_a_30s_timeout_and_fails_naming_the_limit_without(
    pages: str, http: httpx.AsyncClient
) -> None:
    """Side by side, on one 20 s wait: the target's timeout is the limit per read too (not
    only the overall deadline), it holds through a redirect, and the default fails at 10 s
    with a message that says which limit and how to raise it."""
    slow_page = f"{pages}/slow"
    (page, took), (moved, _), (error, failed_after) = await asyncio.gather(
        timed(fetch_page(http, Request(slow_page, timeout=THIRTY))),
        timed(fetch_page(http, Request(f"{pages}/moved", timeout=THIRTY))),
        timed(failure(http, Request(slow_page))),
    )

    assert page.text == "Pro plan: 19.90 EUR / month"
    assert moved.sha256 == page.sha256
    assert took >= SLOW_SECONDS
    assert error.transient
    assert str(error) == DEFAULT_READ_LIMIT
    assert 9.5 <= failed_after < 15


async def test_the_targets_timeout_is_also_its_overall_deadline(
    pages: str, http: httpx.AsyncClient
) -> None:
    """A body trickling in for 6 s passes the default limits; a 5 s timeout stops it at 5 s,
    naming the target's timeout."""
    drip = f"{pages}/drip"
    (page, _), (error, failed_after) = await asyncio.gather(
        timed(fetch_page(http, Request(drip))),
        timed(failure(http, Request(drip, timeout=timedelta(seconds=5)))),
    )

    assert page.size == 6
    assert str(error) == (
        "timed out: the page was not complete within 5s (the target's timeout; raise it with "
        "--timeout, up to 120s)"
    )
    assert 4.5 <= failed_after < 5.9


def test_each_timeout_names_its_limit_in_plain_words() -> None:
    url = "http://127.0.0.1/pricing"
    longest = Request(url, timeout=MAX_FETCH_TIMEOUT)
    messages = {
        "connect": timed_out(Request(url), httpx.ConnectTimeout("x")),
        "read at the longest": timed_out(longest, httpx.ReadTimeout("x")),
        "deadline": timed_out(Request(url), None),
        "pool": timed_out(Request(url), httpx.PoolTimeout("x")),
    }
    assert {name: str(error) for name, error in messages.items()} == {
        "connect": "timed out: no connection within 5s (the connect limit, the same for every "
        "target)",
        "read at the longest": "timed out: the page sent nothing for 120s (the target's "
        "timeout, already the longest allowed)",
        "deadline": "timed out: the page was not complete within 30s (the default limit; raise "
        "it with --timeout, up to 120s)",
        "pool": "timed out: no free connection on this worker within 10s (the worker is "
        "overloaded)",
    }
    assert all(error.transient for error in messages.values())
    assert not any("Timeout" in str(error) for error in messages.values()), "no class names"


@pytest.mark.parametrize("seconds", [4, 121, 0, -1])
def test_a_timeout_outside_5s_to_120s_is_refused(seconds: int) -> None:
    with pytest.raises(ValidationError, match="must be from 5s to 120s"):
        TargetConfig(target_id="a", url="http://a.example/", interval_seconds=60,
                     timeout_seconds=seconds)  # fmt: skip


def test_the_timeout_is_optional_and_travels_with_the_check() -> None:
    """A config recorded before 1.1 (no field) decodes with the default; a check copies it."""
    old = TargetConfig.model_validate_json(
        '{"target_id": "a", "url": "http://a.example/", "interval_seconds": 60}'
    )
    assert old.timeout_seconds is None
    assert (
        CheckInput.model_validate_json(
            '{"target_id": "a", "url": "http://a.example/", "slot": "2026-08-07T08:00:00Z"}'
        ).timeout_seconds
        is None
    )
    slow_one = old.model_copy(update={"timeout_seconds": 90})
    assert CheckInput.of(slow_one, SLOT).timeout_seconds == 90
    assert CheckInput.of(old, SLOT).timeout_seconds is None


@pytest.mark.parametrize("seconds", [None, 5, 30, 60, 120])
def test_a_check_outlives_its_fetch_and_holds_its_lease_all_along(seconds: int | None) -> None:
    """The check activity's start-to-close exceeds the fetch's deadline plus the SQL around
    it (30 s, as a default check has), and is exactly today's for a target without a timeout
    (every recorded history). The lease does not depend on the fetch's length: the fetch
    extends it every beat, well inside it, and a normal attempt's heartbeat timeout stays
    below it."""
    fetch = FETCH_DEADLINE if seconds is None else timedelta(seconds=seconds)
    assert check_timeout(seconds) >= fetch + (CHECK_TIMEOUT - FETCH_DEADLINE)
    if seconds is None:
        assert check_timeout(seconds) == CHECK_TIMEOUT
    assert check_timeout(120) == timedelta(seconds=150)
    assert HEARTBEAT_EVERY * 3 < HEARTBEAT_TIMEOUT < CHECK_LEASE


@pytest.mark.parametrize("local", [True, False], ids=["local first attempt", "normal attempt"])
async def test_a_fetch_longer_than_the_lease_keeps_it_to_the_end(
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    page_server: PageServer,
    monkeypatch: pytest.MonkeyPatch,
    local: bool,
) -> None:
    """A 120 s fetch outlives the 45 s lease: scaled down (a 1 s lease, a beat every 0.2 s),
    a fetch held for three leases keeps it, with heartbeats (a normal attempt) and without
    (a local first attempt): another run's attempt (a reset's) is refused all along, and the
    first commits. (A later attempt of the same run takes the lease over: Temporal starts one
    only once it gave up on this one, test_fencing.)"""
    monkeypatch.setattr(checks, "CHECK_LEASE", timedelta(seconds=1))
    monkeypatch.setattr(checks, "HEARTBEAT_EVERY", timedelta(seconds=0.2))
    page_server.set("/p", "price 10")
    config = TargetConfig(target_id="acme", url=page_server.url("/p"), interval_seconds=3600,
                          timeout_seconds=120)  # fmt: skip
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    check = CheckInput.of(config, SLOT).model_copy(update={"asked_at": SLOT})
    activities = CheckActivities(pool, http)
    hold = page_server.hold_next("/p")
    first = asyncio.create_task(attempt(1, local).run(activities.check_slot, check))
    await asyncio.wait_for(hold.arrived.wait(), timeout=10)
    for _ in range(3):
        await asyncio.sleep(1.1)  # past the lease as it was claimed, or last extended
        with pytest.raises(ApplicationError) as refused:
            await another_run(attempt(2, local=False)).run(activities.check_slot, check)
        assert refused.value.type == LEASE_HELD
    hold.release.set()
    result: CheckResult = await first
    assert result.status is CheckStatus.UNCHANGED and not result.already_recorded


def another_run(env: ActivityEnvironment) -> ActivityEnvironment:
    env.info = dataclasses.replace(env.info, workflow_run_id="run-2")
    return env


def attempt(number: int, local: bool) -> ActivityEnvironment:
    """A first attempt run locally (no heartbeat timeout), or a normal one that has one."""
    env = local_attempt() if local else shared_attempt(number)
    if not local:
        env.info = dataclasses.replace(env.info, heartbeat_timeout=HEARTBEAT_TIMEOUT)
    return env


async def test_the_retries_of_a_slow_target_get_a_longer_start_to_close(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """After a failed first attempt, the normal activity holding the retries is scheduled
    with the target's check_timeout: 90 s + 30 s for a 90 s timeout, and exactly
    CHECK_TIMEOUT for a target without one (what every recorded history has)."""
    client = time_skipping_env.client
    slow_one = new_target(page_server).model_copy(update={"timeout_seconds": 90})
    plain = new_target(page_server)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        handles = []
        for config in (slow_one, plain):
            page_server.queue(f"/{config.target_id}", (503, "busy"))
            handles.append(await start(config, start_at=anchor))
        await time_skipping_env.sleep(timedelta(hours=1, minutes=5))
        timeouts = []
        for handle in handles:
            history = await handle.fetch_history()
            scheduled = [
                event.activity_task_scheduled_event_attributes
                for event in history.events
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and event.activity_task_scheduled_event_attributes.activity_type.name
                == Activity.CHECK_SLOT
            ]
            timeouts.append([a.start_to_close_timeout.ToTimedelta() for a in scheduled])
    assert timeouts == [[timedelta(seconds=120)], [CHECK_TIMEOUT]]
    for config in (slow_one, plain):
        assert [r["status"] for r in await rows(pool, config.target_id)] == ["unchanged"]


@pytest.mark.long
@pytest.mark.e2e
async def test_a_20s_page_is_checked_through_the_cli_with_timeout_30s_and_not_without(
    env: dict[str, str], pool: asyncpg.Pool, pages: str, tmp_path: Path
) -> None:
    """`add --timeout 30s` against a page that takes 20 s: its first slot is recorded; the
    same page without a timeout is retrying with the named limit; status, failures and
    export say so, and the export applies back as nothing to do."""
    slow_page = f"{pages}/slow"
    async with worker_process(env):
        code, out, err = await cli(
            env, "add", "slow-30", slow_page, "--every", "1h", "--timeout", "30s"
        )
        assert code == 0, err
        assert "added slow-30" in out and "timeout 30s" in out
        code, out, err = await cli(env, "add", "slow-default", slow_page, "--every", "1h")
        assert code == 0, err

        await wait_for(
            pool,
            "SELECT count(*) FROM source_checks WHERE target_id = 'slow-default' "
            "AND status = 'retrying' AND error_message = $1",
            DEFAULT_READ_LIMIT,
        )
        await wait_for(
            pool,
            "SELECT count(*) FROM source_checks WHERE target_id = 'slow-30' "
            "AND status IN ('unchanged', 'changed') AND attempt_count = 1",
        )
        code, out, err = await cli(env, "history", "slow-30")
        assert code == 0 and "failed" not in out and "retrying" not in out, out + err
        code, out, err = await cli(env, "status", "slow-30")
        assert code == 0 and "timeout:    30s" in out, out + err
        code, out, err = await cli(env, "status", "slow-default")
        assert code == 0 and "timeout:    default (10s per read, 30s in all)" in out, out + err
        code, out, err = await cli(env, "failures", "slow-default")
        assert code == 0 and "raise it with --timeout, up to 120s" in out, out + err

        code, exported, err = await cli(env, "export")
        assert code == 0, err
        assert exported.count("timeout: 30s") == 1, exported
        targets = tmp_path / "targets.yaml"
        targets.write_text(exported)
        code, out, err = await cli(env, "apply", str(targets), "--dry-run")
        assert code == 0 and "plan: nothing to do" in out, out + err
        for target in ("slow-default", "slow-30"):
            code, _, err = await cli(env, "remove", target)
            assert code == 0, err
