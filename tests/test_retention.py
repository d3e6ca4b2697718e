"""Retention against real Postgres: expired rows go, in bounded batches; what a check or a
notice still needs stays (the latest observation, the newest snapshot, slots being retried,
changes not yet told, every row of a target whose lease is live); the dry run reports
exactly what a pass then deletes. The Schedule and its workflow: tests/test_e2e.py."""

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from activities import retention, store
from activities.retention import Retention, prune_pass
from pricewatch.models import CheckStatus, PruneProgress, TargetConfig
from pricewatch.slots import work_id

DAY = timedelta(days=1)
POLICY = Retention(keep_checks=90 * DAY, keep_changes=730 * DAY)
HASH = "a" * 64


def config(target_id: str) -> TargetConfig:
    return TargetConfig(target_id=target_id, url="https://example.com/p", interval_seconds=3600)


async def add_target(pool: asyncpg.Pool, target_id: str) -> None:
    next_slot = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    await store.sync_target(pool, config(target_id), next_slot=next_slot, enabled=True)


async def add_row(
    pool: asyncpg.Pool,
    target_id: str,
    age: timedelta,
    status: CheckStatus,
    *,
    snapshot: bytes | None = None,
) -> str:
    """A check row `age` old, as the commit would have written it."""
    slot = (datetime.now(UTC) - age).replace(microsecond=0)
    wid = work_id(target_id, slot)
    good = status in (CheckStatus.UNCHANGED, CheckStatus.CHANGED)
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status, "
        "result_hash, previous_hash, snapshot, next_attempt_at) "
        "VALUES ($1, $2, $3, $3, $4, $5, $6, $7, $8)",
        wid, target_id, slot, status.value, HASH if good else None,
        HASH if status is CheckStatus.CHANGED else None, snapshot,
        slot + timedelta(minutes=1) if status is CheckStatus.RETRYING else None,
    )  # fmt: skip
    return wid


async def add_channel(pool: asyncpg.Pool, target_id: str, created: datetime) -> None:
    await pool.execute(
        "INSERT INTO channels (target_id, channel_id, kind, destination, secret, created_at) "
        "VALUES ($1, 'hook', 'webhook', 'https://example.com/hook', 'whsec_x', $2)",
        target_id, created,
    )  # fmt: skip


async def add_delivery(pool: asyncpg.Pool, target_id: str, wid: str, status: str) -> None:
    await pool.execute(
        "INSERT INTO deliveries (work_id, channel_id, notice, target_id, message_id, status, "
        "sent_at) VALUES ($1, 'hook', 'changed', $2, $3, $4, "
        "CASE WHEN $4 = 'sent' THEN now() END)",
        wid, target_id, f"msg_{uuid.uuid4().hex}", status,
    )  # fmt: skip


async def remaining(pool: asyncpg.Pool) -> set[str]:
    return {r["work_id"] for r in await pool.fetch("SELECT work_id FROM source_checks")}


