"""Postgres access for checks: the lease, the one-row-per-slot record, the schedule mirror.

Storage only moves rows in and out; every statement is a named query in
`sql/queries.sql`. "Already recorded" is a normal outcome, returned, never raised.
"""

import base64
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import asyncpg

from activities.queries import QUERIES, Executor
from pricewatch.health import ON_TIME_FLOOR, ON_TIME_SHARE
from pricewatch.models import (
    ChannelKind,
    CheckKind,
    CheckResult,
    CheckStatus,
    Registration,
    TargetConfig,
)
from pricewatch.prices import Move, Price

# Every statement ends within STATEMENT_TIMEOUT, or asyncpg cancels it (the cancel request
# has as long again, and the connection is then closed): a connection that hangs instead of
# refusing (a black-holed network, a stuck server) fails the attempt in at most twice this,
# which Temporal retries, instead of holding it until the activity's own timeout. The hot
# path's statements take milliseconds. A new connection has CONNECT_TIMEOUT.
STATEMENT_TIMEOUT = timedelta(seconds=5)
CONNECT_TIMEOUT = timedelta(seconds=5)
# The CLI's statements also summarise (`prune --dry-run` counts every expired row).
CLI_STATEMENT_TIMEOUT = timedelta(seconds=60)
# An amount a chart can draw: what price_points asks in SQL. 1.8 stored some no price has
# (`1E+999999`); 1.9's reader skips any of more than 15 digits.
DRAWABLE = re.compile(r"[-+]?[0-9]{0,40}[.]?[0-9]{0,40}([eE][-+]?[0-9]{1,2})?")

SKIPPED_EARLY = "not checked: was due before the workflow could take it (late start or pause)"


@dataclass(frozen=True)
class Claim:
    target_exists: bool
    enabled: bool | None
    next_slot: datetime | None
    claimed: bool
    previous_hash: str | None
    existing: CheckResult | None
    previous_etag: str | None = None
    previous_last_modified: str | None = None
    previous_snapshot: bytes | None = None
    previous_rules: str | None = None
    previous_prices: list[Price] | None = None
    previous_skipped_values: list[str] = field(default_factory=list)
    lease_left: timedelta | None = None
    """Not claimed because another attempt holds a live lease: how long it has left."""
    claimed_at: datetime | None = None
    """The database's clock at the claim."""

    def without_previous(self) -> "Claim":
        """The claim with nothing to compare against: the next check is a new baseline."""
        return replace(
            self, previous_hash=None, previous_etag=None, previous_last_modified=None,
            previous_snapshot=None, previous_prices=None, previous_skipped_values=[],
        )  # fmt: skip


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
    prices: list[Price] | None = None
    price_moves: list[Move] | None = None
    notify: bool = True
    skipped_values: list[str] = field(default_factory=list)
    """Price mode: the values the check could not read, each with why (the row names them)."""
    screenshot: bytes | None = None
    """A rendered page's PNG, for a new state (beside its snapshot)."""


async def create_pool(
    url: str, *, max_size: int, statement_timeout: timedelta = STATEMENT_TIMEOUT
) -> asyncpg.Pool:
    """A pool whose every statement and connection attempt has a bound. It opens one
    connection at once (Postgres answers, or this raises) and then only those that callers
    need: no floor kept in the background (asyncpg's `min_size`), which, while Postgres is
    away, only retries into the outage and logs a traceback each time."""
    return await asyncpg.create_pool(
        url, init_size=1, min_size=0, max_size=max_size,
        command_timeout=statement_timeout.total_seconds(),
        timeout=CONNECT_TIMEOUT.total_seconds(), reset=keep_session,
    )  # fmt: skip


async def keep_session(connection: asyncpg.Connection) -> None:
    """Skip asyncpg's reset query on every release to the pool: a round trip per statement
    (half a worker's hot path, a fifth of a dashboard page's Postgres time). Nothing here
    leaves session state behind (no LISTEN, SET, cursors or session-level advisory locks;
    migrations lock for their transaction only); asyncpg still rolls back an open
    transaction."""


def _json_list(values: Sequence[Price | Move] | None) -> str | None:
    return None if values is None else json.dumps([value.as_json() for value in values])


def _result(row: asyncpg.Record | dict[str, object]) -> CheckResult:
    fields = {k: row[k] for k in CheckResult.model_fields if k in row.keys()}  # noqa: SIM118
    return CheckResult.model_validate(fields)


