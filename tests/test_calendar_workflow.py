"""Calendar targets on the time-skipping test server (issue 31): months of a weekly slot
through both of Berlin's DST changes, and a pause across calendar slots, with real
activities against real Postgres (which decides each next slot) and a real page server."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import asyncpg
import pytest
from temporalio.testing import WorkflowEnvironment

from pricewatch.calendar import Calendar
from pricewatch.models import CheckKind, TargetConfig
from tests.conftest import PageServer, Start
from tests.helpers import new_target, rows, running_worker
from workflows.monitor import MonitorTarget

BERLIN = ZoneInfo("Europe/Berlin")


def on_calendar(config: TargetConfig, calendar: Calendar) -> TargetConfig:
    """The target on `calendar` (its interval_seconds then the calendar's spacing)."""
    written = config.model_dump(exclude={"interval_seconds"})
    return TargetConfig.model_validate({**written, "calendar": calendar})


def scheduled(records: list[asyncpg.Record]) -> list[datetime]:
    return [r["scheduled_for"] for r in records if r["kind"] == CheckKind.SCHEDULED]


async def test_a_weekly_slot_keeps_its_local_time_through_both_dst_changes(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """Sundays 02:30 in Berlin from March to November 2027: one row per Sunday, none
    skipped; 02:30 local all year except 28 March, when 02:30 does not exist and the slot is
    the gap's end (03:00 CEST = 01:00Z); on 31 October 02:30 happens twice and the slot is
    the first (CEST, 00:30Z), never the second."""
    now = await time_skipping_env.get_current_time()
    begin = datetime(2027, 3, 14, tzinfo=UTC)
    assert now < begin, "the test's window must lie ahead of the server's clock"
    config = on_calendar(new_target(page_server), Calendar.parse("30 2 * * sun", "Europe/Berlin"))
    assert config.interval_seconds == 7 * 24 * 3600, "a weekly calendar's spacing"
    async with running_worker(time_skipping_env.client, task_queue, pool):
        handle = await start(config, start_at=begin)
        await time_skipping_env.sleep(datetime(2027, 11, 15, tzinfo=UTC) - now)
        status = await handle.query(MonitorTarget.status)
    records = await rows(pool, config.target_id)
    slots = scheduled(records)
    assert [r["status"] for r in records if r["status"] != "unchanged"] == []
    assert slots[0] == datetime(2027, 3, 14, 1, 30, tzinfo=UTC)  # CET: 02:30 = 01:30Z
    assert datetime(2027, 3, 28, 1, 0, tzinfo=UTC) in slots  # the gap's end
    assert datetime(2027, 10, 31, 0, 30, tzinfo=UTC) in slots  # the first 02:30
    assert datetime(2027, 10, 31, 1, 30, tzinfo=UTC) not in slots  # not the second
    local = [slot.astimezone(BERLIN) for slot in slots]
    assert all(moment.weekday() == 6 for moment in local), "every slot on a Sunday"
    assert [(m.hour, m.minute) for m in local if m.date() != datetime(2027, 3, 28).date()] == [
        (2, 30)
    ] * (len(local) - 1)
    sundays = (datetime(2027, 11, 14) - datetime(2027, 3, 14)).days // 7 + 1
    assert len(slots) == sundays == len(set(slots)), "every Sunday once"
    assert status.next_slot == datetime(2027, 11, 21, 1, 30, tzinfo=UTC)


async def test_calendar_slots_passed_while_paused_are_skipped_and_the_next_is_on_it(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """Weekdays 08:00 in New York: a pause over a week leaves its slots unchecked, a resume
    takes the next weekday 08:00 (no burst), and Saturdays and Sundays never have a slot."""
    now = await time_skipping_env.get_current_time()
    config = on_calendar(
        new_target(page_server), Calendar.at(["08:00"], "weekdays", "America/New_York")
    )
    async with running_worker(time_skipping_env.client, task_queue, pool):
        handle = await start(config, start_at=now)
        await time_skipping_env.sleep(timedelta(days=8))
        await handle.signal(MonitorTarget.pause)
        checked_before = len(scheduled(await rows(pool, config.target_id)))
        await time_skipping_env.sleep(timedelta(days=9))
        assert len(scheduled(await rows(pool, config.target_id))) == checked_before
        resumed_at = await time_skipping_env.get_current_time()
        await handle.signal(MonitorTarget.resume)
        await time_skipping_env.sleep(timedelta(days=6))
    records = await rows(pool, config.target_id)
    slots = scheduled(records)
    new_york = ZoneInfo("America/New_York")
    for slot in slots:
        local = slot.astimezone(new_york)
        assert local.weekday() < 5 and (local.hour, local.minute) == (8, 0), local
    after = [s for s in slots if s > resumed_at]
    assert after and after[0] - resumed_at <= timedelta(days=3), "the next weekday 08:00"
    assert [r["status"] for r in records].count("skipped") == 0, "passed while paused: none"
    assert len(after) >= 4


@pytest.mark.parametrize("offset", [None, 7])
async def test_calendar_slots_a_long_retry_passes_get_skipped_rows_from_the_database(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
    offset: int | None,
) -> None:
    """Hourly in Kolkata (UTC+05:30, so every slot is at :30 UTC): the page answers 503 for
    hours, the slot retries through them, and once it succeeds Postgres moves the schedule
    to the first calendar slot after its clock, writing a `skipped` row for each it passed;
    every row is on the calendar, one per slot, none missing. With an offset (a site's
    place, 1.7) the workflow's slots and the database's are shifted alike."""
    now = await time_skipping_env.get_current_time()
    hourly = Calendar.parse("0 * * * *", "Asia/Kolkata").model_copy(
        update={"offset_seconds": offset}
    )
    config = on_calendar(new_target(page_server), hourly)
    config = config.model_copy(update={"max_attempts": 20})
    page_server.set(f"/{config.target_id}", "busy", status=503)
    async with running_worker(time_skipping_env.client, task_queue, pool):
        await start(config, start_at=now)
        await time_skipping_env.sleep(timedelta(hours=3, minutes=10))
        page_server.set(f"/{config.target_id}", "price 10")
        await time_skipping_env.sleep(timedelta(hours=3))
    records = await rows(pool, config.target_id)
    slots = scheduled(records)
    statuses = [r["status"] for r in records]
    assert "skipped" in statuses and statuses[0] == "unchanged", statuses
    assert all((s.minute, s.second) == (30, offset or 0) for s in slots), slots
    assert slots == [slots[0] + k * timedelta(hours=1) for k in range(len(slots))], "a gap"