async def test_expired_rows_go_and_what_checks_and_notices_need_stays(pool: asyncpg.Pool) -> None:
    await add_target(pool, "acme")
    await add_channel(pool, "acme", datetime.now(UTC) - 1000 * DAY)
    old = [await add_row(pool, "acme", (200 + n) * DAY, CheckStatus.UNCHANGED) for n in range(5)]
    old_failed = await add_row(pool, "acme", 120 * DAY, CheckStatus.FAILED)
    old_skipped = await add_row(pool, "acme", 95 * DAY, CheckStatus.SKIPPED)
    told = await add_row(pool, "acme", 800 * DAY, CheckStatus.CHANGED)
    await add_delivery(pool, "acme", told, "sent")
    pending = await add_row(pool, "acme", 801 * DAY, CheckStatus.CHANGED)
    await add_delivery(pool, "acme", pending, "pending")
    never_told = await add_row(pool, "acme", 802 * DAY, CheckStatus.CHANGED)
    young_change = await add_row(pool, "acme", 300 * DAY, CheckStatus.CHANGED)
    snapshot = await add_row(pool, "acme", 150 * DAY, CheckStatus.UNCHANGED, snapshot=b"text")
    retrying = await add_row(pool, "acme", 100 * DAY, CheckStatus.RETRYING)
    latest_good = await add_row(pool, "acme", 99 * DAY, CheckStatus.UNCHANGED)
    recent_failures = [await add_row(pool, "acme", n * DAY, CheckStatus.FAILED) for n in (1, 2)]

    summary = {e.status: e for e in await retention.expired_summary(pool, POLICY)}
    assert {s: e.rows for s, e in summary.items()} == {"changed": 1, "failed": 1, "skipped": 1,
                                                         "unchanged": 5}  # fmt: skip
    assert summary["changed"].deliveries == 1

    done = await prune_pass(pool, POLICY, PruneProgress())
    assert done.done and done.deleted == 8
    assert await remaining(pool) == {
        pending,
        never_told,
        young_change,
        snapshot,
        retrying,
        latest_good,
        *recent_failures,
    }
    assert not set(old) & await remaining(pool)
    assert {old_failed, old_skipped, told}.isdisjoint(await remaining(pool))
    assert await pool.fetchval("SELECT count(*) FROM deliveries WHERE work_id = $1", told) == 0
    assert await pool.fetchval("SELECT count(*) FROM deliveries WHERE work_id = $1", pending) == 1

    # The next check still compares against the latest observation and its snapshot.
    claim = await store.claim(
        pool, target_id="acme", work_id="acme:next", execution_id="t", lease=timedelta(seconds=45),
        on_schedule=False, slot=datetime.now(UTC),
    )  # fmt: skip
    assert claim.previous_hash == HASH and claim.previous_snapshot == b"text"
    assert await retention.expired_summary(pool, POLICY) == []


async def test_a_target_whose_lease_is_live_is_left_alone(pool: asyncpg.Pool) -> None:
    await add_target(pool, "busy")
    await add_row(pool, "busy", 10 * DAY, CheckStatus.UNCHANGED)
    expired = await add_row(pool, "busy", 100 * DAY, CheckStatus.UNCHANGED)
    await pool.execute(
        "UPDATE monitor_targets SET lease_token = 'attempt', "
        "lease_expires_at = now() + interval '45 seconds'"
    )
    assert (await prune_pass(pool, POLICY, PruneProgress())).deleted == 0
    assert expired in await remaining(pool)

    await pool.execute("UPDATE monitor_targets SET lease_expires_at = now() - interval '1 second'")
    assert (await prune_pass(pool, POLICY, PruneProgress())).deleted == 1


async def test_a_locked_target_is_skipped_not_waited_for(pool: asyncpg.Pool) -> None:
    """A claim in progress holds the target's row: the pass goes on without it."""
    for target_id in ("a-target", "b-target"):
        await add_target(pool, target_id)
        await add_row(pool, target_id, 1 * DAY, CheckStatus.UNCHANGED)
        await add_row(pool, target_id, 100 * DAY, CheckStatus.UNCHANGED)
    async with pool.acquire() as claiming, claiming.transaction():
        await claiming.execute("SELECT 1 FROM monitor_targets WHERE id = 'a-target' FOR UPDATE")
        done = await prune_pass(pool, POLICY, PruneProgress())
    assert done.deleted == 1
    assert await pool.fetchval(
        "SELECT count(*) FROM source_checks WHERE target_id = 'a-target'"
    ) == 2  # fmt: skip


async def test_a_backlog_is_pruned_in_bounded_batches(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "TARGETS_PER_BATCH", 3)
    monkeypatch.setattr(retention, "ROWS_PER_TARGET", 4)
    targets = [f"t{n:02d}" for n in range(7)]
    for target_id in targets:
        await add_target(pool, target_id)
        await add_row(pool, target_id, 1 * DAY, CheckStatus.UNCHANGED)
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status) "
        "SELECT t || ':' || n, t, now() - make_interval(days => 100 + n), "
        "       now() - make_interval(days => 100 + n), 'skipped' "
        "  FROM unnest($1::text[]) t, generate_series(1, 10) n",
        targets,
    )
    batches: list[int] = []
    before = 0

    def note(progress: PruneProgress) -> None:
        nonlocal before
        batches.append(progress.deleted - before)
        before = progress.deleted

    done = await prune_pass(pool, POLICY, PruneProgress(), on_batch=note)
    assert done.deleted == 70
    assert max(batches) <= 3 * 4
    assert await pool.fetchval("SELECT count(*) FROM source_checks") == len(targets)