async def claim(
    pool: asyncpg.Pool,
    *,
    target_id: str,
    work_id: str,
    execution_id: str,
    lease: timedelta,
    on_schedule: bool,
    slot: datetime,
) -> Claim:
    row = await QUERIES["claim"].fetchrow(
        pool, target_id=target_id, work_id=work_id, execution_id=execution_id, lease=lease,
        on_schedule=on_schedule, slot=slot,
    )  # fmt: skip
    assert row is not None
    existing = row["existing"]
    previous = json.loads(row["previous"]) if row["previous"] else {}
    return Claim(
        target_exists=row["target_exists"],
        enabled=row["enabled"],
        next_slot=row["next_slot"],
        claimed=row["claimed"],
        previous_hash=previous.get("result_hash"),
        existing=CheckResult.model_validate_json(existing) if existing else None,
        previous_etag=previous.get("etag"),
        previous_last_modified=previous.get("last_modified"),
        previous_snapshot=row["previous_snapshot"],
        previous_rules=previous.get("rules"),
        previous_prices=(
            [Price.from_json(p) for p in previous["prices"]] if previous.get("prices") else None
        ),
        previous_skipped_values=previous.get("skipped_values") or [],
        lease_left=None if row["claimed"] else row["lease_left"],
        claimed_at=row["claimed_at"],
    )


async def commit(
    pool: asyncpg.Pool,
    *,
    target_id: str,
    execution_id: str,
    work_id: str,
    slot: datetime,
    kind: CheckKind,
    outcome: Outcome,
    advance: bool,
    temporal_now: datetime | None = None,
    snapshots_kept: int = 50,
    skip_cause: str | None = None,
) -> CheckResult | None:
    """Record the attempt; None if the lease was lost or the slot was already final.

    With `advance` (a final outcome of the next slot), the schedule moves to the first grid
    point after now (`next_slot`), and each slot it passes gets a skipped row, saying
    `skip_cause` (what held this slot back) if given; one it passes still `retrying` was
    abandoned and becomes `skipped` too."""
    row = await QUERIES["commit"].fetchrow(
        pool, target_id=target_id, execution_id=execution_id, work_id=work_id, slot=slot,
        kind=kind.value, status=outcome.status.value, result_hash=outcome.result_hash,
        previous_hash=outcome.previous_hash, http_status=outcome.http_status,
        body_bytes=outcome.body_bytes, error_message=outcome.error_message, etag=outcome.etag,
        last_modified=outcome.last_modified, snapshot=outcome.snapshot, excerpt=outcome.excerpt,
        rules=outcome.rules, next_attempt_in=outcome.next_attempt_in,
        prices=_json_list(outcome.prices), price_moves=_json_list(outcome.price_moves),
        notify=outcome.notify, skipped_values=outcome.skipped_values or None,
        screenshot=outcome.screenshot,
        snapshots_kept=snapshots_kept, advance=advance, temporal_now=temporal_now,
        skip_cause=skip_cause,
    )  # fmt: skip
    return None if row is None else _result(row)


async def release(pool: asyncpg.Pool, *, target_id: str, execution_id: str) -> bool:
    status = await QUERIES["release"].execute(pool, target_id=target_id, execution_id=execution_id)
    return status == "UPDATE 1"


async def extend_lease(
    pool: asyncpg.Pool, *, target_id: str, execution_id: str, lease: timedelta
) -> bool:
    status = await QUERIES["extend_lease"].execute(
        pool, target_id=target_id, execution_id=execution_id, lease=lease
    )
    return status == "UPDATE 1"


async def lease_left(pool: asyncpg.Pool, target_id: str) -> timedelta | None:
    """How long the target's live lease has left; None if no lease is live."""
    value = await QUERIES["lease_left"].fetchval(pool, target_id=target_id)
    return value if isinstance(value, timedelta) else None


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
    execution_id: str = "",
    skip_cause: str | None = None,
) -> CheckResult | None:
    """Finalise a given-up slot as failed; None if an attempt still holds the lease or the
    slot is already final. `next_slot` is where the schedule stands afterwards.
    `execution_id`: this dead letter's own attempt, which supersedes the check's attempts
    of the same run (a lease one of them left is no reason to wait)."""
    row = await QUERIES["record_failed"].fetchrow(
        pool, target_id=target_id, work_id=work_id, slot=slot, kind=kind.value,
        error_message=error_message, advance=advance, temporal_now=temporal_now,
        execution_id=execution_id, skip_cause=skip_cause,
    )  # fmt: skip
    return None if row is None else _result(row)


