"""MonitorTarget on the time-skipping test server: days of cadence in seconds, with real
activities against real Postgres and a real page server on 127.0.0.1."""

import asyncio
import logging
from datetime import datetime, timedelta

import asyncpg
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.testing import WorkflowEnvironment

from activities import store
from client.temporal import DATA_CONVERTER, local_activity_type
from pricewatch.models import (
    CheckKind,
    CheckResult,
    CheckStatus,
    MonitorState,
    MonitorStatus,
    RetryRequest,
)
from pricewatch.names import Update
from pricewatch.policy import LEGACY_RUN_CHECKS, RUN_CHECKS
from pricewatch.slots import format_slot
from tests.conftest import PageServer, Start
from tests.helpers import HOUR, new_target, rows, running_worker
from tests.waits import eventually
from workers.worker import WorkerTuning
from workflows.monitor import MonitorTarget


async def wait_for_event(
    handle: WorkflowHandle[MonitorTarget, None],
    event_type: "EventType.ValueType",
    within: timedelta,
) -> None:
    """Poll the history (real seconds) until an event of this type is in it."""

    async def found() -> bool:
        history = await handle.fetch_history()
        return any(event.event_type == event_type for event in history.events)

    await eventually(found, within=within.total_seconds(), what=EventType.Name(event_type))


async def checked(pool: asyncpg.Pool, target_id: str) -> bool:
    """Whether a slot of the target was checked (not only skipped)."""
    return "unchanged" in [r["status"] for r in await rows(pool, target_id)]


def scheduled(records: list[asyncpg.Record]) -> list[datetime]:
    return [r["scheduled_for"] for r in records if r["kind"] == CheckKind.SCHEDULED]


def assert_on_grid(slots: list[datetime], anchor: datetime, interval: timedelta) -> None:
    for slot in slots:
        assert (slot - anchor) % interval == timedelta(0), f"{slot} is off the grid"
    assert len(set(slots)) == len(slots), "a slot was recorded twice"


async def test_days_of_cadence_one_row_per_slot_and_one_change(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """Three days at 1 h: every slot once, on the grid, no gaps; a change is `changed` once."""
    client = time_skipping_env.client
    config = new_target(page_server)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        handle = await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=36, minutes=30))
        page_server.set(f"/{config.target_id}", "price 12")
        await time_skipping_env.sleep(timedelta(hours=36))
        status = await handle.query(MonitorTarget.status)
    records = await rows(pool, config.target_id)
    slots = scheduled(records)
    assert_on_grid(slots, anchor, HOUR)
    assert slots == [anchor + k * HOUR for k in range(len(slots))], "a slot was skipped"
    assert len(slots) >= 71
    assert [r["status"] for r in records].count("changed") == 1
    assert records[0]["status"] == "unchanged" and records[0]["previous_hash"] is None
    assert all(r["attempt_count"] == 1 for r in records)
    assert status.next_slot == slots[-1] + HOUR
    target = await pool.fetchrow("SELECT * FROM monitor_targets WHERE id = $1", config.target_id)
    assert target is not None
    assert target["next_slot"] == status.next_slot
    assert target["lease_token"] is None


async def test_pause_stops_slots_and_resume_continues_on_the_grid_without_a_burst(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    client = time_skipping_env.client
    config = new_target(page_server)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        handle = await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=3, minutes=30))
        await handle.signal(MonitorTarget.pause)
        before_pause = len(await rows(pool, config.target_id))
        assert (await handle.query(MonitorTarget.status)).paused
        await time_skipping_env.sleep(timedelta(hours=10))
        assert len(await rows(pool, config.target_id)) == before_pause
        enabled = await pool.fetchval(
            "SELECT enabled FROM monitor_targets WHERE id = $1", config.target_id
        )
        assert enabled is False
        resumed_at = await time_skipping_env.get_current_time()
        await handle.signal(MonitorTarget.resume)
        await time_skipping_env.sleep(timedelta(minutes=1))
        assert len(await rows(pool, config.target_id)) == before_pause, "resume replayed a slot"
        await time_skipping_env.sleep(timedelta(hours=3))
    slots = scheduled(await rows(pool, config.target_id))
    assert_on_grid(slots, anchor, HOUR)
    after = [s for s in slots if s > resumed_at]
    assert after and after[0] - resumed_at < HOUR, "resume must take the next grid point"
    assert len(after) in (3, 4)


