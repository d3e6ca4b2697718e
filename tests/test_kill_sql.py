"""Precise tests for the SQL that `make mutants-sql` (mutation/sql.py) showed missing: each
kills SQL mutants no other test noticed."""

from datetime import UTC, datetime, timedelta
from typing import cast

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from activities import store
from activities.queries import Executor
from pricewatch.calendar import Calendar, slot_after, slots_between
from pricewatch.models import CheckKind, CheckResult, CheckStatus, TargetConfig
from pricewatch.slots import work_id

shared_pool = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
runs = st.sampled_from(["run-a", "run-b"])
numbers = st.integers(1, 3)
# `<run id>/<activity seq>/<attempt>`, and `/local-<random>` for a local attempt.
tokens = st.tuples(runs, numbers, numbers, st.sampled_from(["", "/local-x", "/local-y"]))


@shared_pool
@given(claimant=tokens, holder=tokens)
async def test_a_later_attempt_of_the_same_run_supersedes_and_nothing_else_does(
    pool: asyncpg.Pool,
    claimant: tuple[str, int, int, str],
    holder: tuple[str, int, int, str],
) -> None:
    """0013's `supersedes`, against its rule in Python: the same run, and a later activity
    or a later attempt of it; never another run, an earlier one, or the same attempt (a
    local one run again after a crash)."""
    expected = claimant[0] == holder[0] and claimant[1:3] > holder[1:3]
    as_token = "{}/{}/{}{}".format
    got = await pool.fetchval("SELECT supersedes($1, $2)", as_token(*claimant), as_token(*holder))
    assert got is expected, (claimant, holder)


# queries.sql: claim, commit, record_failed and lease_left with a second target beside the
# first, at the lease's expiry instant, and with nothing recorded.

T0 = datetime(2036, 8, 7, 8, 0, tzinfo=UTC)  # ahead of the database's clock
HOUR = timedelta(hours=1)
LEASE = timedelta(seconds=90)
GOOD = store.Outcome(status=CheckStatus.UNCHANGED, result_hash="a" * 64, snapshot=b"acme's")


def config(target_id: str) -> TargetConfig:
    return TargetConfig(target_id=target_id, url="https://example.com/", interval_seconds=3600)


async def claim(db: Executor, target_id: str, execution_id: str) -> store.Claim:
    return await store.claim(
        cast(asyncpg.Pool, db), target_id=target_id, work_id=work_id(target_id, T0),
        execution_id=execution_id, lease=LEASE, on_schedule=True, slot=T0,
    )  # fmt: skip


async def commit(
    pool: asyncpg.Pool, execution_id: str, *, advance: bool = True, kept: int = 50
) -> CheckResult | None:
    return await store.commit(
        pool, target_id="acme", execution_id=execution_id, work_id=work_id("acme", T0),
        slot=T0, kind=CheckKind.SCHEDULED, outcome=GOOD, advance=advance, snapshots_kept=kept,
    )  # fmt: skip


async def test_a_claim_reads_its_own_target_and_its_own_snapshot(pool: asyncpg.Pool) -> None:
    await store.sync_target(pool, config("acme"), next_slot=T0, enabled=True)
    assert (await claim(pool, "acme", "a")).claimed
    assert await commit(pool, "a") is not None
    # Another target, paused, a slot later, with a newer snapshot and a live lease.
    await store.sync_target(pool, config("other"), next_slot=T0 + HOUR, enabled=False)
    await pool.execute(
        """INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at,
                                      status, result_hash, snapshot)
           VALUES ('other:x', 'other', $1, 'manual', now() + interval '1 hour', 'unchanged',
                   $2, 'other''s')""",
        T0, "b" * 64,
    )  # fmt: skip
    await pool.execute(
        "UPDATE monitor_targets SET lease_token = 'x', lease_expires_at = now() + interval '1 h'"
        " WHERE id = 'other'"
    )
    assert await store.lease_left(pool, "acme") is None
    assert await store.lease_left(pool, "nobody") is None
    later = await store.claim(
        pool, target_id="acme", work_id=work_id("acme", T0 + HOUR), execution_id="b",
        lease=LEASE, on_schedule=True, slot=T0 + HOUR,
    )  # fmt: skip
    assert (later.claimed, later.enabled, later.next_slot) == (True, True, T0 + HOUR)
    assert (later.previous_hash, later.previous_snapshot) == ("a" * 64, b"acme's")