async def advance_past_final(
    pool: asyncpg.Pool,
    *,
    target_id: str,
    slot: datetime,
    temporal_now: datetime | None,
    skip_cause: str | None = None,
) -> datetime | None:
    """Where the schedule stands once `slot` is final; None if the target has no row."""
    value = await QUERIES["advance_past_final"].fetchval(
        pool, target_id=target_id, slot=slot, temporal_now=temporal_now, skip_cause=skip_cause
    )
    return value if isinstance(value, datetime) else None


async def unnotified_changes(
    pool: asyncpg.Pool, target_id: str, after: datetime, before: datetime
) -> list[CheckResult]:
    rows = await QUERIES["unnotified_changes"].fetch(
        pool, target_id=target_id, after=after, before=before
    )
    return [_result(row) for row in rows]


async def register_target(
    pool: asyncpg.Pool,
    config: TargetConfig,
    *,
    anchor: datetime,
    next_slot: datetime,
    enabled: bool,
    skipped: Sequence[datetime] = (),
) -> Registration:
    """Create the target on the proposed grid, or adopt the grid and next slot it has."""
    async with pool.acquire() as conn, conn.transaction():
        row = await QUERIES["register_target"].fetchrow(
            conn, **_target(config), enabled=enabled, anchor=anchor, next_slot=next_slot
        )
        assert row is not None
        await _sync_channels(conn, config)
        unnotified: list[CheckResult] = []
        if row["created"]:
            await _insert_skipped(conn, config.target_id, skipped)
        else:
            found = await QUERIES["unnotified_changes"].fetch(
                conn, target_id=config.target_id, after=datetime.min.replace(tzinfo=UTC),
                before=row["next_slot"],
            )  # fmt: skip
            unnotified = [_result(change) for change in found]
    return Registration(
        anchor=row["anchor"],
        next_slot=row["next_slot"],
        created=row["created"],
        unnotified=unnotified,
    )


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
    ran) get their skipped rows. A slot still `retrying` that the sync moves the schedule past
    was abandoned: it becomes `skipped` (a run retrying it would never claim it again)."""
    async with pool.acquire() as conn, conn.transaction():
        await QUERIES["abandon_passed_by_sync"].execute(
            conn, target_id=config.target_id, next_slot=next_slot
        )
        await QUERIES["sync_target"].execute(
            conn, **_target(config), enabled=enabled, next_slot=next_slot
        )
        await _sync_channels(conn, config)
        await _insert_skipped(conn, config.target_id, skipped)


async def reconfigure_target(pool: asyncpg.Pool, config: TargetConfig) -> bool:
    """Mirror a reconfigured target's config and channels, leaving its schedule, pause and
    lease alone (a check may hold it); False if the target has no row."""
    async with pool.acquire() as conn, conn.transaction():
        if await QUERIES["reconfigure_target"].fetchval(conn, **_target(config)) is None:
            return False
        await _sync_channels(conn, config)
    return True


def _target(config: TargetConfig) -> dict[str, object]:
    calendar = config.calendar
    return {
        "target_id": config.target_id,
        "url": config.url,
        "interval_seconds": config.interval_seconds,
        "unhealthy_after": config.unhealthy_after,
        "config": config.model_dump_json(),
        # The grid the database advances on (0008_calendar.sql): NULLs for an interval grid.
        "time_zone": calendar.time_zone if calendar else None,
        "calendar_times": list(calendar.times) if calendar else None,
        "calendar_days": list(calendar.days_of_month) if calendar else None,
        "calendar_months": list(calendar.months) if calendar else None,
        "calendar_weekdays": list(calendar.weekdays) if calendar else None,
        "calendar_days_or": calendar.days_or if calendar else None,
        "jitter_seconds": calendar.jitter_seconds if calendar else 0,
        "calendar_offset": calendar.offset_seconds if calendar else None,
    }


async def _insert_skipped(conn: Executor, target_id: str, slots: Sequence[datetime]) -> None:
    if slots:
        await QUERIES["insert_skipped"].execute(
            conn, target_id=target_id, slots=list(slots), reason=SKIPPED_EARLY
        )


async def _sync_channels(conn: Executor, config: TargetConfig) -> None:
    channels = config.channels
    await QUERIES["sync_channels"].execute(
        conn,
        target_id=config.target_id,
        channel_ids=[c.channel_id for c in channels],
        kinds=[c.kind.value for c in channels],
        destinations=[c.destination for c in channels],
        secrets=[new_webhook_secret() if c.kind is ChannelKind.WEBHOOK else None for c in channels],
        titles=[c.title for c in channels],
        bodies=[c.body for c in channels],
    )


def new_webhook_secret() -> str:
    """Standard Webhooks form: `whsec_` + base64 of 24 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


