"""Postgres access for checks: the lease, the one-row-per-slot record, the schedule mirror.

Idempotency lives here, in SQL. Each hot-path step is one statement (one round trip):
claim, then commit. "Already recorded" is a normal outcome, returned, never raised.
"""

import base64
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from pricewatch.models import (
    ChannelKind,
    CheckKind,
    CheckResult,
    CheckStatus,
    Registration,
    TargetConfig,
)


# The slots a statement moves the schedule past without checking them get one `skipped` row
# each: the grid points strictly between `slot` and the new next slot (`moved`, a CTE
# returning the target's anchor, interval_seconds and next_check_at). Each is at or before
# the clock that decided the next slot, so no skipped row is ever in the future.
def _insert_skipped(slot: str, reason: str) -> str:
    return f"""INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at,
        status, error_message)
    SELECT slot_work_id(m.id, s), m.id, s, 'scheduled', now(), 'skipped', {reason}
      FROM moved m, grid_between(m.anchor, m.interval_seconds, {slot}, m.next_check_at) s"""


CHECK_COLUMNS = """work_id, scheduled_for, kind, status, checked_at, attempt_count,
    result_hash, previous_hash, error_message, next_attempt_at"""


# Where the schedule goes after `slot`: the first grid point after the database's now(), or
# after Temporal's time for the attempt if that is later (the time-skipping test server runs
# ahead of every real clock); never a worker's clock.
def _next_slot_after(slot: str, temporal_now: str) -> str:
    return f"grid_after(anchor, interval_seconds, greatest(now(), {temporal_now}, {slot}))"


# Claim the target's lease for one slot and, in the same snapshot, read what the check
# needs: the slot's row if it exists and the last good hash. The lease is taken only if
# it is free, expired (by the database's clock) or already ours, and, for the due slot
# ($5 = false: not a manual check or a retry), only while the target is enabled and not
# yet past this slot: a stale attempt for a slot the schedule left behind never claims.
CLAIM = f"""
WITH target AS (
    SELECT enabled, next_check_at FROM monitor_targets WHERE id = $1
), existing AS (
    SELECT {CHECK_COLUMNS} FROM source_checks WHERE work_id = $2
), claimed AS (
    UPDATE monitor_targets
       SET lease_token = $3, lease_expires_at = now() + $4::interval
     WHERE id = $1
       AND (lease_token IS NULL OR lease_expires_at <= now() OR lease_token = $3)
       AND ($5::boolean OR (enabled AND next_check_at <= $6))
       AND NOT EXISTS (SELECT 1 FROM existing WHERE status NOT IN ('retrying', 'failed'))
    RETURNING id
)
SELECT
    EXISTS (SELECT 1 FROM target) AS target_exists,
    (SELECT enabled FROM target) AS enabled,
    (SELECT next_check_at FROM target) AS next_check_at,
    EXISTS (SELECT 1 FROM claimed) AS claimed,
    -- The latest observation, whichever check made it: each change is reported once. Its
    -- validators make the fetch conditional; the newest snapshot is the text it saw.
    (SELECT to_jsonb(p) FROM (
        SELECT result_hash, etag, last_modified, rules FROM source_checks
         WHERE target_id = $1 AND status IN ('unchanged', 'changed') AND work_id <> $2
         ORDER BY checked_at DESC LIMIT 1) p) AS previous,
    (SELECT snapshot FROM source_checks
      WHERE target_id = $1 AND snapshot IS NOT NULL AND work_id <> $2
      ORDER BY checked_at DESC LIMIT 1) AS previous_snapshot,
    (SELECT to_jsonb(existing) FROM existing) AS existing
"""

