"""The store against real Postgres: the lease, one row per slot, and the schedule mirror.

Every test gets a fresh migrated database (`pool` in conftest), so rows never leak.
"""

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from activities import store
from activities.migrate import migrate, migration_files
from pricewatch.decisions import final_result
from pricewatch.models import CheckKind, CheckResult, CheckStatus, TargetConfig
from pricewatch.slots import work_id
from tests.helpers import built

# Ahead of the database's clock: the next slot then follows from the slot alone, or from the
# Temporal time a test passes in (`now`), exactly.
T0 = datetime(2036, 8, 7, 8, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
LEASE = timedelta(seconds=90)
TARGET = "acme"
CONFIG = TargetConfig(target_id=TARGET, url="https://example.com/pricing", interval_seconds=3600)
HASH = "a" * 64
GOOD = store.Outcome(status=CheckStatus.UNCHANGED, result_hash=HASH, http_status=200, body_bytes=5)
FAILED = store.Outcome(status=CheckStatus.FAILED, error_message="HTTP 503 Service Unavailable")


@pytest.fixture
async def target(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """The pool, with one enabled target due at T0."""
    await store.sync_target(pool, CONFIG, next_slot=T0, enabled=True)
    yield pool


def final(claimed: store.Claim) -> CheckResult | None:
    """The stored result if the slot needs no more work (the check's own decision)."""
    return final_result(claimed.existing, claimed.next_slot)


def wid(slot: datetime = T0, kind: CheckKind = CheckKind.SCHEDULED) -> str:
    prefix = f"{TARGET}:manual" if kind is CheckKind.MANUAL else TARGET
    return work_id(prefix, slot)


async def claim(
    pool: asyncpg.Pool,
    execution_id: str,
    slot: datetime = T0,
    kind: CheckKind = CheckKind.SCHEDULED,
) -> store.Claim:
    return await store.claim(
        pool,
        target_id=TARGET,
        work_id=wid(slot, kind),
        execution_id=execution_id,
        lease=LEASE,
        on_schedule=kind is CheckKind.SCHEDULED,
        slot=slot,
    )


async def commit(
    pool: asyncpg.Pool,
    execution_id: str,
    outcome: store.Outcome = GOOD,
    *,
    slot: datetime = T0,
    kind: CheckKind = CheckKind.SCHEDULED,
    advance: bool = True,
    now: datetime | None = None,
) -> CheckResult | None:
    return await store.commit(
        pool,
        target_id=TARGET,
        execution_id=execution_id,
        work_id=wid(slot, kind),
        slot=slot,
        kind=kind,
        outcome=outcome,
        advance=advance,
        temporal_now=now,
    )


async def record_failed(
    pool: asyncpg.Pool, advance: bool = True, now: datetime | None = None
) -> CheckResult | None:
    return await store.record_failed(
        pool,
        target_id=TARGET,
        work_id=wid(),
        slot=T0,
        kind=CheckKind.SCHEDULED,
        error_message="gave up after 5 attempts",
        advance=advance,
        temporal_now=now,
    )


async def target_row(pool: asyncpg.Pool) -> asyncpg.Record:
    row = await pool.fetchrow(
        "SELECT next_slot, lease_token, lease_expires_at FROM monitor_targets WHERE id = $1",
        TARGET,
    )
    assert row is not None
    return row


async def check_rows(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch("SELECT * FROM source_checks ORDER BY scheduled_for"))


async def test_claim_and_commit_record_one_row_and_advance(target: asyncpg.Pool) -> None:
    """The happy path: one row, the schedule moves on and the lease is free again."""
    claimed = await claim(target, "a")
    assert (claimed.target_exists, claimed.claimed, claimed.existing) == (True, True, None)
    assert claimed.next_slot == T0

    result = await commit(target, "a")

    assert result is not None
    assert (result.work_id, result.status, result.attempt_count) == (
        wid(),
        CheckStatus.UNCHANGED,
        1,
    )
    assert (result.result_hash, result.next_slot) == (HASH, T0 + HOUR)
    rows = await check_rows(target)
    assert len(rows) == 1
    assert (rows[0]["http_status"], rows[0]["body_bytes"]) == (200, 5)
    assert tuple(await target_row(target)) == (T0 + HOUR, None, None)


async def test_completed_slot_is_final_and_not_claimed_again(target: asyncpg.Pool) -> None:
    """A repeat execution of a done slot gets the stored row instead of fetching again."""
    await claim(target, "a")
    await commit(target, "a")

    again = await claim(target, "b")

    assert not again.claimed
    stored = final(again)
    assert stored is not None
    assert (stored.work_id, stored.result_hash) == (wid(), HASH)
    assert (await target_row(target))["lease_token"] is None


async def test_concurrent_attempts_on_one_slot_write_one_row(target: asyncpg.Pool) -> None:
    """Twenty executions of the same slot racing: one claim, one commit, one row."""

    async def attempt(execution_id: str) -> tuple[bool, CheckResult | None]:
        claimed = await claim(target, execution_id)
        return claimed.claimed, await commit(target, execution_id)  # commits even when refused

    outcomes = await asyncio.gather(*(attempt(f"t{i}") for i in range(20)))

    assert sum(claimed for claimed, _ in outcomes) == 1
    assert sum(result is not None for _, result in outcomes) == 1
    assert len(await check_rows(target)) == 1
    assert tuple(await target_row(target)) == (T0 + HOUR, None, None)


async def test_only_the_lease_holder_commits(target: asyncpg.Pool) -> None:
    """An execution id that never claimed writes nothing and leaves the holder's lease alone."""
    assert (await claim(target, "holder")).claimed

    assert await commit(target, "intruder") is None
    assert await check_rows(target) == []
    assert tuple(await target_row(target))[:2] == (T0, "holder")

    assert await commit(target, "holder") is not None
    assert len(await check_rows(target)) == 1


async def test_stale_token_changes_neither_row_nor_schedule(target: asyncpg.Pool) -> None:
    """An old attempt finishing late (its retry now holds the lease) must not overwrite the
    slot's row or move the schedule."""
    await claim(target, "old")
    await commit(target, "old", FAILED, advance=False)
    assert (await claim(target, "retry")).claimed
    before = await check_rows(target)

    late = store.Outcome(status=CheckStatus.UNCHANGED, result_hash="b" * 64)
    assert await commit(target, "old", late, now=T0 + 4 * HOUR) is None

    assert await check_rows(target) == before
    assert tuple(await target_row(target))[:2] == (T0, "retry")


async def test_release_needs_the_holders_token(target: asyncpg.Pool) -> None:
    """An old attempt's cleanup cannot free a newer attempt's lease."""
    await claim(target, "holder")
    held = tuple(await target_row(target))

    assert not await store.release(target, target_id=TARGET, execution_id="someone-else")
    assert tuple(await target_row(target)) == held

    assert await store.release(target, target_id=TARGET, execution_id="holder")
    assert tuple(await target_row(target)) == (T0, None, None)


async def test_expired_lease_is_taken_over_and_the_old_holder_writes_nothing(
    target: asyncpg.Pool,
) -> None:
    """A zombie whose lease lapsed loses the slot to the next attempt."""
    await claim(target, "zombie")
    await target.execute(
        "UPDATE monitor_targets SET lease_expires_at = now() - interval '1 second'"
    )

    assert (await claim(target, "fresh")).claimed
    assert await commit(target, "zombie") is None
    assert await check_rows(target) == []
    assert (await target_row(target))["lease_token"] == "fresh"

    result = await commit(target, "fresh")
    assert result is not None
    assert result.attempt_count == 1


async def test_failed_attempts_share_one_row_until_success(target: asyncpg.Pool) -> None:
    """Retries count attempts on the slot's row without moving the schedule; the success
    then finalises that same row."""
    for attempt in (1, 2):
        execution_id = f"try-{attempt}"
        claimed = await claim(target, execution_id)
        assert claimed.claimed
        assert final(claimed) is None
        failed = await commit(target, execution_id, FAILED, advance=False)
        assert failed is not None
        assert (failed.status, failed.attempt_count) == (CheckStatus.FAILED, attempt)
        assert tuple(await target_row(target)) == (T0, None, None)

    assert (await claim(target, "try-3")).claimed
    success = await commit(target, "try-3")

    assert success is not None
    assert (success.status, success.attempt_count, success.error_message) == (
        CheckStatus.UNCHANGED,
        3,
        None,
    )
    assert len(await check_rows(target)) == 1
    stored = final(await claim(target, "try-4"))
    assert stored is not None
    assert (stored.status, stored.attempt_count) == (CheckStatus.UNCHANGED, 3)


async def test_record_failed_finalises_the_slot(target: asyncpg.Pool) -> None:
    """Giving up keeps the attempts' row, marks it failed for good and moves the schedule."""
    await claim(target, "a")
    await commit(target, "a", FAILED, advance=False)

    result = await record_failed(target)

    assert result is not None
    assert (result.status, result.attempt_count) == (CheckStatus.FAILED, 1)
    assert (result.error_message, result.next_slot) == ("gave up after 5 attempts", T0 + HOUR)
    assert len(await check_rows(target)) == 1
    assert (await target_row(target))["next_slot"] == T0 + HOUR
    later = await claim(target, "late-retry")
    assert not later.claimed
    stored = final(later)
    assert stored is not None
    assert stored.status is CheckStatus.FAILED


async def test_a_late_commit_records_the_slots_it_skipped(target: asyncpg.Pool) -> None:
    """Slots that came due while T0 was still being checked get one `skipped` row each, in
    the commit's statement; the next good check compares with T0's hash, not with them."""
    await claim(target, "a")
    await commit(target, "a", now=T0 + 2.5 * HOUR)

    rows = await check_rows(target)
    assert [(r["scheduled_for"], r["status"]) for r in rows] == [
        (T0, "unchanged"),
        (T0 + HOUR, "skipped"),
        (T0 + 2 * HOUR, "skipped"),
    ]
    assert rows[1]["work_id"] == wid(T0 + HOUR) and rows[1]["result_hash"] is None
    assert "came due before acme:2036-08-07T08:00:00Z was final" in rows[1]["error_message"]
    assert final(await claim(target, "b", slot=T0 + HOUR)) is not None  # final: never fetched
    later = await claim(target, "c", slot=T0 + 3 * HOUR)
    assert later.claimed and later.previous_hash == HASH


async def test_skipped_rows_need_the_commit_to_succeed(target: asyncpg.Pool) -> None:
    """A stale attempt, a failed attempt that does not advance, or a refused dead letter
    writes no skipped rows either."""
    await claim(target, "a")
    assert await commit(target, "stale", now=T0 + 1.5 * HOUR) is None
    await commit(target, "a", FAILED, advance=False)
    assert (await claim(target, "b")).claimed  # a live lease: the dead letter waits
    assert await record_failed(target, now=T0 + 1.5 * HOUR) is None
    assert [r["status"] for r in await check_rows(target)] == ["failed"]

    await target.execute("UPDATE monitor_targets SET lease_expires_at = now() - interval '1 s'")
    assert await record_failed(target, now=T0 + 1.5 * HOUR) is not None
    assert [r["status"] for r in await check_rows(target)] == ["failed", "skipped"]


async def test_every_statement_that_moves_the_schedule_skips_by_the_one_rule(
    target: asyncpg.Pool,
) -> None:
    """A dead letter and a re-run that finds the schedule behind (a sync wrote an older slot
    back) move the schedule as the commit does (`next_due`, `skip_passed`): to the first
    grid point after the decisive clock, with a skipped row per slot passed, each saying
    why; a slot that has a row keeps it, and a schedule already past the slot stays."""
    failed = await record_failed(target, now=T0 + 1.5 * HOUR)
    assert failed is not None and failed.next_slot == T0 + 2 * HOUR
    await store.sync_target(target, CONFIG, next_slot=T0 + HOUR, enabled=True)
    moved = await store.advance_past_final(
        target, target_id=TARGET, slot=T0 + 2 * HOUR, temporal_now=T0 + 3.5 * HOUR
    )
    assert moved == T0 + 4 * HOUR == (await target_row(target))["next_slot"]
    stays = await store.advance_past_final(
        target, target_id=TARGET, slot=T0 + 2 * HOUR, temporal_now=T0 + 9 * HOUR
    )
    assert stays == T0 + 4 * HOUR
    rows = await check_rows(target)
    assert [(r["scheduled_for"], r["status"], r["error_message"]) for r in rows] == [
        (T0, "failed", "gave up after 5 attempts"),
        (T0 + HOUR, "skipped", f"not checked: came due before {wid()} gave up"),
        (T0 + 3 * HOUR, "skipped", "not checked: the schedule was behind"),
    ]
    assert [r["work_id"] for r in rows] == [wid(T0), wid(T0 + HOUR), wid(T0 + 3 * HOUR)]


async def test_record_failed_refuses_while_a_lease_is_live(target: asyncpg.Pool) -> None:
    """A running attempt may still succeed: giving up must wait for it."""
    await claim(target, "running")

    assert await record_failed(target) is None

    assert await check_rows(target) == []
    assert tuple(await target_row(target))[:2] == (T0, "running")


async def test_stale_slot_cannot_be_claimed(target: asyncpg.Pool) -> None:
    """Once the schedule is past a slot, an old attempt for it never claims."""
    await store.sync_target(target, CONFIG, next_slot=T0 + HOUR, enabled=True)

    stale = await claim(target, "late", slot=T0)

    assert (stale.claimed, stale.next_slot, final(stale)) == (False, T0 + HOUR, None)
    assert (await target_row(target))["lease_token"] is None


async def test_manual_check_leaves_the_schedule_alone(target: asyncpg.Pool) -> None:
    """check-now records its own row and never moves next_slot."""
    manual_slot = T0 + timedelta(minutes=17, microseconds=250)
    assert (await claim(target, "m", slot=manual_slot, kind=CheckKind.MANUAL)).claimed

    result = await commit(target, "m", slot=manual_slot, kind=CheckKind.MANUAL, advance=False)

    assert result is not None
    assert result.work_id == f"{TARGET}:manual:2036-08-07T08:17:00.000250Z"
    assert tuple(await target_row(target)) == (T0, None, None)
    scheduled = await claim(target, "s")
    assert scheduled.claimed
    assert scheduled.previous_hash == HASH  # the manual result is the baseline to compare to


async def test_paused_target_is_not_claimed_for_scheduled_slots(pool: asyncpg.Pool) -> None:
    """A paused target's next slot does not run."""
    await store.sync_target(pool, CONFIG, next_slot=T0, enabled=False)

    refused = await claim(pool, "a")

    assert refused.target_exists
    assert not refused.claimed
    assert (await target_row(pool))["lease_token"] is None


async def test_unique_slot_index_rejects_a_second_work_id(target: asyncpg.Pool) -> None:
    """Even a bug that builds another work id cannot record the same slot twice."""
    await claim(target, "a")
    await commit(target, "a")

    with pytest.raises(asyncpg.UniqueViolationError):
        await target.execute(
            """INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status,
                                          result_hash)
               VALUES ($1, $2, $3, now(), 'unchanged', $4)""",
            f"{TARGET}:some-other-id",
            TARGET,
            T0,
            HASH,
        )
    assert len(await check_rows(target)) == 1


async def test_concurrent_migrations_apply_the_schema_once(postgres_server_url: str) -> None:
    """A worker and `pricewatch dev` starting together must not both run the migrations."""
    name = f"migrate_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        first, second = await asyncio.gather(
            asyncpg.connect(postgres_server_url, database=name),
            asyncpg.connect(postgres_server_url, database=name),
        )
        try:
            applied = await asyncio.gather(migrate(first), migrate(second))
            versions = await first.fetchval("SELECT count(*) FROM schema_migrations")
        finally:
            await first.close()
            await second.close()
        everything = [version for version, _ in migration_files()]
        assert sorted(applied) == [[], everything]
        assert versions == len(everything) >= 1
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


async def test_the_grid_migration_keeps_existing_rows_and_their_meaning(
    postgres_server_url: str,
) -> None:
    """A database written before 0005: every target gets its next slot as anchor (a point
    of its grid); a failed row of a slot still being retried becomes `retrying`; a final
    failed row, and every other row, is left exactly as it was."""

    async def before_the_grid(conn: asyncpg.Connection) -> None:
        older = [(v, sql) for v, sql in migration_files("sql/legacy") if v < "0005"]
        await conn.execute("CREATE TABLE schema_migrations (version text PRIMARY KEY, "
                           "applied_at timestamptz NOT NULL DEFAULT now())")  # fmt: skip
        for version, sql in older:
            await conn.execute(sql)
            await conn.execute("INSERT INTO schema_migrations VALUES ($1)", version)

    async with built(postgres_server_url, before_the_grid) as conn:
        await conn.execute(
            "INSERT INTO monitor_targets (id, url, interval_seconds, next_check_at) "
            "VALUES ('acme', 'https://example.com/p', 3600, $1)",
            T0 + HOUR,
        )
        insert = (
            "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, "
            "status, attempt_count, error_message) VALUES ($1, 'acme', $2, $2, 'failed', "
            "$3, 'HTTP 503')"
        )
        await conn.execute(insert, wid(T0), T0, 5)  # gave up: the schedule moved on
        await conn.execute(insert, wid(T0 + HOUR), T0 + HOUR, 2)  # still being retried
        before = await conn.fetch("SELECT * FROM source_checks ORDER BY scheduled_for")

        assert (await migrate(conn))[0] == "0005_grid"
        target = await conn.fetchrow("SELECT anchor, next_slot FROM monitor_targets")
        after = await conn.fetch("SELECT * FROM source_checks ORDER BY scheduled_for")
    assert target is not None and target["anchor"] == target["next_slot"] == T0 + HOUR
    assert [r["status"] for r in after] == ["failed", "retrying"]
    for old, new in zip(before, after, strict=True):
        kept = [k for k in old.keys() if k != "status"]  # noqa: SIM118 (a Record)
        assert [new[k] for k in kept] == [old[k] for k in kept]
        assert new["next_attempt_at"] is None


async def test_urls_the_model_accepts_are_accepted_by_the_table(pool: asyncpg.Pool) -> None:
    """The model normalises what the table's CHECK would refuse (an uppercase scheme, spaces);
    otherwise `add` would succeed and the workflow could never mirror its target."""
    for raw in ("HTTP://Example.com/pricing", "  https://example.com/x\n"):
        config = TargetConfig(target_id="up", url=raw, interval_seconds=3600)
        await store.sync_target(pool, config, next_slot=T0, enabled=True)
    assert await pool.fetchval("SELECT url FROM monitor_targets") == "https://example.com/x"


async def test_dead_lettered_slot_cannot_be_rewritten_by_its_zombie(target: asyncpg.Pool) -> None:
    """Finalising a slot clears the expired lease, so the attempt that held it can never
    complete the row afterwards (here a manual check, which moves no schedule)."""
    manual_at = T0 + timedelta(minutes=5)
    manual = wid(manual_at, CheckKind.MANUAL)
    claimed = await store.claim(
        target, target_id=TARGET, work_id=manual, execution_id="zombie", lease=timedelta(0),
        on_schedule=False, slot=manual_at,
    )  # fmt: skip
    assert claimed.claimed
    failed = await store.record_failed(
        target, target_id=TARGET, work_id=manual, slot=manual_at, kind=CheckKind.MANUAL,
        error_message="gave up", advance=False,
    )  # fmt: skip
    assert failed is not None and failed.status is CheckStatus.FAILED
    late = await store.commit(
        target, target_id=TARGET, execution_id="zombie", work_id=manual, slot=manual_at,
        kind=CheckKind.MANUAL, outcome=GOOD, advance=False,
    )  # fmt: skip
    assert late is None
    assert (await check_rows(target))[0]["status"] == "failed"