async def test_slots_overdue_when_a_late_pause_takes_effect_get_skipped_rows(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """No worker ran while slots came due; then pause and resume arrived together. Those
    slots were due before the pause took effect, so they are not silently dropped: each
    gets a skipped row. The grid goes on after the resume. (Real seconds: the test server
    does not skip time while a workflow task waits for a worker.)"""
    client = time_skipping_env.client
    second = timedelta(seconds=1)
    config = new_target(page_server, interval=2 * second)
    # The anchor leaves the first worker time to shut down before anything falls due.
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + 5 * second
    # No cache, so no sticky queue: the next task goes to whichever worker polls next.
    async with running_worker(
        client, task_queue, pool, tuning=WorkerTuning(max_cached_workflows=0, sandboxed=True)
    ):
        handle = await start(config, start_at=anchor, min_interval_seconds=1)
        assert (await handle.query(MonitorTarget.status)).next_slot == anchor
        # Stop only once the workflow sleeps: a task this worker takes while stopping stays
        # in flight until it times out (10 s), and signals wait behind it, so the anchor
        # would be checked late (its overdue slots skipped by that check) before the pause.
        await wait_for_event(handle, EventType.EVENT_TYPE_TIMER_STARTED, within=4 * second)
    # The scenario, not a wait: real time passes with no worker, so that the anchor, +2 s
    # and +4 s come due (the assertions need two of them, not an exact count).
    await asyncio.sleep(9)
    await handle.signal(MonitorTarget.pause)
    await handle.signal(MonitorTarget.resume)
    async with running_worker(client, task_queue, pool):
        await eventually(lambda: checked(pool, config.target_id), what="a slot checked")
    records = await rows(pool, config.target_id)
    statuses = [r["status"] for r in records]
    assert scheduled(records) == [anchor + 2 * k * second for k in range(len(records))]
    first_checked = statuses.index("unchanged")
    assert first_checked >= 2 and set(statuses[:first_checked]) == {"skipped"}, statuses
    assert all("pause" in r["error_message"] for r in records[:first_checked])
    assert statuses[-1] == "unchanged"


async def test_slots_due_before_the_first_task_ran_get_skipped_rows(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """Started with no worker (its first task sat on one that died): the slots that came due
    before the first task ran were due, so each gets a skipped row; the latest is checked."""
    second = timedelta(seconds=1)
    config = new_target(page_server, interval=2 * second)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + 2 * second
    await start(config, start_at=anchor, min_interval_seconds=1)
    # The scenario, not a wait: the anchor, +2 s and +4 s come due with no worker (the
    # assertions need two of them, not an exact count).
    await asyncio.sleep(7)
    async with running_worker(time_skipping_env.client, task_queue, pool):
        await eventually(lambda: checked(pool, config.target_id), what="a slot checked")
    records = await rows(pool, config.target_id)
    assert scheduled(records) == [anchor + 2 * k * second for k in range(len(records))]
    statuses = [r["status"] for r in records]
    first_checked = statuses.index("unchanged")
    assert first_checked >= 2 and set(statuses[:first_checked]) == {"skipped"}, statuses
    assert "late start" in records[0]["error_message"]


async def test_a_pause_and_resume_before_the_first_task_leave_the_target_running(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """Both signals land in the run's first workflow task, before it registers (as after a
    reset to that task, which re-applies them): the target is watched, not stuck failing."""
    config = new_target(page_server, interval=timedelta(seconds=2))
    handle = await start(config, min_interval_seconds=1)
    await handle.signal(MonitorTarget.pause)
    await handle.signal(MonitorTarget.resume)
    async with running_worker(time_skipping_env.client, task_queue, pool):
        await eventually(lambda: rows(pool, config.target_id), what="the first row")
        status = await handle.query(MonitorTarget.status)
        history = await handle.fetch_history()
    failed = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert not failed, "the first workflow task failed"
    assert not status.paused and status.next_slot is not None
    assert [r["status"] for r in await rows(pool, config.target_id)][:1] == ["unchanged"]


async def test_reconfigure_keeps_the_next_slot_then_uses_the_new_interval(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    client = time_skipping_env.client
    config = new_target(page_server)
    page_server.set("/elsewhere", "other page")
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        handle = await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=2, minutes=30))
        pending = (await handle.query(MonitorTarget.status)).next_slot
        assert pending is not None
        changed = config.model_copy(
            update={"interval_seconds": 3 * 3600, "url": page_server.url("/elsewhere")}
        )
        status = await handle.execute_update(Update.RECONFIGURE, changed, result_type=MonitorStatus)
        assert status.config == changed
        await time_skipping_env.sleep(timedelta(hours=10))
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                Update.RECONFIGURE,
                changed.model_copy(update={"target_id": "other"}),
                result_type=MonitorStatus,
            )
        assert "monitors" in str(refused.value.cause)
    slots = scheduled(await rows(pool, config.target_id))
    later = [s for s in slots if s >= pending]
    assert later[:4] == [pending + k * timedelta(hours=3) for k in range(4)]
    assert page_server.hits["/elsewhere"] == len(later)
    row = await pool.fetchrow("SELECT * FROM monitor_targets WHERE id = $1", config.target_id)
    assert row is not None and row["interval_seconds"] == 3 * 3600


async def test_continue_as_new_keeps_the_schedule(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """Runs roll over every 4 checks; no slot is skipped or doubled at the boundaries."""
    client = time_skipping_env.client
    config = new_target(page_server)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        handle = await start(config, start_at=anchor, max_checks_per_run=4)
        await time_skipping_env.sleep(timedelta(hours=13, minutes=30))
        status = await handle.query(MonitorTarget.status)
        latest_run = (await client.get_workflow_handle(handle.id).describe()).run_id
    slots = scheduled(await rows(pool, config.target_id))
    assert slots == [anchor + k * HOUR for k in range(13)]
    assert status.checks_completed == 13
    assert latest_run != handle.result_run_id, "expected the workflow to continue as new"


async def test_runs_are_short_and_a_run_started_by_1_0_moves_to_the_new_length(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """A new target's runs hold RUN_CHECKS checks; a run that carries 1.0's 300 continues as
    new once it has RUN_CHECKS (a patch: 1.0 histories replay as they ran), and the runs
    after it carry the new length."""
    client = time_skipping_env.client
    legacy, fresh = new_target(page_server), new_target(page_server)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        old = await start(legacy, start_at=anchor, max_checks_per_run=LEGACY_RUN_CHECKS)
        new = await start(fresh, start_at=anchor)
        await time_skipping_env.sleep((2 * RUN_CHECKS + 1) * HOUR)
        old_history = await client.get_workflow_handle(
            old.id, run_id=old.result_run_id
        ).fetch_history()
        latest = client.get_workflow_handle(old.id)
        latest_state = (await latest.fetch_history()).events[0]
        new_history = await client.get_workflow_handle(
            new.id, run_id=new.result_run_id
        ).fetch_history()
    for history in (old_history, new_history):
        checks = sum(local_activity_type(e) == "check_slot" for e in history.events)
        assert checks == RUN_CHECKS
        ended = history.events[-1].event_type
        assert ended == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    carried = DATA_CONVERTER.payload_converter.from_payloads(
        latest_state.workflow_execution_started_event_attributes.input.payloads, [MonitorState]
    )[0]
    assert carried.max_checks_per_run == RUN_CHECKS
    for config in (legacy, fresh):
        slots = scheduled(await rows(pool, config.target_id))
        assert slots == [anchor + k * HOUR for k in range(len(slots))] and len(slots) > RUN_CHECKS


async def test_permanent_failure_is_recorded_once_and_the_schedule_moves_on(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    client = time_skipping_env.client
    config = new_target(page_server)
    page_server.set(f"/{config.target_id}", "gone", status=404)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, minutes=30))
        page_server.set(f"/{config.target_id}", "back")
        await time_skipping_env.sleep(timedelta(hours=2))
    records = await rows(pool, config.target_id)
    assert [r["status"] for r in records] == ["failed", "unchanged", "unchanged"]
    assert records[0]["attempt_count"] == 1
    assert "404" in records[0]["error_message"]
    assert page_server.hits[f"/{config.target_id}"] == 3, "a permanent error must not retry"


async def test_expected_failures_log_one_line_not_a_traceback(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 404 and a 503 are what the retry policy is for, not faults: the SDK logs them at
    debug level (BENIGN), and the check says what happened in one line."""
    client = time_skipping_env.client
    gone, busy = new_target(page_server), new_target(page_server)
    page_server.set(f"/{gone.target_id}", "gone", status=404)
    page_server.set(f"/{busy.target_id}", "busy", status=503)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    caplog.set_level(logging.INFO)
    async with running_worker(client, task_queue, pool):
        await start(gone, start_at=anchor)
        await start(busy.model_copy(update={"max_attempts": 2}), start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, minutes=5))
    assert [r["status"] for r in await rows(pool, gone.target_id)] == ["failed"]
    assert [r["status"] for r in await rows(pool, busy.target_id)] == ["failed"]
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.WARNING]
    assert not tracebacks, [r.getMessage() for r in tracebacks]
    lines = [r.getMessage() for r in caplog.records if r.name == "pricewatch.checks"]
    assert any(
        line.startswith(gone.target_id) and "404" in line and "(permanent), slot failed" in line
        for line in lines
    ), lines
    assert any("503" in line and "(transient), next attempt in 30s" in line for line in lines)
    assert any("503" in line and "(transient), slot failed" in line for line in lines)


async def test_transient_failure_retries_on_the_same_row(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    client = time_skipping_env.client
    config = new_target(page_server)
    page_server.queue(f"/{config.target_id}", (503, "busy"), (503, "busy"))
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, minutes=30))
    records = await rows(pool, config.target_id)
    assert len(records) == 1
    assert records[0]["status"] == "unchanged"
    assert records[0]["attempt_count"] == 3
    assert records[0]["error_message"] is None


async def test_slots_due_while_a_check_retries_get_a_skipped_row_each(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """Three 503s back off 30 + 60 + 120 s on a 1-minute grid: the slots that came due
    meanwhile are not lost silently. Each gets a `skipped` row; the cadence goes on."""
    client = time_skipping_env.client
    minute = timedelta(minutes=1)
    config = new_target(page_server, interval=minute)
    page_server.queue(f"/{config.target_id}", *[(503, "busy")] * 3)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + minute
    async with running_worker(client, task_queue, pool):
        await start(config, start_at=anchor, min_interval_seconds=60)
        await time_skipping_env.sleep(timedelta(minutes=7, seconds=30))
    records = await rows(pool, config.target_id)
    assert scheduled(records) == [anchor + k * minute for k in range(len(records))]  # no gap
    assert len(records) >= 7
    assert (records[0]["status"], records[0]["attempt_count"]) == ("unchanged", 4)
    assert {r["status"] for r in records[1:]} == {"unchanged", "skipped"}
    assert records[-1]["status"] == "unchanged"  # the cadence goes on


async def test_exhausted_retries_record_the_slot_failed_and_the_next_slot_runs(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    client = time_skipping_env.client
    config = new_target(page_server, interval=timedelta(hours=2))
    page_server.queue(f"/{config.target_id}", *[(503, "busy")] * 5)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=3, minutes=30))
    records = await rows(pool, config.target_id)
    assert [r["status"] for r in records] == ["failed", "unchanged"]
    assert records[0]["attempt_count"] == 5
    assert "503" in records[0]["error_message"]
    assert scheduled(records) == [anchor, anchor + timedelta(hours=2)]


async def test_check_now_has_its_own_identity_and_leaves_the_grid_alone(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    client = time_skipping_env.client
    config = new_target(page_server)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        handle = await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, minutes=30))
        result = await handle.execute_update("check_now", result_type=CheckResult)
        assert result.kind is CheckKind.MANUAL
        assert result.work_id.startswith(f"{config.target_id}:manual:")
        assert result.status is CheckStatus.UNCHANGED
        assert (await handle.query(MonitorTarget.status)).next_slot == anchor + HOUR
        await time_skipping_env.sleep(timedelta(hours=1))
    records = await rows(pool, config.target_id)
    assert scheduled(records) == [anchor, anchor + HOUR]
    assert [r["kind"] for r in records].count("manual") == 1


async def test_duplicate_start_is_a_no_op_and_remove_deletes_the_target(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    client = time_skipping_env.client
    config = new_target(page_server)
    async with running_worker(client, task_queue, pool):
        first = await start(config)
        second = await start(config)
        assert first.result_run_id == second.result_run_id
        await time_skipping_env.sleep(timedelta(minutes=90))
        assert await rows(pool, config.target_id)
        await first.signal(MonitorTarget.remove)
        await first.result()
    assert await rows(pool, config.target_id) == []
    assert (
        await pool.fetchval("SELECT count(*) FROM monitor_targets WHERE id = $1", config.target_id)
        == 0
    )


async def test_interval_below_the_minimum_is_refused_without_writing(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """A start from the Temporal CLI/UI bypasses the CLI's checks; the workflow refuses."""
    client = time_skipping_env.client
    too_fast = new_target(page_server, interval=timedelta(minutes=5))
    ok = new_target(page_server)
    async with running_worker(client, task_queue, pool):
        handle = await start(too_fast)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        assert "below this target's minimum" in str(failed.value.cause)
        assert await pool.fetchval("SELECT count(*) FROM monitor_targets") == 0

        running = await start(ok)
        with pytest.raises(WorkflowUpdateFailedError):
            await running.execute_update(
                Update.RECONFIGURE,
                ok.model_copy(update={"interval_seconds": 60}),
                result_type=MonitorStatus,
            )
        assert (await running.query(MonitorTarget.status)).config == ok


async def test_a_lost_target_row_is_mirrored_again_and_no_slot_is_lost(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """The row vanishes (a restored database, a lost sync): the next check notices, the
    workflow re-syncs its mirror, and every slot is still recorded."""
    client = time_skipping_env.client
    config = new_target(page_server)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, minutes=30))
        await pool.execute("DELETE FROM monitor_targets WHERE id = $1", config.target_id)
        await time_skipping_env.sleep(timedelta(hours=4))
    slots = scheduled(await rows(pool, config.target_id))
    assert slots == [anchor + k * HOUR for k in range(1, 5)]  # the first went with the row


async def hits_after(
    env: WorkflowEnvironment, pages: PageServer, path: str, until: datetime
) -> int:
    """Skip to `until` (workflow time) and count the requests the page got by then."""
    await env.sleep(until - await env.get_current_time())
    return pages.hits[path]


async def test_transient_retries_back_off_from_30_seconds_doubling(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    env = time_skipping_env
    config = new_target(page_server)
    path = f"/{config.target_id}"
    page_server.queue(path, (503, "busy"), (503, "busy"), (503, "busy"))
    slot = (await env.get_current_time()).replace(microsecond=0) + timedelta(minutes=5)

    def seconds(n: int) -> datetime:
        return slot + timedelta(seconds=n)

    async with running_worker(env.client, task_queue, pool):
        await start(config, start_at=slot)
        assert await hits_after(env, page_server, path, seconds(10)) == 1
        assert await hits_after(env, page_server, path, seconds(25)) == 1
        assert await hits_after(env, page_server, path, seconds(40)) == 2  # +30 s
        assert await hits_after(env, page_server, path, seconds(85)) == 2
        assert await hits_after(env, page_server, path, seconds(100)) == 3  # +60 s
        assert await hits_after(env, page_server, path, seconds(205)) == 3
        assert await hits_after(env, page_server, path, seconds(220)) == 4  # +120 s
    records = await rows(pool, config.target_id)
    assert [(r["status"], r["attempt_count"]) for r in records] == [("unchanged", 4)]


async def test_retry_after_sets_the_next_delay(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    env = time_skipping_env
    config = new_target(page_server)
    path = f"/{config.target_id}"
    page_server.queue(path, (429, "slow down"), headers={"Retry-After": "300"})
    slot = (await env.get_current_time()).replace(microsecond=0) + timedelta(minutes=5)
    async with running_worker(env.client, task_queue, pool):
        await start(config, start_at=slot)
        assert await hits_after(env, page_server, path, slot + timedelta(seconds=200)) == 1
        assert await hits_after(env, page_server, path, slot + timedelta(seconds=310)) == 2
    records = await rows(pool, config.target_id)
    assert [(r["status"], r["attempt_count"]) for r in records] == [("unchanged", 2)]


async def test_attempts_per_slot_are_configurable(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    config = new_target(page_server).model_copy(update={"max_attempts": 2})
    page_server.set(f"/{config.target_id}", "down", status=502)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(time_skipping_env.client, task_queue, pool):
        await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, minutes=30))
    records = await rows(pool, config.target_id)
    assert [(r["status"], r["attempt_count"]) for r in records] == [("failed", 2)]
    assert page_server.hits[f"/{config.target_id}"] == 2


async def test_retry_reruns_a_failed_slot_on_its_row_and_never_refetches_a_good_one(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    config = new_target(page_server)
    path = f"/{config.target_id}"
    page_server.set(path, "gone", status=404)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(time_skipping_env.client, task_queue, pool):
        handle = await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, minutes=30))
        page_server.set(path, "back")
        request = RetryRequest(slot=anchor)
        retried = await handle.execute_update("retry_slot", request, result_type=CheckResult)
        assert (retried.status, retried.attempt_count) == (CheckStatus.UNCHANGED, 2)
        hits = page_server.hits[path]
        again = await handle.execute_update("retry_slot", request, result_type=CheckResult)
        assert again == retried and page_server.hits[path] == hits, "fetched a good slot again"
        with pytest.raises(WorkflowUpdateFailedError):
            future = RetryRequest(slot=anchor + 5 * HOUR)
            await handle.execute_update("retry_slot", future, result_type=CheckResult)
        assert (await handle.query(MonitorTarget.status)).next_slot == anchor + HOUR
    records = await rows(pool, config.target_id)
    assert [(r["work_id"], r["status"], r["attempt_count"]) for r in records] == [
        (f"{config.target_id}:{format_slot(anchor)}", "unchanged", 2)
    ]


async def test_failing_slots_in_a_row_make_a_target_unhealthy_until_one_succeeds(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    config = new_target(page_server).model_copy(update={"unhealthy_after": 2})
    path = f"/{config.target_id}"
    page_server.set(path, "gone", status=410)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(time_skipping_env.client, task_queue, pool):
        handle = await start(config, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, minutes=30))
        status = await handle.query(MonitorTarget.status)
        assert (status.failure_streak, status.unhealthy) == (1, False)
        await time_skipping_env.sleep(timedelta(hours=2))
        status = await handle.query(MonitorTarget.status)
        assert (status.failure_streak, status.unhealthy) == (3, True)
        assert [r["unhealthy"] for r in await store.list_targets(pool)] == [True]
        page_server.set(path, "back")
        await time_skipping_env.sleep(timedelta(hours=1))
        status = await handle.query(MonitorTarget.status)
        assert (status.failure_streak, status.unhealthy) == (0, False)
        assert [r["unhealthy"] for r in await store.list_targets(pool)] == [False]


@pytest.mark.parametrize(
    ("remove_after", "page_hits", "stopped_by"),
    [
        # The local first attempt failed; the workflow backs off on a timer for 30 s.
        (timedelta(seconds=5), 1, EventType.EVENT_TYPE_TIMER_CANCELED),
        # The second attempt (a normal activity) failed; the server backs off for 60 s.
        (timedelta(seconds=45), 2, EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED),
    ],
)
async def test_a_removal_does_not_wait_out_a_checks_backoff(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
    remove_after: timedelta,
    page_hits: int,
    stopped_by: "EventType.ValueType",
) -> None:
    client = time_skipping_env.client
    config = new_target(page_server)
    page_server.set(f"/{config.target_id}", "busy", status=503)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        handle = await start(config, start_at=anchor)
        await time_skipping_env.sleep(anchor - await time_skipping_env.get_current_time())
        await time_skipping_env.sleep(remove_after)
        assert page_server.hits[f"/{config.target_id}"] == page_hits
        await handle.signal(MonitorTarget.remove)
        await handle.result()
        events = [e.event_type for e in (await handle.fetch_history()).events]
    assert stopped_by in events
    assert page_server.hits[f"/{config.target_id}"] == page_hits, "no attempt after the removal"
    assert await rows(pool, config.target_id) == []
    assert not await store.target_exists(pool, config.target_id)