# Record an attempt's outcome and, for a final scheduled outcome ($12), advance the schedule
# on the target's grid and release the lease: all in one statement, all conditional on still
# holding the lease. `FOR UPDATE` waits for a concurrent lease change and re-checks the
# token, so a stale attempt whose lease was taken over matches nothing and writes nothing. A
# row that is already final is left alone (the DO UPDATE's WHERE), and then nothing else
# happens either.
COMMIT = f"""
WITH lease AS (
    SELECT id FROM monitor_targets WHERE id = $1 AND lease_token = $2 FOR UPDATE
), recorded AS (
    INSERT INTO source_checks AS c (work_id, target_id, scheduled_for, kind, checked_at, status,
        attempt_count, result_hash, previous_hash, http_status, body_bytes, error_message,
        etag, last_modified, snapshot, excerpt, rules, next_attempt_at)
    SELECT $3::text, id, $4::timestamptz, $5::text, now(), $6::text, 1, $7::text, $8::text,
           $9::integer, $10::integer, $11::text, $13::text, $14::text, $15::bytea, $16::text,
           $18::text, now() + $20::interval
      FROM lease
    ON CONFLICT (work_id) DO UPDATE
       SET checked_at = excluded.checked_at, status = excluded.status,
           attempt_count = c.attempt_count + 1, result_hash = excluded.result_hash,
           previous_hash = excluded.previous_hash, http_status = excluded.http_status,
           body_bytes = excluded.body_bytes, error_message = excluded.error_message,
           etag = excluded.etag, last_modified = excluded.last_modified,
           snapshot = excluded.snapshot, excerpt = excluded.excerpt, rules = excluded.rules,
           next_attempt_at = excluded.next_attempt_at
     WHERE c.status IN ('retrying', 'failed', 'skipped')  -- a real result replaces a placeholder
    RETURNING {CHECK_COLUMNS}
), pruned AS (
    -- Keep the newest $17 snapshots of the target (this new one included).
    UPDATE source_checks SET snapshot = NULL
     WHERE target_id = $1 AND snapshot IS NOT NULL AND $15::bytea IS NOT NULL
       AND EXISTS (SELECT 1 FROM recorded)
       AND work_id NOT IN (
           SELECT work_id FROM source_checks WHERE target_id = $1 AND snapshot IS NOT NULL
            ORDER BY checked_at DESC LIMIT $17::integer - 1)
), moved AS (
    UPDATE monitor_targets
       SET lease_token = NULL, lease_expires_at = NULL,
           next_check_at = CASE WHEN $12::boolean
                                THEN {_next_slot_after("$4::timestamptz", "$19::timestamptz")}
                                ELSE next_check_at END,
           failure_streak = CASE WHEN $12::boolean THEN 0 ELSE failure_streak END,
           updated_at = now()
     WHERE id = $1 AND lease_token = $2 AND EXISTS (SELECT 1 FROM recorded)
    RETURNING id, anchor, interval_seconds, next_check_at
), skipped AS (
    {_insert_skipped("$4::timestamptz", "'not checked: came due before ' || $3 || ' was final'")}
     WHERE $12::boolean
    ON CONFLICT DO NOTHING
)
SELECT {CHECK_COLUMNS}, (SELECT next_check_at FROM moved WHERE $12::boolean) AS next_slot
  FROM recorded
"""

# Only the holder can release: an old attempt cannot clear a newer attempt's lease.
RELEASE = """
UPDATE monitor_targets SET lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2
"""

# Finalise a slot whose check gave up: keep the attempts' row as `failed` (or write one if no
# attempt got that far), advance the schedule ($6) if it still points at or before this
# slot, and clear the (expired) lease so the attempt that held it can never complete the row
# later. Waits for nobody: a live lease means an attempt is still running, so this refuses
# (no row).
RECORD_FAILED = f"""
WITH target AS (
    SELECT id, next_check_at <= $3 AND $6::boolean AS advance FROM monitor_targets
     WHERE id = $1 AND (lease_token IS NULL OR lease_expires_at <= now())
       FOR UPDATE
), recorded AS (
    INSERT INTO source_checks AS c (work_id, target_id, scheduled_for, kind, checked_at,
        status, attempt_count, error_message)
    SELECT $2::text, id, $3::timestamptz, $4::text, now(), 'failed', 1, $5::text FROM target
    ON CONFLICT (work_id) DO UPDATE
       SET status = 'failed', error_message = excluded.error_message, next_attempt_at = NULL
     WHERE c.status IN ('retrying', 'failed')
    RETURNING {CHECK_COLUMNS}
), moved AS (
    UPDATE monitor_targets t
       SET lease_token = NULL, lease_expires_at = NULL, updated_at = now(),
           next_check_at = CASE WHEN target.advance
                                THEN {_next_slot_after("$3::timestamptz", "$7::timestamptz")}
                                ELSE next_check_at END,
           failure_streak = CASE WHEN target.advance AND EXISTS (SELECT 1 FROM recorded)
                                 THEN failure_streak + 1 ELSE failure_streak END
      FROM target WHERE t.id = target.id
    RETURNING t.id, anchor, interval_seconds, next_check_at, target.advance
), skipped AS (
    {_insert_skipped("$3::timestamptz", "'not checked: came due before ' || $2 || ' gave up'")}
     WHERE m.advance
    ON CONFLICT DO NOTHING
)
SELECT {CHECK_COLUMNS}, (SELECT next_check_at FROM moved WHERE $6::boolean) AS next_slot
  FROM recorded
"""

