"""The grid in SQL agrees with the grid in Python: the database computes the next slot, the
slots a late check skips and their work ids, so a worker's clock never decides them. The
names mirror: `interval_after`/`interval_between` are `IntervalGrid`'s, `grid_after`/
`grid_between` take a target's row and are `TargetConfig.grid`'s, either kind."""

import json
from datetime import UTC, datetime, timedelta

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from activities.queries import QUERIES
from activities.store import _target
from pricewatch.calendar import Calendar
from pricewatch.models import TargetConfig
from pricewatch.slots import next_slot, slots_between, work_id

moments = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
# Whole seconds, as the table stores them; up to a year.
intervals = st.integers(min_value=1, max_value=366 * 24 * 3600)
offsets = st.timedeltas(min_value=timedelta(days=-60), max_value=timedelta(days=4000))
shared_pool = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@shared_pool
@given(anchor=moments, seconds=intervals, offset=offsets, k=st.integers(-1000, 1000))
async def test_interval_after_is_next_slot(
    pool: asyncpg.Pool, anchor: datetime, seconds: int, offset: timedelta, k: int
) -> None:
    """From any point of the grid (anchor + k * interval), the first grid point after now."""
    interval = timedelta(seconds=seconds)
    slot, now = anchor + k * interval, anchor + offset
    expected = next_slot(slot, interval, max(now, slot))
    after = await pool.fetchval(
        "SELECT interval_after($1, $2, greatest($3::timestamptz, $4))", anchor, seconds, now, slot
    )
    assert after == expected


@shared_pool
@given(anchor=moments, seconds=intervals, steps=st.integers(0, 300), k=st.integers(-50, 50))
async def test_interval_between_is_slots_between(
    pool: asyncpg.Pool, anchor: datetime, seconds: int, steps: int, k: int
) -> None:
    interval = timedelta(seconds=seconds)
    slot = anchor + k * interval
    before = slot + steps * interval
    rows = await pool.fetch(
        "SELECT interval_between($1, $2, $3, $4) AS s", anchor, seconds, slot, before
    )
    assert [r["s"] for r in rows] == slots_between(slot, before, interval)


@shared_pool
@given(slot=moments, target=st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True))
async def test_slot_work_id_is_work_id(pool: asyncpg.Pool, slot: datetime, target: str) -> None:
    """Same text, microseconds only when present, so SQL-written skipped rows and
    Python-written checks share one identity per slot."""
    assert await pool.fetchval("SELECT slot_work_id($1, $2)", target, slot) == work_id(target, slot)


# A target's row as the table has it, built by the store's own mapping of a config.
ROW = "jsonb_populate_record(NULL::monitor_targets, $1::jsonb)"
ROW_2 = "jsonb_populate_record(NULL::monitor_targets, $2::jsonb)"


def row(config: TargetConfig, anchor: datetime) -> str:
    columns = _target(config)
    del columns["config"]
    return json.dumps({**columns, "id": columns.pop("target_id"), "anchor": anchor.isoformat()})


def target(cron: str | None, zone: str = "Europe/Berlin", jitter: int = 0) -> TargetConfig:
    calendar = None if cron is None else Calendar.parse(cron, zone, jitter)
    return TargetConfig(
        target_id="shop-pro",
        url="https://example.com/p",
        interval_seconds=3600,
        calendar=calendar,
    )


TARGETS = [
    target(None),
    target("30 2 * * *"),
    target("*/15 * * * *", "America/New_York", 600),
    target("0 8 * * 1-5", "UTC", 3599),
]
late = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3))


@shared_pool
@given(config=st.sampled_from(TARGETS), anchor=moments, late=late)
async def test_grid_after_and_grid_between_are_the_targets_grid(
    pool: asyncpg.Pool, config: TargetConfig, anchor: datetime, late: timedelta
) -> None:
    """Either kind of grid, from the row alone: what the workflow's `config.grid` says (the
    slots a late schedule passes end at the slot it moves to, a point of the grid)."""
    now = anchor + late
    after = await pool.fetchval(f"SELECT grid_after({ROW}, $2)", row(config, anchor), now)
    assert after == config.grid.next(anchor, now)
    passed = await pool.fetch(
        f"SELECT grid_between({ROW}, $2, $3) AS s", row(config, anchor), anchor, after
    )
    assert [r["s"] for r in passed] == config.grid.between(anchor, after)


GRIDS = [
    target(None),
    target(None).model_copy(update={"interval_seconds": 7200}),
    target("30 2 * * *"),
    target("30 2 * * *", "Europe/Paris"),
    target("30 2 * * *", jitter=600),
    target("30 3 * * *"),
    target("30 2 * * 1-5"),
]


@shared_pool
@given(old=st.sampled_from(GRIDS), new=st.sampled_from(GRIDS))
async def test_the_same_grid_keeps_the_anchor_and_a_new_one_starts_at_the_next_slot(
    pool: asyncpg.Pool, old: TargetConfig, new: TargetConfig
) -> None:
    """`grid_anchor`, the one rule register, sync and reconfigure share: an interval
    grid's NULL calendar columns compare equal, so an unchanged target keeps its anchor."""
    anchor, next_slot = datetime(2026, 8, 7, 8, tzinfo=UTC), datetime(2026, 8, 9, 8, tzinfo=UTC)
    kept = await pool.fetchval(
        f"SELECT grid_anchor({ROW}, grid_of({ROW_2}), $3)",
        row(old, anchor),
        row(new, anchor + timedelta(days=1)),
        next_slot,
    )
    same = _target(old) | {"config": None} == _target(new) | {"config": None}
    assert kept == (anchor if same else next_slot)


def test_every_statement_that_writes_a_grid_asks_the_one_rule() -> None:
    for name in ("register_target", "sync_target", "reconfigure_target"):
        text = QUERIES[name].sql
        assert "grid_anchor(t, " in text and "IS NOT DISTINCT FROM" not in text, name
