"""A slot left `retrying` once its schedule moved past it ends `skipped` (issue 41, design
invariant 8: every due slot ends with exactly one final row), against real Postgres.

The chaos soak found such rows: a reset ended the run that was retrying a slot, and the new
run moved the schedule past it (a sync, then a re-run that found the schedule behind), whose
skipped rows left a slot that had a row alone. The schedule never claims a slot behind it
again, so nothing would ever have finished those rows. Every statement that moves the
schedule now finalises them as it passes them; an attempt of the ended run that is still
running and commits later is refused, since the slot already has its final row.
"""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from activities import store
from pricewatch.decisions import final_result
from pricewatch.models import CheckKind, CheckResult, CheckStatus, TargetConfig
from pricewatch.slots import work_id

# Ahead of the database's clock: the next slot follows from the Temporal time a test passes.
T0 = datetime(2036, 8, 7, 8, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
LEASE = timedelta(seconds=90)
TARGET = "acme"
CONFIG = TargetConfig(target_id=TARGET, url="https://example.com/pricing", interval_seconds=3600)
GOOD = store.Outcome(status=CheckStatus.UNCHANGED, result_hash="a" * 64, http_status=200)
CHANGED = store.Outcome(status=CheckStatus.CHANGED, result_hash="b" * 64, previous_hash="a" * 64)
RETRY = store.Outcome(
    status=CheckStatus.RETRYING, error_message="HTTP 503 Service Unavailable",
    http_status=503, next_attempt_in=timedelta(seconds=30),
)  # fmt: skip
# The run that was retrying slot ABANDONED (its attempts' tokens), and the run after it.
OLD_RUN, NEW_RUN = "run-old", "run-new"
ABANDONED = T0 + 2 * HOUR


def wid(slot: datetime) -> str:
    return work_id(TARGET, slot)


async def claim(pool: asyncpg.Pool, execution_id: str, slot: datetime) -> store.Claim:
    return await store.claim(
        pool, target_id=TARGET, work_id=wid(slot), execution_id=execution_id, lease=LEASE,
        on_schedule=True, slot=slot,
    )  # fmt: skip


async def commit(
    pool: asyncpg.Pool, execution_id: str, slot: datetime, outcome: store.Outcome,
    *, advance: bool = True, now: datetime | None = None,
) -> CheckResult | None:  # fmt: skip
    return await store.commit(
        pool, target_id=TARGET, execution_id=execution_id, work_id=wid(slot), slot=slot,
        kind=CheckKind.SCHEDULED, outcome=outcome, advance=advance, temporal_now=now,
    )  # fmt: skip


async def record_failed(pool: asyncpg.Pool, slot: datetime, now: datetime) -> object:
    return await store.record_failed(
        pool, target_id=TARGET, work_id=wid(slot), slot=slot, kind=CheckKind.SCHEDULED,
        error_message="gave up after 5 attempts", advance=True, temporal_now=now,
    )  # fmt: skip


async def rows(pool: asyncpg.Pool) -> dict[datetime, asyncpg.Record]:
    found = await pool.fetch("SELECT * FROM source_checks ORDER BY scheduled_for")
    return {row["scheduled_for"]: row for row in found}


async def retrying_at_abandoned(pool: asyncpg.Pool) -> None:
    """T0 and T0+1h checked; the old run's first attempt at T0+2h failed and holds its
    lease no more; its next attempt is pending when the run ends."""
    await store.sync_target(pool, CONFIG, next_slot=T0, enabled=True)
    for slot in (T0, T0 + HOUR):
        await claim(pool, f"{OLD_RUN}/{slot.hour}/1", slot)
        await commit(pool, f"{OLD_RUN}/{slot.hour}/1", slot, GOOD, now=slot + HOUR / 2)
    await claim(pool, f"{OLD_RUN}/10/1", ABANDONED)
    assert await commit(pool, f"{OLD_RUN}/10/1", ABANDONED, RETRY, advance=False) is not None
    assert (await rows(pool))[ABANDONED]["status"] == "retrying"
    # Final rows among the slots the schedule will pass: on and off the grid.
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status,"
        " result_hash, error_message) VALUES"
        " ($1, $3, $2, now(), 'failed', NULL, 'gave up after 5 attempts'),"
        " ($4, $3, $5, now(), 'unchanged', $6, NULL)",
        wid(T0 + 2.75 * HOUR),
        T0 + 2.75 * HOUR,
        TARGET,
        wid(T0 + 2.5 * HOUR),
        T0 + 2.5 * HOUR,
        "c" * 64,
    )