# A registration creates the target with the grid it proposes, or adopts the grid and the
# pending slot already recorded (a reset to the first workflow task, a target started again).
# Only a different interval changes the grid, as a reconfigure does: the pending slot stays
# and later slots use the new interval. `xmax = 0` tells an insert from an update.
REGISTER_TARGET = """
INSERT INTO monitor_targets AS t (id, url, interval_seconds, enabled, unhealthy_after,
    anchor, next_check_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE
   SET url = excluded.url, interval_seconds = excluded.interval_seconds,
       enabled = excluded.enabled, unhealthy_after = excluded.unhealthy_after,
       anchor = CASE WHEN t.interval_seconds = excluded.interval_seconds THEN t.anchor
                     ELSE t.next_check_at END,
       updated_at = now()
RETURNING anchor, next_check_at, xmax = 0 AS created
"""

# The workflow's view, mirrored. The grid stays unless the interval changed (a reconfigure):
# then it is re-anchored at the pending slot. A missing row (deleted, a restored database)
# is written again on the workflow's grid, whose pending slot is one of its points.
SYNC_TARGET = """
INSERT INTO monitor_targets AS t (id, url, interval_seconds, enabled, unhealthy_after,
    anchor, next_check_at)
VALUES ($1, $2, $3, $4, $5, $6, $6)
ON CONFLICT (id) DO UPDATE
   SET url = excluded.url, interval_seconds = excluded.interval_seconds,
       enabled = excluded.enabled, next_check_at = excluded.next_check_at,
       unhealthy_after = excluded.unhealthy_after,
       anchor = CASE WHEN t.interval_seconds = excluded.interval_seconds THEN t.anchor
                     ELSE excluded.next_check_at END,
       updated_at = now()
"""

# Slots the workflow found due and never checked (before a pause took effect, or before its
# first task ran), by Temporal's clock: one skipped row each.
INSERT_SKIPPED = """
INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at, status,
    error_message)
SELECT slot_work_id($1, s), $1, s, 'scheduled', now(), 'skipped', $3
  FROM unnest($2::timestamptz[]) AS s
ON CONFLICT DO NOTHING
"""

# Channels follow the config: new ones are added (keeping the secret of one that exists),
# dropped ones deleted. Deliveries already recorded stay.
SYNC_CHANNELS = """
WITH wanted AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])
        AS w(channel_id, kind, destination, secret)
), dropped AS (
    DELETE FROM channels
     WHERE target_id = $1 AND channel_id NOT IN (SELECT channel_id FROM wanted)
)
INSERT INTO channels (target_id, channel_id, kind, destination, secret)
SELECT $1, channel_id, kind, destination, secret FROM wanted
ON CONFLICT (target_id, channel_id) DO NOTHING
"""

# Heartbeat: push the lease forward while a slow fetch is still making progress. Only the
# holder can; zero rows means the lease was taken over and the fetch should stop.
EXTEND_LEASE = """
UPDATE monitor_targets SET lease_expires_at = now() + $3::interval
 WHERE id = $1 AND lease_token = $2
"""

SELECT_CHECK = f"SELECT {CHECK_COLUMNS} FROM source_checks WHERE work_id = $1"
DELETE_TARGET = """
WITH channels_gone AS (DELETE FROM channels WHERE target_id = $1),
     deliveries_gone AS (DELETE FROM deliveries WHERE target_id = $1)
DELETE FROM monitor_targets WHERE id = $1
"""


@dataclass(frozen=True)
class Claim:
    target_exists: bool
    enabled: bool | None
    next_check_at: datetime | None
    claimed: bool
    previous_hash: str | None
    existing: CheckResult | None
    previous_etag: str | None = None
    previous_last_modified: str | None = None
    previous_snapshot: bytes | None = None
    previous_rules: str | None = None

    def under_rules(self, rules: str) -> "Claim":
        """The claim as seen by a check under `rules`: if the last observation was made
        under other rules, there is nothing comparable before it (a new baseline)."""
        if self.previous_hash is None or self.previous_rules == rules:
            return self
        return replace(
            self, previous_hash=None, previous_etag=None, previous_last_modified=None,
            previous_snapshot=None,
        )  # fmt: skip

    def final(self, *, retrying: bool = False) -> CheckResult | None:
        """The stored result if this slot needs no more work (a retry re-runs a failed one)."""
        if self.existing is None:
            return None
        if self.existing.status not in (CheckStatus.RETRYING, CheckStatus.FAILED):
            return self.existing
        if retrying:
            return None
        schedule_moved_on = self.next_check_at is not None and (
            self.next_check_at > self.existing.scheduled_for
        )
        if self.existing.kind is CheckKind.SCHEDULED and schedule_moved_on:
            return self.existing
        return None