async def test_a_lease_is_over_at_its_expiry_instant(pool: asyncpg.Pool) -> None:
    """`lease_expires_at <= now()`: in one transaction (one now()), a lease that expires now
    is free to claim and to give up on."""
    await store.sync_target(pool, config("acme"), next_slot=T0, enabled=True)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "UPDATE monitor_targets SET lease_token = 'old', lease_expires_at = now()"
        )
        assert (await claim(conn, "acme", "new")).claimed
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("UPDATE monitor_targets SET lease_expires_at = now()")
        failed = await store.record_failed(
            cast(asyncpg.Pool, conn), target_id="acme", work_id=work_id("acme", T0), slot=T0,
            kind=CheckKind.SCHEDULED, error_message="gave up", advance=True,
        )  # fmt: skip
        assert failed is not None and failed.status is CheckStatus.FAILED


async def test_a_commit_that_records_nothing_changes_nothing(pool: asyncpg.Pool) -> None:
    """The slot is already final: the holder's commit neither moves the schedule nor frees
    its lease, and a stale commit prunes no snapshot."""
    await store.sync_target(pool, config("acme"), next_slot=T0, enabled=True)
    assert (await claim(pool, "acme", "a")).claimed
    assert await commit(pool, "a", advance=False) is not None  # final, schedule left
    await pool.execute(
        "UPDATE monitor_targets SET lease_token = 'b', lease_expires_at = now() + interval '1 h'"
    )
    assert await commit(pool, "b", kept=1) is None
    row = await pool.fetchrow("SELECT next_slot, lease_token FROM monitor_targets")
    assert row is not None
    assert (row["next_slot"], row["lease_token"]) == (T0, "b")
    assert await pool.fetchval("SELECT snapshot FROM source_checks") == b"acme's"
    assert await commit(pool, "stale", kept=1) is None
    assert await pool.fetchval("SELECT snapshot FROM source_checks") == b"acme's"


# 0012: the calendar grid from a moment that is itself a slot, and a schedule moved back
# over slots that already have rows.

CALENDAR_SQL = """
SELECT calendar_after($1, $2, $3, $4, $5, $6, $7, $8, 'acme', $9),
       ARRAY(SELECT calendar_between($1, $2, $3, $4, $5, $6, $7, $8, 'acme', $9, $10))
"""


@pytest.mark.parametrize(("jitter", "offset"), [(0, 0), (0, 600), (900, None), (900, 300)])
async def test_the_calendar_from_a_slot_is_strictly_after_it(
    pool: asyncpg.Pool, jitter: int, offset: int | None
) -> None:
    """`after` is often a slot itself (the one just checked): the next slot and the slots
    passed are strictly after it, as in Python."""
    calendar = Calendar.parse("0 8,17 * * mon-fri", "Europe/Berlin", jitter).model_copy(
        update={"offset_seconds": offset}
    )
    slot = slot_after(calendar, "acme", datetime(2026, 10, 23, 12, tzinfo=UTC))
    before = slot + timedelta(days=3)
    days = (calendar.times, calendar.days_of_month, calendar.months, calendar.weekdays)
    columns = (*map(list, days), calendar.days_or, calendar.time_zone, jitter, offset)
    row = await pool.fetchrow(CALENDAR_SQL, *columns, slot, before)
    assert row is not None
    following, passed = row
    assert following == slot_after(calendar, "acme", slot) > slot
    assert passed == slots_between(calendar, "acme", slot, before)
    assert slot not in passed


async def test_a_schedule_moved_back_skips_only_the_slots_without_a_row(
    pool: asyncpg.Pool,
) -> None:
    await store.sync_target(pool, config("acme"), next_slot=T0, enabled=True)
    assert (await claim(pool, "acme", "a")).claimed
    await store.commit(
        pool, target_id="acme", execution_id="a", work_id=work_id("acme", T0), slot=T0,
        kind=CheckKind.SCHEDULED, outcome=GOOD, advance=True, temporal_now=T0 + 2.5 * HOUR,
    )  # fmt: skip
    await store.sync_target(pool, config("acme"), next_slot=T0 + HOUR, enabled=True)
    moved = await store.advance_past_final(
        pool, target_id="acme", slot=T0 + HOUR, temporal_now=T0 + 3.5 * HOUR
    )
    assert moved == T0 + 4 * HOUR
    rows = await pool.fetch("SELECT scheduled_for, error_message FROM source_checks ORDER BY 1")
    assert [(r[0], r[1].split(":")[0] if r[1] else None) for r in rows] == [
        (T0, None),
        (T0 + HOUR, "not checked"),
        (T0 + 2 * HOUR, "not checked"),
        (T0 + 3 * HOUR, "not checked"),
    ]
    assert "the schedule was behind" in rows[3][1] and "was final" in rows[2][1]
