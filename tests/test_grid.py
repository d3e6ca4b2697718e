"""One grid protocol, two grids: the interval grid and the calendar grid keep the same laws,
so `pricewatch.slots` states the schedule's rules once and never asks which grid it has."""

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import pricewatch.slots
from pricewatch.calendar import Calendar, CalendarGrid
from pricewatch.slots import Grid, IntervalGrid

moments = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
)
intervals = st.builds(
    IntervalGrid, st.timedeltas(min_value=timedelta(minutes=1), max_value=timedelta(days=8))
)
# Calendars with DST gaps and repeats in them (02:30 and */15 in Berlin, Lord Howe's half
# hour), a weekly one, and jitter that may reach the next slot across a gap.
CRONS = ["0 8 * * *", "*/15 * * * *", "30 2 * * *", "0 8 * * 1-5", "59 1,2 * * *", "0 0 * * 0"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]
calendars = st.builds(
    lambda cron, zone, jitter, target: CalendarGrid(
        Calendar.parse(cron, zone, jitter if cron != "*/15 * * * *" else jitter % 900), target
    ),
    st.sampled_from(CRONS),
    st.sampled_from(ZONES),
    st.sampled_from([0, 0, 1, 600, 3599]),
    st.sampled_from(["t-1", "shop-pro"]),
)
grids = st.one_of(intervals, calendars)
a_while = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3))
enough = settings(max_examples=150, deadline=None)


def a_point(grid: Grid, moment: datetime) -> datetime:
    """A point of `grid`: an interval grid has one everywhere (any slot anchors it)."""
    return moment if isinstance(grid, IntervalGrid) else grid.next(moment, moment)


@enough
@given(grid=grids, moment=moments, late=a_while)
def test_the_next_slot_is_the_first_point_after_now_and_skips_the_missed_ones(
    grid: Grid, moment: datetime, late: timedelta
) -> None:
    slot = a_point(grid, moment)
    now = slot + late
    following = grid.next(slot, now)
    assert following > now and following > slot  # at least one step, never a burst
    assert all(s <= now for s in grid.between(slot, following))  # only missed ones between
    assert grid.next(slot, slot - timedelta(days=1)) > slot  # an early clock still steps


@enough
@given(grid=grids, moment=moments, span=a_while)
def test_between_is_the_points_stepped_through_in_order(
    grid: Grid, moment: datetime, span: timedelta
) -> None:
    slot = a_point(grid, moment)
    later = slot + span
    stepped, point = [], grid.next(slot, slot)
    while point < later:
        stepped.append(point)
        point = grid.next(point, point)
    assert grid.between(slot, later) == stepped
    assert grid.between(later, slot) == []


@enough
@given(grid=grids, moment=moments, late=a_while)
def test_the_latest_point_is_at_or_before_now_and_not_before_the_anchor(
    grid: Grid, moment: datetime, late: timedelta
) -> None:
    anchor = a_point(grid, moment)
    now = anchor + late + timedelta(microseconds=1)
    latest = grid.latest(anchor, now)
    assert anchor <= latest <= now
    assert grid.next(latest, now) > now  # nothing on the grid between it and now
    assert latest == anchor or latest in grid.between(anchor, now + timedelta(microseconds=1))


def test_the_rules_know_no_kind_of_grid() -> None:
    """slots.py imports no grid of its own package (no import loop with the calendar), and
    asks no grid what it is beyond the bare interval the tests pass."""
    tree = ast.parse(Path(pricewatch.slots.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not {m for m in imported if m.startswith("pricewatch")}
    checks = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "isinstance"]
    assert len(checks) == 1  # as_grid's timedelta