@dataclass(frozen=True)
class Outcome:
    """What one attempt found, ready to commit."""

    status: CheckStatus
    result_hash: str | None = None
    previous_hash: str | None = None
    http_status: int | None = None
    body_bytes: int | None = None
    error_message: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    snapshot: bytes | None = None
    excerpt: str | None = None
    rules: str | None = None
    next_attempt_in: timedelta | None = None
    """For a failed attempt that will be retried: how long until the next one."""


def _result(row: asyncpg.Record | dict[str, object], **extra: object) -> CheckResult:
    fields = {k: row[k] for k in CheckResult.model_fields if k in row.keys()}  # noqa: SIM118
    return CheckResult.model_validate({**fields, **extra})


async def claim(
    pool: asyncpg.Pool,
    *,
    target_id: str,
    work_id: str,
    token: str,
    lease: timedelta,
    on_schedule: bool,
    slot: datetime,
) -> Claim:
    row = await pool.fetchrow(CLAIM, target_id, work_id, token, lease, not on_schedule, slot)
    assert row is not None
    existing = row["existing"]
    previous = json.loads(row["previous"]) if row["previous"] else {}
    return Claim(
        target_exists=row["target_exists"],
        enabled=row["enabled"],
        next_check_at=row["next_check_at"],
        claimed=row["claimed"],
        previous_hash=previous.get("result_hash"),
        existing=CheckResult.model_validate_json(existing) if existing else None,
        previous_etag=previous.get("etag"),
        previous_last_modified=previous.get("last_modified"),
        previous_snapshot=row["previous_snapshot"],
        previous_rules=previous.get("rules"),
    )


async def commit(
    pool: asyncpg.Pool,
    *,
    target_id: str,
    token: str,
    work_id: str,
    slot: datetime,
    kind: CheckKind,
    outcome: Outcome,
    advance: bool,
    temporal_now: datetime | None = None,
    snapshots_kept: int = 50,
) -> CheckResult | None:
    """Record the attempt; None if the lease was lost or the slot was already final.

    With `advance` (a final outcome of the due slot), the schedule moves to the first grid
    point after now (`next_slot`), and each slot it passes gets a skipped row."""
    row = await pool.fetchrow(
        COMMIT, target_id, token, work_id, slot, kind.value, outcome.status.value,
        outcome.result_hash, outcome.previous_hash, outcome.http_status, outcome.body_bytes,
        outcome.error_message, advance, outcome.etag, outcome.last_modified, outcome.snapshot,
        outcome.excerpt, snapshots_kept, outcome.rules, temporal_now, outcome.next_attempt_in,
    )  # fmt: skip
    return None if row is None else _result(row)


async def release(pool: asyncpg.Pool, *, target_id: str, token: str) -> bool:
    status = await pool.execute(RELEASE, target_id, token)
    return bool(status == "UPDATE 1")


async def record_failed(
    pool: asyncpg.Pool,
    *,
    target_id: str,
    work_id: str,
    slot: datetime,
    kind: CheckKind,
    error_message: str,
    advance: bool,
    temporal_now: datetime | None = None,
) -> CheckResult | None:
    """Finalise a given-up slot as failed; None if an attempt still holds the lease or the
    slot is already final. `next_slot` is where the schedule stands afterwards."""
    row = await pool.fetchrow(
        RECORD_FAILED, target_id, work_id, slot, kind.value, error_message, advance, temporal_now
    )
    return None if row is None else _result(row)


# A re-run of a final slot finds the schedule still at or before it (a sync wrote the
# workflow's slot back): move the schedule on as the commit would have, with a skipped row
# for each slot the jump passes. Returns where the schedule stands either way.
ADVANCE_PAST_FINAL = f"""
WITH moved AS (
    UPDATE monitor_targets SET next_check_at = {_next_slot_after("$2", "$3::timestamptz")},
           updated_at = now()
     WHERE id = $1 AND next_check_at <= $2
    RETURNING id, anchor, interval_seconds, next_check_at
), skipped AS (
    {_insert_skipped("$2", "'not checked: the schedule was behind'")}
    ON CONFLICT DO NOTHING
)
SELECT COALESCE((SELECT next_check_at FROM moved),
                (SELECT next_check_at FROM monitor_targets WHERE id = $1))
"""


