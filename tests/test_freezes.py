"""A frozen worker told truthfully (issue 48): a stall is a span when nothing of the process
ran; one spent with little CPU time is a freeze, told in one line at the thaw and one
summary naming the checks it cost. A fetch that failed while the worker stalled is not the
page's failure: no row says it timed out, and the attempt says why it gave up. A fetch's
failure nobody reads (the attempt cancelled as it fails) is never an asyncio "Task
exception was never retrieved"."""

import asyncio
import gc
import logging
import os
import re
import signal
import time
from datetime import timedelta

import asyncpg
import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities import checks, freezes, store
from activities.checks import WORKER_STALLED, CheckActivities
from activities.freezes import STALL_AFTER, SUMMARY_AFTER, Stalls
from fetchers.http import FetchError, Page, Request
from pricewatch.models import CheckInput, TargetConfig
from tests.conftest import PageServer
from tests.helpers import SLOT, attempt, cli, worker_process
from tests.waits import eventually


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


# Past the lease (45 s), the fetch's deadline (30 s) and the heartbeat timeout (20 s).
FROZEN_FOR = 50


@pytest.mark.long
@pytest.mark.e2e
@pytest.mark.timeout(240)
async def test_a_worker_frozen_past_its_lease_tells_it_in_plain_words(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer
) -> None:
    """A real worker, stopped (SIGSTOP) with a check in flight, for longer than its lease,
    then continued: after the thaw its output holds the freeze's line, no traceback and no
    timeout blamed on the page (which answered at once), and no row calls it one."""
    output: list[bytes] = []
    page_server.set("/p", "price 10")
    hold = page_server.hold_next("/p")
    async with worker_process(env, output) as worker:
        code, _, err = await cli(env, "add", "frozen", page_server.url("/p"), "--every", "5s")
        assert code == 0, err
        await asyncio.wait_for(hold.arrived.wait(), timeout=60)
        assert worker.stdout is not None
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            hold.release.set()  # the page answers; the worker is not there to read it
            await asyncio.sleep(FROZEN_FOR)
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        thawed = await pool.fetchval("SELECT now()")

        async def checked_after_the_thaw() -> bool:
            query = (
                "SELECT count(*) FROM source_checks WHERE target_id = 'frozen' "
                "AND status IN ('unchanged', 'changed') AND checked_at > $1"
            )
            return bool(await pool.fetchval(query, thawed))

        await eventually(checked_after_the_thaw, within=60, what="a check after the thaw")
        await asyncio.sleep(freezes.SUMMARY_AFTER + 2)
        assert (await cli(env, "remove", "frozen"))[0] == 0
    log = b"".join(output).decode(errors="replace")
    print(log)
    assert re.search(r"this worker was frozen for (4\d|5\d|6\d) s", log), log
    assert "Traceback" not in log, log
    assert "timed out" not in log, log
    assert "never retrieved" not in log, log
    assert "Task not found" not in log and "Cannot find activity" not in log, log
    assert "event loop was blocked" not in log, log
    rows = await pool.fetch(
        "SELECT status, error_message FROM source_checks WHERE target_id = 'frozen' "
        "AND error_message LIKE '%timed out%'"
    )
    assert not rows, [dict(row) for row in rows]