async def delete_target(pool: asyncpg.Pool, target_id: str) -> None:
    await QUERIES["delete_target"].execute(pool, target_id=target_id)
    await QUERIES["forget_notify_urls"].execute(pool)


async def forget_unused_notify_urls(pool: asyncpg.Pool, refs: list[str]) -> None:
    """Delete these stored Apprise URLs unless a channel uses one (an add that failed)."""
    await QUERIES["forget_unused_notify_urls"].execute(pool, refs=refs)


async def keep_notify_url(pool: asyncpg.Pool, url: str) -> str:
    """The ref an Apprise URL is stored under (stored now if it was not)."""
    ref: str = await QUERIES["keep_notify_url"].fetchval(pool, url=url)
    return ref


async def find_notify_url(pool: asyncpg.Pool, url: str) -> str | None:
    """The ref of an Apprise URL already stored, without storing it."""
    ref: str | None = await QUERIES["find_notify_url"].fetchval(pool, url=url)
    return ref


async def stored_notify_url(pool: asyncpg.Pool, ref: str) -> str | None:
    url: str | None = await QUERIES["stored_notify_url"].fetchval(pool, ref=ref)
    return url


async def channels_to_test(pool: asyncpg.Pool, target_id: str) -> list[asyncpg.Record]:
    return await QUERIES["channels_to_test"].fetch(pool, target_id=target_id)


async def target_configs(pool: asyncpg.Pool) -> dict[str, tuple[TargetConfig | None, bool]]:
    """Each target's mirrored config (None until its first sync under 1.1) and whether it
    is enabled (not paused)."""
    rows = await QUERIES["target_configs"].fetch(pool)
    return {
        row["id"]: (
            TargetConfig.model_validate_json(row["config"]) if row["config"] else None,
            row["enabled"],
        )
        for row in rows
    }


async def target_exists(pool: asyncpg.Pool, target_id: str) -> bool:
    return bool(await QUERIES["target_exists"].fetchval(pool, target_id=target_id))


async def stored_check(pool: asyncpg.Pool, work_id: str) -> CheckResult | None:
    row = await QUERIES["stored_check"].fetchrow(pool, work_id=work_id)
    return None if row is None else _result(row)


# Read side for the client.


async def check_target(pool: asyncpg.Pool, work_id: str) -> str | None:
    value = await QUERIES["check_target"].fetchval(pool, work_id=work_id)
    return value if isinstance(value, str) else None


async def list_targets(
    pool: asyncpg.Pool,
    trend: int = 20,
    search: str | None = None,
    state: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    tag: str | None = None,
    sort: str = "id",
    descending: bool = False,
) -> list[dict[str, object]]:
    """Targets in `sort`'s order, each with `total`: how many match `search`, `state` and
    `tag`, `overdue` as `health` would count its next slot late, each named price's last
    `trend` amounts (`trends`) and the first price's (`trend`: the sparkline before 2.0)."""
    async with pool.acquire() as conn, conn.transaction():
        # Planned for these values: a plan for any (`CASE :sort`, the optional filters) was
        # 9.5 ms a page at 10,000 targets, this 6; asyncpg reuses a statement's plan.
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        rows = await QUERIES["list_targets"].fetch(
            conn, trend=trend, search=search, state=state, limit=limit, offset=offset, tag=tag,
            sort=sort, direction=-1 if descending else 1,
            on_time_floor=ON_TIME_FLOOR.total_seconds(), on_time_share=ON_TIME_SHARE,
        )  # fmt: skip
    listed = [_decoded(row, "prices", "trends", "calendar", "tags") for row in rows]
    for row in listed:
        prices, trends = row["prices"], row["trends"]
        if isinstance(trends, dict):
            row["trends"] = trends = {
                name: [a for a in amounts if isinstance(a, str) and DRAWABLE.fullmatch(a)]
                for name, amounts in trends.items()
            }
        first = prices[0].get("name") if isinstance(prices, list) and prices else None
        row["trend"] = trends.get(first, []) if isinstance(trends, dict) else []
    return listed