async def advance_past_final(
    pool: asyncpg.Pool, *, target_id: str, slot: datetime, temporal_now: datetime | None
) -> datetime | None:
    """Where the schedule stands once `slot` is final; None if the target has no row."""
    value = await pool.fetchval(ADVANCE_PAST_FINAL, target_id, slot, temporal_now)
    return value if isinstance(value, datetime) else None


# Changes between two slots with a channel (that existed when the change was recorded) that
# has neither sent nor given up: the run that recorded them is not the one asking, so nobody
# else will tell the channels.
UNNOTIFIED_CHANGES = f"""
SELECT {CHECK_COLUMNS} FROM source_checks c
 WHERE c.target_id = $1 AND c.kind = 'scheduled' AND c.status = 'changed'
   AND c.scheduled_for > $2 AND c.scheduled_for < $3
   AND EXISTS (
       SELECT 1 FROM channels ch
        WHERE ch.target_id = c.target_id AND ch.created_at <= c.checked_at AND NOT EXISTS (
            SELECT 1 FROM deliveries d
             WHERE d.work_id = c.work_id AND d.channel_id = ch.channel_id
               AND d.notice = 'changed' AND d.status IN ('sent', 'failed')))
 ORDER BY c.scheduled_for
"""


async def unnotified_changes(
    pool: asyncpg.Pool, target_id: str, after: datetime, before: datetime
) -> list[CheckResult]:
    return [_result(row) for row in await pool.fetch(UNNOTIFIED_CHANGES, target_id, after, before)]


TARGET_EXISTS = "SELECT EXISTS (SELECT 1 FROM monitor_targets WHERE id = $1)"


async def target_exists(pool: asyncpg.Pool, target_id: str) -> bool:
    return bool(
        await pool.fetchval(
            "SELECT EXISTS (SELECT 1 FROM monitor_targets WHERE id = $1)", target_id
        )
    )


async def stored_check(pool: asyncpg.Pool, work_id: str) -> CheckResult | None:
    row = await pool.fetchrow(SELECT_CHECK, work_id)
    return None if row is None else _result(row)


async def register_target(
    pool: asyncpg.Pool,
    config: TargetConfig,
    *,
    anchor: datetime,
    next_slot: datetime,
    enabled: bool,
    skipped: Sequence[datetime] = (),
) -> Registration:
    """Create the target on the proposed grid, or adopt the grid and pending slot it has."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            REGISTER_TARGET, config.target_id, config.url, config.interval_seconds, enabled,
            config.unhealthy_after, anchor, next_slot,
        )  # fmt: skip
        assert row is not None
        await _sync_channels(conn, config)
        unnotified: list[CheckResult] = []
        if row["created"]:
            await conn.execute(INSERT_SKIPPED, config.target_id, list(skipped), SKIPPED_EARLY)
        else:
            found = await conn.fetch(
                UNNOTIFIED_CHANGES, config.target_id, datetime.min.replace(tzinfo=UTC),
                row["next_check_at"],
            )  # fmt: skip
            unnotified = [_result(change) for change in found]
    return Registration(
        anchor=row["anchor"],
        next_slot=row["next_check_at"],
        created=row["created"],
        unnotified=unnotified,
    )


SKIPPED_EARLY = "not checked: was due before the workflow could take it (late start or pause)"


async def sync_target(
    pool: asyncpg.Pool,
    config: TargetConfig,
    *,
    next_slot: datetime,
    enabled: bool,
    skipped: Sequence[datetime] = (),
) -> None:
    """Mirror the target and its channels in one transaction. A new webhook gets a fresh
    signing secret here, in the database, so no secret ever passes through Temporal.
    `skipped` slots (overdue when a pause took effect, or before the workflow's first task
    ran) get their skipped rows."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            SYNC_TARGET, config.target_id, config.url, config.interval_seconds, enabled,
            config.unhealthy_after, next_slot,
        )  # fmt: skip
        await _sync_channels(conn, config)
        if skipped:
            await conn.execute(INSERT_SKIPPED, config.target_id, list(skipped), SKIPPED_EARLY)