# Each statement that moves the schedule, moving it past ABANDONED as the new run would:
# its state (restored by the reset) still has an earlier slot, which its sync writes back.
async def by_a_commit(pool: asyncpg.Pool) -> str:
    slot = T0 + HOUR + HOUR / 2  # a slot with no row yet (off the grid: a reconfigure)
    await store.sync_target(pool, CONFIG, next_slot=slot, enabled=True)
    await claim(pool, f"{NEW_RUN}/1/1", slot)
    assert await commit(pool, f"{NEW_RUN}/1/1", slot, GOOD, now=T0 + 3.6 * HOUR) is not None
    return f"the schedule moved past it ({wid(slot)} was final)"


async def by_the_runs_next_commit(pool: asyncpg.Pool) -> str:
    """The run itself moved on: its dead letter for the slot could not be written (say a
    zombie's live lease refused it until the activity's retries ran out), so the database
    still points at the slot when the run commits its next one."""
    slot = T0 + 3 * HOUR
    await claim(pool, f"{NEW_RUN}/1/1", slot)
    assert await commit(pool, f"{NEW_RUN}/1/1", slot, GOOD, now=T0 + 3.5 * HOUR) is not None
    return f"the schedule moved past it ({wid(slot)} was final)"


async def by_a_dead_letter(pool: asyncpg.Pool) -> str:
    slot = T0 + HOUR + HOUR / 2
    await store.sync_target(pool, CONFIG, next_slot=slot, enabled=True)
    assert await record_failed(pool, slot, now=T0 + 3.6 * HOUR) is not None
    return f"the schedule moved past it ({wid(slot)} gave up)"


async def by_a_rerun_of_a_final_slot(pool: asyncpg.Pool) -> str:
    """chaos-0034: the new run re-runs T0+1h, final, and finds the schedule behind."""
    await store.sync_target(pool, CONFIG, next_slot=T0 + HOUR, enabled=True)
    claimed = await claim(pool, f"{NEW_RUN}/1/1", T0 + HOUR)
    assert final_result(claimed.existing, claimed.next_slot) is not None
    moved = await store.advance_past_final(
        pool, target_id=TARGET, slot=T0 + HOUR, temporal_now=T0 + 3.5 * HOUR
    )
    assert moved == T0 + 4 * HOUR
    return "the schedule, found behind, moved past it"


async def by_a_sync(pool: asyncpg.Pool) -> str:
    """A resume (or a new run) mirrors a next slot past it, with a skipped slot."""
    await store.sync_target(
        pool, CONFIG, next_slot=T0 + 4 * HOUR, enabled=True, skipped=[T0 + 3 * HOUR]
    )
    return "the workflow moved its schedule past it"


MOVES: list[Callable[[asyncpg.Pool], Awaitable[str]]] = [
    by_a_commit, by_the_runs_next_commit, by_a_dead_letter, by_a_rerun_of_a_final_slot,
    by_a_sync,
]  # fmt: skip


@pytest.mark.parametrize("move", MOVES, ids=lambda move: move.__name__)
async def test_a_retrying_slot_the_schedule_moves_past_ends_skipped_saying_why(
    pool: asyncpg.Pool, move: Callable[[asyncpg.Pool], Awaitable[str]]
) -> None:
    """The row becomes final in the statement (or the sync's transaction) that moved the
    schedule: `skipped`, naming what happened and what its last attempt said, keeping its
    attempts; the rows the schedule passes were final before and stay as they were."""
    await retrying_at_abandoned(pool)
    before = await rows(pool)
    why = await move(pool)

    after = await rows(pool)
    row = after[ABANDONED]
    assert row["status"] == "skipped" and row["next_attempt_at"] is None
    assert row["error_message"] == (
        f"not checked: its retries were abandoned when {why}; "
        "its last attempt: HTTP 503 Service Unavailable"
    )
    assert row["attempt_count"] == 1 and row["work_id"] == wid(ABANDONED)
    assert [r["status"] for r in after.values()].count("retrying") == 0
    for slot in (T0, T0 + HOUR, T0 + 2.5 * HOUR, T0 + 2.75 * HOUR):
        assert after[slot] == before[slot]
    # Final: the schedule's own check of it is never claimed, and reads it as recorded.
    stale = await claim(pool, f"{NEW_RUN}/9/1", ABANDONED)
    assert not stale.claimed
    assert final_result(stale.existing, stale.next_slot) == stale.existing
    assert stale.existing is not None and stale.existing.status is CheckStatus.SKIPPED


