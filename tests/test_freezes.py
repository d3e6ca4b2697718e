"""A frozen worker told truthfully (issue 48): a stall is a span when nothing of the process
ran; one spent with little CPU time is a freeze, told in one line at the thaw and one
summary naming the checks it cost. A fetch that failed while the worker stalled is not the
page's failure: no row says it timed out, and the attempt says why it gave up. A fetch's
failure nobody reads (the attempt cancelled as it fails) is never an asyncio "Task
exception was never retrieved"."""

import asyncio
import gc
import logging
import time
from datetime import timedelta

import asyncpg
import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities import checks, freezes, store
from activities.checks import WORKER_STALLED, CheckActivities
from activities.fetch import FetchError, Page, Request
from activities.freezes import STALL_AFTER, SUMMARY_AFTER, Stalls
from pricewatch.models import CheckInput, TargetConfig
from tests.conftest import PageServer
from tests.helpers import SLOT, attempt


def test_a_freeze_is_one_line_at_the_thaw_and_one_naming_what_it_cost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "pricewatch.outages")
    stalls = Stalls()
    t = time.monotonic() - 200  # the checks report at the real time, after the thaw
    for step in range(10):  # a healthy watchdog: no line
        stalls.beat(now=t + step * 0.1, cpu=0.01 * step)
    assert caplog.records == []
    t += 1.0
    stalls.beat(now=t + 92, cpu=0.1)  # 92 s with no CPU time spent: frozen
    stalls.gave_up("a")
    stalls.gave_up("b")
    stalls.gave_up("a")
    assert stalls.stalled_since(t + 50, now=t + 92) == pytest.approx(92.1)  # since t - 0.1
    assert stalls.stalled_since(t + 50, now=t + 92, frozen=True) == pytest.approx(92.1)
    assert stalls.stalled_since(t + 92.5, now=t + 93) == 0
    for step in range(1, int(SUMMARY_AFTER * 10) + 5):
        stalls.beat(now=t + 92 + step * 0.1, cpu=0.1)
    assert [r.getMessage() for r in caplog.records] == [
        "this worker was frozen for 92 s (stopped, or its machine paused)",
        "after the freeze: 2 checks it held were taken over or retried (a, b)",
    ]


def test_a_busy_stall_is_a_stall_but_not_a_freeze(caplog: pytest.LogCaptureFixture) -> None:
    """The loop stuck in C holding the GIL stops the watchdog too, but spends CPU time:
    the loop probe's `blocked` line names where, not a freeze."""
    caplog.set_level(logging.DEBUG, "pricewatch.outages")
    stalls = Stalls()
    stalls.beat(now=10.0, cpu=1.0)
    stalls.beat(now=10.0 + STALL_AFTER * 2, cpu=1.0 + STALL_AFTER * 2)
    assert caplog.records == []
    assert stalls.stalled_since(0.0, now=10.0 + STALL_AFTER * 2) == pytest.approx(STALL_AFTER * 2)
    assert stalls.stalled_since(0.0, now=10.0 + STALL_AFTER * 2, frozen=True) == 0


def test_a_stall_the_watchdog_has_not_told_yet_counts() -> None:
    """After a thaw the event loop may run before the watchdog thread: a beat overdue by
    STALL_AFTER is a stall already; once the watchdog stops, nothing is."""
    stalls = Stalls()
    stalls.beat(now=10.0, cpu=0.0)
    assert stalls.stalled_since(5.0, now=10.0 + STALL_AFTER + 1) == pytest.approx(STALL_AFTER + 1)
    stalls.stop()
    assert stalls.stalled_since(5.0, now=100.0) == 0


@pytest.fixture
async def check(pool: asyncpg.Pool, page_server: PageServer) -> CheckInput:
    page_server.set("/p", "price 10")
    config = TargetConfig(target_id="acme", url=page_server.url("/p"), interval_seconds=3600)
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    return CheckInput(target_id="acme", url=config.url, slot=SLOT)


def stall_now(seconds: float) -> None:
    """The process-wide tracker learns of a freeze that just ended."""
    now = time.monotonic()
    freezes.STALLS.beat(now=now - seconds, cpu=time.process_time())
    freezes.STALLS.beat(now=now, cpu=time.process_time())


async def test_a_deadline_that_ran_out_while_the_worker_was_frozen_is_not_the_pages(
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    check: CheckInput,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def frozen_mid_fetch(request: Request) -> Page:
        stall_now(40)
        raise FetchError("timed out: the page was not complete within 30s", transient=True)

    caplog.set_level(logging.DEBUG, "pricewatch.checks")
    activities = CheckActivities(pool, http, fetcher=frozen_mid_fetch)
    try:
        with pytest.raises(ApplicationError) as refused:
            await attempt(1).run(activities.check_slot, check)
    finally:
        freezes.STALLS.stop()
    assert refused.value.type == WORKER_STALLED
    assert "this worker was stalled for 40 s during the fetch" in refused.value.message
    assert "timed out" not in refused.value.message
    assert await pool.fetchval("SELECT count(*) FROM source_checks") == 0
    assert await pool.fetchval("SELECT lease_token FROM monitor_targets") is None
    lines = [r for r in caplog.records if r.name == "pricewatch.checks"]
    assert lines and all(r.levelno == logging.DEBUG for r in lines), "its line at debug only"
    assert "acme" in freezes.STALLS.given_up


async def test_the_same_timeout_without_a_freeze_is_the_pages(
    pool: asyncpg.Pool, http: httpx.AsyncClient, check: CheckInput
) -> None:
    async def slow_page(request: Request) -> Page:
        raise FetchError("timed out: the page was not complete within 30s", transient=True)

    activities = CheckActivities(pool, http, fetcher=slow_page)
    with pytest.raises(ApplicationError) as failed:
        await attempt(1).run(activities.check_slot, check)
    assert failed.value.type != WORKER_STALLED
    error = await pool.fetchval("SELECT error_message FROM source_checks")
    assert error == "timed out: the page was not complete within 30s"


async def test_a_fetch_failing_as_its_attempt_is_cancelled_leaves_no_unread_exception(
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    check: CheckInput,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a thaw does: the fetch's deadline and the attempt's cancel come in one turn of
    the loop; the fetch's error must still be read by someone."""
    unread: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unread.append(context))
    monkeypatch.setattr(checks, "HEARTBEAT_EVERY", timedelta(seconds=0.05))
    fails = asyncio.Event()

    async def fails_when_told(request: Request) -> Page:
        await fails.wait()
        raise FetchError("timed out: the page was not complete within 30s", transient=True)

    activities = CheckActivities(pool, http, fetcher=fails_when_told)
    env = attempt(1)
    running = asyncio.create_task(env.run(activities.check_slot, check))
    await asyncio.sleep(0.3)
    fails.set()
    await asyncio.sleep(0)  # the fetch fails...
    running.cancel()  # ...and the attempt is cancelled before it reads why
    with pytest.raises(asyncio.CancelledError):
        await running
    gc.collect()
    await asyncio.sleep(0.1)
    loop.set_exception_handler(None)
    assert not unread, unread