async def _sync_channels(
    conn: asyncpg.Connection | PoolConnectionProxy, config: TargetConfig
) -> None:
    channels = config.channels
    await conn.execute(
        SYNC_CHANNELS,
        config.target_id,
        [c.channel_id for c in channels],
        [c.kind.value for c in channels],
        [c.destination for c in channels],
        [new_webhook_secret() if c.kind is ChannelKind.WEBHOOK else None for c in channels],
    )


def new_webhook_secret() -> str:
    """Standard Webhooks form: `whsec_` + base64 of 24 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


async def extend_lease(pool: asyncpg.Pool, *, target_id: str, token: str, lease: timedelta) -> bool:
    status = await pool.execute(EXTEND_LEASE, target_id, token, lease)
    return bool(status == "UPDATE 1")


async def delete_target(pool: asyncpg.Pool, target_id: str) -> None:
    await pool.execute(DELETE_TARGET, target_id)


# Read side for the CLI.
LIST_TARGETS = """
SELECT t.id, t.url, t.interval_seconds, t.enabled, t.next_check_at,
       t.failure_streak >= t.unhealthy_after AS unhealthy,
       c.status AS last_status
  FROM monitor_targets t
  LEFT JOIN LATERAL (
      SELECT status FROM source_checks
       WHERE target_id = t.id AND status <> 'skipped' ORDER BY checked_at DESC LIMIT 1
  ) c ON true
 ORDER BY t.id
"""

FAILED_CHECKS = f"""
SELECT {CHECK_COLUMNS} FROM source_checks
 WHERE status IN ('retrying', 'failed') AND ($1::text IS NULL OR target_id = $1)
 ORDER BY scheduled_for DESC LIMIT $2
"""

SELECT_CHECK_TARGET = "SELECT target_id FROM source_checks WHERE work_id = $1"

CHECK_HISTORY = f"""
SELECT {CHECK_COLUMNS} FROM source_checks
 WHERE target_id = $1 ORDER BY scheduled_for DESC LIMIT $2
"""


async def list_targets(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch(LIST_TARGETS))


TARGET_CHANNELS = """
SELECT channel_id, kind, destination, secret, disabled_reason FROM channels
 WHERE target_id = $1 ORDER BY kind, destination
"""

TARGET_DELIVERIES = """
SELECT work_id, notice, channel_id, status, attempt_count, last_error, sent_at
  FROM deliveries WHERE target_id = $1 ORDER BY created_at DESC, channel_id LIMIT $2
"""


async def target_channels(pool: asyncpg.Pool, target_id: str) -> list[asyncpg.Record]:
    return list(await pool.fetch(TARGET_CHANNELS, target_id))


async def target_deliveries(pool: asyncpg.Pool, target_id: str, limit: int) -> list[asyncpg.Record]:
    return list(await pool.fetch(TARGET_DELIVERIES, target_id, limit))


SNAPSHOTS_FOR_DIFF = """
WITH chosen AS (
    SELECT work_id, checked_at, snapshot FROM source_checks
     WHERE target_id = $1 AND status = 'changed' AND snapshot IS NOT NULL
       AND ($2::text IS NULL OR work_id = $2)
     ORDER BY checked_at DESC LIMIT 1
)
SELECT c.work_id, c.snapshot, p.work_id AS previous_work_id, p.snapshot AS previous_snapshot
  FROM chosen c
  LEFT JOIN LATERAL (
      SELECT work_id, snapshot FROM source_checks
       WHERE target_id = $1 AND snapshot IS NOT NULL AND checked_at < c.checked_at
       ORDER BY checked_at DESC LIMIT 1
  ) p ON true
"""


async def snapshots_for_diff(
    pool: asyncpg.Pool, target_id: str, work_id: str | None
) -> asyncpg.Record | None:
    """A change's snapshot and the one before it (the newest change if no work id)."""
    return await pool.fetchrow(SNAPSHOTS_FOR_DIFF, target_id, work_id)


async def failed_checks(pool: asyncpg.Pool, target_id: str | None, limit: int) -> list[CheckResult]:
    """Slots that gave up, and slots still being retried (`retrying`), newest first."""
    return [_result(row) for row in await pool.fetch(FAILED_CHECKS, target_id, limit)]


async def check_target(pool: asyncpg.Pool, work_id: str) -> str | None:
    value = await pool.fetchval(SELECT_CHECK_TARGET, work_id)
    return value if isinstance(value, str) else None


async def check_history(pool: asyncpg.Pool, target_id: str, limit: int) -> list[CheckResult]:
    return [_result(row) for row in await pool.fetch(CHECK_HISTORY, target_id, limit)]