async def test_the_abandoned_attempts_late_commit_is_refused(pool: asyncpg.Pool) -> None:
    """The ended run's attempt still runs, holding its live lease (a zombie: nothing told it
    the run ended), while the new run's sync moves the schedule past its slot. Its result
    arrives after: it records nothing and moves nothing, and its dead letter changes nothing
    either; the slot keeps the one final row it was given."""
    await store.sync_target(pool, CONFIG, next_slot=ABANDONED, enabled=True)
    zombie = f"{OLD_RUN}/10/2"
    await claim(pool, f"{OLD_RUN}/10/1", ABANDONED)
    await commit(pool, f"{OLD_RUN}/10/1", ABANDONED, RETRY, advance=False)
    assert (await claim(pool, zombie, ABANDONED)).claimed
    await store.sync_target(pool, CONFIG, next_slot=T0 + 4 * HOUR, enabled=True)
    abandoned = (await rows(pool))[ABANDONED]
    assert abandoned["status"] == "skipped"

    assert await commit(pool, zombie, ABANDONED, CHANGED, now=T0 + 5.5 * HOUR) is None
    await store.release(pool, target_id=TARGET, execution_id=zombie)
    assert await record_failed(pool, ABANDONED, now=T0 + 5.5 * HOUR) is None
    assert await rows(pool) == {ABANDONED: abandoned}
    next_slot = await pool.fetchval("SELECT next_slot FROM monitor_targets")
    assert next_slot == T0 + 4 * HOUR


async def test_a_placeholder_skipped_row_still_gives_way_to_a_real_result(
    pool: asyncpg.Pool,
) -> None:
    """Only an abandoned slot's row refuses a late result: a slot skipped while its check was
    running (a placeholder) is still replaced by what the check found."""
    await store.sync_target(pool, CONFIG, next_slot=T0, enabled=True)
    await claim(pool, "a", T0)
    await store.sync_target(pool, CONFIG, next_slot=T0, enabled=True, skipped=[T0])
    recorded = await commit(pool, "a", T0, GOOD, now=T0 + HOUR / 2)
    assert recorded is not None and recorded.status is CheckStatus.UNCHANGED


async def test_slots_the_schedule_does_not_pass_keep_retrying(pool: asyncpg.Pool) -> None:
    """A slot being retried that the schedule has not passed (the next slot itself, mid-check)
    and a manual check being retried stay `retrying`: their retries are still coming."""
    await store.sync_target(pool, CONFIG, next_slot=T0, enabled=True)
    await claim(pool, "a", T0)
    await commit(pool, "a", T0, RETRY, advance=False)
    await store.sync_target(pool, CONFIG, next_slot=T0, enabled=True)  # a mid-check sync
    manual = work_id(f"{TARGET}:manual", T0 + HOUR / 4)
    assert (await store.claim(
        pool, target_id=TARGET, work_id=manual, execution_id="m", lease=LEASE,
        on_schedule=False, slot=T0 + HOUR / 4,
    )).claimed  # fmt: skip
    assert await store.commit(
        pool, target_id=TARGET, execution_id="m", work_id=manual, slot=T0 + HOUR / 4,
        kind=CheckKind.MANUAL, outcome=RETRY, advance=False,
    )  # fmt: skip
    await claim(pool, "b", T0)
    assert await commit(pool, "b", T0, GOOD, now=T0 + 2.5 * HOUR) is not None
    statuses = await pool.fetch("SELECT work_id, status FROM source_checks ORDER BY work_id")
    assert {r["work_id"]: r["status"] for r in statuses} == {
        wid(T0): "unchanged", manual: "retrying",
        wid(T0 + HOUR): "skipped", wid(T0 + 2 * HOUR): "skipped",
    }  # fmt: skip


async def test_a_retrying_outcome_of_a_slot_the_schedule_passed_meanwhile_is_final(
    pool: asyncpg.Pool,
) -> None:
    """Soak seed 1208 (chaos-0026): the ended run's first attempt of a slot was still
    fetching (no row yet, so no sync could finalise one) when the new run's sync moved the
    schedule past the slot; the attempt then failed transiently. Its `retrying` row would
    be left for good (no attempt claims a slot behind the schedule): it is written final."""
    await store.sync_target(pool, CONFIG, next_slot=ABANDONED, enabled=True)
    zombie = f"{OLD_RUN}/10/1"
    assert (await claim(pool, zombie, ABANDONED)).claimed
    await store.sync_target(pool, CONFIG, next_slot=T0 + 4 * HOUR, enabled=True)
    assert await rows(pool) == {}

    assert await commit(pool, zombie, ABANDONED, RETRY, advance=False) is not None
    row = (await rows(pool))[ABANDONED]
    assert (row["status"], row["next_attempt_at"], row["attempt_count"]) == ("skipped", None, 1)
    assert row["error_message"] == (
        "not checked: its retries were abandoned when the schedule moved past it during an "
        "attempt; its last attempt: HTTP 503 Service Unavailable"
    )
    stale = await claim(pool, f"{OLD_RUN}/10/2", ABANDONED)
    assert not stale.claimed and final_result(stale.existing, stale.next_slot) == stale.existing
    # The schedule's own slot still reads `retrying` between its attempts.
    await claim(pool, f"{NEW_RUN}/1/1", T0 + 4 * HOUR)
    await commit(pool, f"{NEW_RUN}/1/1", T0 + 4 * HOUR, RETRY, advance=False)
    assert (await rows(pool))[T0 + 4 * HOUR]["status"] == "retrying"
