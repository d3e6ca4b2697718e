"""The commit's final-row guard, reached by the one race that gets past the claim.

A check off the schedule (check-now, or `pricewatch retry` of a failed slot) claims without
the schedule's `next_slot <= slot` condition. Say one attempt outlived its lease and is
committing a final result just as the next attempt of the same work id claims the expired
lease. If the claim statement starts while that commit is in flight, Postgres makes it wait
for the commit's row lock, then re-checks the lease on the new row version (free again: the
commit released it), while the claim's read of the slot's row still comes from the
statement's snapshot, taken before that commit. So the late attempt holds the lease, sees no
final row, fetches, and commits: only the commit's `ON CONFLICT ... WHERE` stands between it
and the recorded result.
"""

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from activities import store
from pricewatch.decisions import final_result
from pricewatch.models import CheckInput, CheckKind, CheckResult, CheckStatus, TargetConfig
from tests.waits import eventually

T0 = datetime(2036, 8, 7, 8, 0, tzinfo=UTC)
LEASE = timedelta(seconds=90)
CONFIG = TargetConfig(target_id="acme", url="https://example.com/pricing", interval_seconds=3600)
FIRST = store.Outcome(status=CheckStatus.UNCHANGED, result_hash="a" * 64, http_status=200)
LATE = store.Outcome(status=CheckStatus.CHANGED, result_hash="b" * 64, previous_hash="a" * 64)


async def claim(pool: asyncpg.Pool, check: CheckInput, execution_id: str) -> store.Claim:
    return await store.claim(
        pool, target_id=check.target_id, work_id=check.work_id, execution_id=execution_id,
        lease=LEASE, on_schedule=check.on_schedule, slot=check.slot,
    )  # fmt: skip


async def commit(
    pool: asyncpg.Pool, check: CheckInput, execution_id: str, outcome: store.Outcome
) -> CheckResult | None:
    return await store.commit(
        pool, target_id=check.target_id, execution_id=execution_id, work_id=check.work_id,
        slot=check.slot, kind=check.kind, outcome=outcome, advance=check.on_schedule,
    )  # fmt: skip


async def waiting_on_locks(pool: asyncpg.Pool, count: int) -> bool:
    """Whether `count` backends of this database are blocked on a lock."""
    waiting = await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return bool(waiting >= count)


async def manual_check(pool: asyncpg.Pool) -> CheckInput:
    """check-now: its own work id, no row yet."""
    return CheckInput.of(CONFIG, T0 + timedelta(minutes=17), kind=CheckKind.MANUAL)


async def retry_of_failed_slot(pool: asyncpg.Pool) -> CheckInput:
    """`pricewatch retry` of the due slot T0, which gave up (its row reads `failed`)."""
    scheduled = CheckInput.of(CONFIG, T0)
    assert (await claim(pool, scheduled, "gave-up")).claimed
    failed = store.Outcome(status=CheckStatus.FAILED, error_message="HTTP 503")
    assert await commit(pool, scheduled, "gave-up", failed) is not None
    assert await store.record_failed(
        pool, target_id=CONFIG.target_id, work_id=scheduled.work_id, slot=T0,
        kind=CheckKind.SCHEDULED, error_message="gave up", advance=True,
    )  # fmt: skip
    return CheckInput.of(CONFIG, T0, retry=True)


@pytest.mark.parametrize("make_check", [manual_check, retry_of_failed_slot])
async def test_a_claim_read_before_a_final_commit_cannot_overwrite_it(
    pool: asyncpg.Pool, make_check: Callable[[asyncpg.Pool], Awaitable[CheckInput]]
) -> None:
    """The late attempt gets the lease and sees no final row, yet its commit writes nothing:
    the first final result stays exactly as recorded."""
    await store.sync_target(pool, CONFIG, next_slot=T0, enabled=True)
    check = await make_check(pool)
    assert (await claim(pool, check, "first")).claimed
    # The first attempt outlived its lease (a slow fetch), so Temporal's next attempt may
    # claim; the first still holds the lease and commits, as it may until someone claims.
    await pool.execute("UPDATE monitor_targets SET lease_expires_at = now() - interval '1 s'")

    # Hold the target's row so that the first attempt's commit is in flight (waiting for it)
    # when the late attempt's claim statement starts (its snapshot predates that commit).
    async with pool.acquire() as blocker:
        hold = blocker.transaction()
        await hold.start()
        await blocker.execute("SELECT 1 FROM monitor_targets WHERE id = $1 FOR UPDATE", "acme")
        first_commit = asyncio.create_task(commit(pool, check, "first", FIRST))
        await eventually(lambda: waiting_on_locks(pool, 1), within=10, what="commit waits")
        late_claim = asyncio.create_task(claim(pool, check, "late"))
        await eventually(lambda: waiting_on_locks(pool, 2), within=10, what="claim waits")
        await hold.rollback()
    recorded = await first_commit
    late = await late_claim

    assert recorded is not None and recorded.status is CheckStatus.UNCHANGED
    # The race reached the guard: the late attempt holds the lease and, as check_slot
    # decides, has to fetch and commit.
    assert late.claimed
    assert final_result(late.existing, late.next_slot, retrying=check.retry) is None

    assert await commit(pool, check, "late", LATE) is None
    stored = await store.stored_check(pool, check.work_id)
    assert stored is not None  # what check_slot's _lost_lease reads: "already recorded"
    assert (stored.status, stored.result_hash, stored.checked_at, stored.attempt_count) == (
        recorded.status,
        recorded.result_hash,
        recorded.checked_at,
        recorded.attempt_count,
    )
    assert stored.notify == recorded.notify
