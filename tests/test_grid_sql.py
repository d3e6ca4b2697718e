"""The grid in SQL agrees with the grid in Python: the database computes the next slot, the
slots a late check skips and their work ids, so a worker's clock never decides them."""

from datetime import UTC, datetime, timedelta

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
async def test_grid_after_is_next_slot(
    pool: asyncpg.Pool, anchor: datetime, seconds: int, offset: timedelta, k: int
) -> None:
    """From any point of the grid (anchor + k * interval), the first grid point after now."""
    interval = timedelta(seconds=seconds)
    slot, now = anchor + k * interval, anchor + offset
    expected = next_slot(slot, interval, max(now, slot))
    after = await pool.fetchval(
        "SELECT grid_after($1, $2, greatest($3::timestamptz, $4))", anchor, seconds, now, slot
    )
    assert after == expected


@shared_pool
@given(anchor=moments, seconds=intervals, steps=st.integers(0, 300), k=st.integers(-50, 50))
async def test_grid_between_is_slots_between(
    pool: asyncpg.Pool, anchor: datetime, seconds: int, steps: int, k: int
) -> None:
    interval = timedelta(seconds=seconds)
    slot = anchor + k * interval
    before = slot + steps * interval
    rows = await pool.fetch(
        "SELECT grid_between($1, $2, $3, $4) AS s", anchor, seconds, slot, before
    )
    assert [r["s"] for r in rows] == slots_between(slot, before, interval)


@shared_pool
@given(slot=moments, target=st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True))
async def test_slot_work_id_is_work_id(pool: asyncpg.Pool, slot: datetime, target: str) -> None:
    """Same text, microseconds only when present, so SQL-written skipped rows and
    Python-written checks share one identity per slot."""
    assert await pool.fetchval("SELECT slot_work_id($1, $2)", target, slot) == work_id(target, slot)