async def price_history(
    pool: asyncpg.Pool, target_id: str, since: datetime, limit: int
) -> list[dict[str, object]]:
    rows = await QUERIES["price_history"].fetch(pool, target_id=target_id, since=since, limit=limit)
    return [_decoded(row, "prices") for row in rows]


async def price_points(
    pool: asyncpg.Pool, target_id: str, limit: int
) -> dict[str, list[tuple[datetime, Decimal]]]:
    """Each named price's (slot, amount) over the newest `limit` slots, oldest first, names in
    the order the slots list them."""
    series: dict[str, list[tuple[datetime, Decimal]]] = {}
    for name, slot, amount in await QUERIES["price_points"].fetch(
        pool, target_id=target_id, limit=limit
    ):
        series.setdefault(name, []).append((slot, amount))
    return series


@dataclass(frozen=True)
class PriceLine:
    """One named price of one target over its slots, oldest first: a chart's line."""

    target_id: str
    name: str
    currency: str | None
    period: str | None
    points: list[tuple[datetime, Decimal]]


async def price_lines(
    pool: asyncpg.Pool,
    limit: int,
    target_id: str | None = None,
    tag: str | None = None,
    targets: int | None = None,
) -> list[PriceLine]:
    """Each named price of the target (or of the first `targets` price-mode targets tagged
    `tag`, by id) over its newest `limit` price slots, by target and then in the order the
    slots list them; the currency and period are the newest slot's."""
    points: dict[tuple[str, str], list[tuple[datetime, Decimal]]] = {}
    newest: dict[tuple[str, str], asyncpg.Record] = {}
    for row in await QUERIES["price_lines"].fetch(
        pool, limit=limit, target_id=target_id, tag=tag, targets=targets
    ):
        key = (row["target_id"], row["name"])
        points.setdefault(key, []).append((row["slot"], row["amount"]))
        newest[key] = row
    return [
        PriceLine(key[0], key[1], newest[key]["currency"], newest[key]["period"], line)
        for key, line in points.items()
    ]


async def group_changes(pool: asyncpg.Pool, tag: str, limit: int) -> list[dict[str, object]]:
    return [dict(row) for row in await QUERIES["group_changes"].fetch(pool, tag=tag, limit=limit)]


def _decoded(row: asyncpg.Record, *columns: str) -> dict[str, object]:
    """The row with its jsonb columns parsed (the pool has no JSON codec)."""
    return {**row, **{c: json.loads(row[c]) if row[c] is not None else None for c in columns}}


async def screenshot(pool: asyncpg.Pool, work_id: str) -> tuple[bool, bytes | None]:
    """Whether the check is recorded, and its screenshot if it has one."""
    row = await QUERIES["screenshot"].fetchrow(pool, work_id=work_id)
    assert row is not None
    return row["found"], row["screenshot"]


async def check_history(
    pool: asyncpg.Pool,
    target_id: str,
    limit: int,
    before: datetime | None = None,
    changes_only: bool = False,
) -> list[CheckResult]:
    """Newest slot first; `before`: the page after a slot (keyset, so deep pages stay fast);
    `changes_only`: `changed` and `failed` slots alone (what happened)."""
    rows = await QUERIES["check_history"].fetch(
        pool, target_id=target_id, limit=limit, before=before, changes_only=changes_only
    )
    return [_result(row) for row in rows]


async def failed_checks(pool: asyncpg.Pool, target_id: str | None, limit: int) -> list[CheckResult]:
    """Slots that gave up, and slots still being retried (`retrying`), newest first."""
    rows = await QUERIES["failed_checks"].fetch(pool, target_id=target_id, limit=limit)
    return [_result(row) for row in rows]


async def target_channels(pool: asyncpg.Pool, target_id: str) -> list[asyncpg.Record]:
    return await QUERIES["target_channels"].fetch(pool, target_id=target_id)


async def target_deliveries(pool: asyncpg.Pool, target_id: str, limit: int) -> list[asyncpg.Record]:
    return await QUERIES["target_deliveries"].fetch(pool, target_id=target_id, limit=limit)


async def snapshots_for_diff(
    pool: asyncpg.Pool, target_id: str, work_id: str | None
) -> asyncpg.Record | None:
    """A change's snapshot and the one before it (the newest change if no work id)."""
    return await QUERIES["snapshots_for_diff"].fetchrow(pool, target_id=target_id, work_id=work_id)
