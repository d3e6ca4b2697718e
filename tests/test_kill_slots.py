"""Tests that kill the mutants `make mutants` found surviving in pricewatch/slots.py
(docs/testing.md#mutation-testing).

Where `SiteSpread.place` puts a site's new target: the property in test_slots.py allows
"unmoved" whenever a placement is not clear, so a placer that never moved anything passed
it; these pin that a clear place is found whenever one exists, that a clear preferred start
is kept, and the order the candidates are tried in. Also: a calendar grid through the slot
functions (test_slots.py uses intervals only), the edges of the pause and first-task rules,
the refusal of an interval that is not positive, and the sub-second offsets' values.
"""

import hashlib
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricewatch.calendar import Calendar, CalendarGrid
from pricewatch.slots import (
    SiteSpread,
    due_before_first_task,
    due_before_pause,
    format_time,
    latest_due_slot,
    next_slot,
    slots_between,
    sub_second_offset,
)

T0 = datetime(2026, 8, 7, 8, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def distance(a: datetime, b: datetime, interval: timedelta) -> timedelta:
    """How far apart two starts fall on the interval's circle."""
    forward = (a - b) % interval
    return min(forward, interval - forward)


def room(phases: list[timedelta], interval: timedelta, gap: timedelta) -> bool:
    """Whether some place is `gap` clear of every phase: two neighbours (on the circle)
    at least twice `gap` apart."""
    ordered = sorted(p % interval for p in phases)
    spans = [b - a for a, b in pairwise(ordered)]
    return any(span >= 2 * gap for span in [*spans, ordered[0] + interval - ordered[-1]])


@given(
    interval=st.integers(min_value=2, max_value=600).map(lambda s: s * S),
    gap=st.integers(min_value=1, max_value=60).map(lambda s: s * S),
    taken=st.lists(st.integers(min_value=0, max_value=599), min_size=1, max_size=12),
    preferred=st.integers(min_value=0, max_value=10_000),
)
def test_a_clear_place_is_found_whenever_the_interval_has_one(
    interval: timedelta, gap: timedelta, taken: list[int], preferred: int
) -> None:
    others = [T0 + s * S for s in taken]
    start = T0 + preferred * S
    placed = SiteSpread(interval, gap, others).place(start)
    assert start <= placed < start + interval
    if room([o - T0 for o in others], interval, gap):
        assert all(distance(placed, other, interval) >= gap for other in others)
    if all(distance(start, other, interval) >= gap for other in others):
        assert placed == start  # a clear preferred start is kept


def test_the_bounds_of_clear_are_inclusive() -> None:
    """Exactly `gap` from a neighbour is clear, on either side; an interval of exactly two
    gaps has room for a second target."""
    assert SiteSpread(10 * S, 4 * S, [T0]).place(T0 + 6 * S) == T0 + 6 * S  # 4 s before T0+10
    assert SiteSpread(10 * S, 4 * S, [T0]).place(T0 + 4 * S) == T0 + 4 * S
    assert SiteSpread(8 * S, 4 * S, [T0]).place(T0) == T0 + 4 * S
    assert SiteSpread(10 * S, 4 * S, [T0]).place(T0) == T0 + 4 * S  # two to three gaps


def test_a_taken_start_moves_just_past_its_neighbour() -> None:
    assert SiteSpread(60 * S, 2 * S, [T0 + 10 * S]).place(T0 + 10 * S) == T0 + 12 * S


def test_a_blocked_start_waits_for_the_nearest_clear_place_not_an_interval() -> None:
    """Blocked by a neighbour 1 s later, the start goes just past that neighbour (12 s),
    not just past the site's first target (2 s, which is an hour less 7 s from 9 s)."""
    assert SiteSpread(3600 * S, 2 * S, [T0, T0 + 10 * S]).place(T0 + 9 * S) == T0 + 12 * S


@given(
    interval=st.integers(min_value=2, max_value=120).map(lambda s: s * S),
    gap=st.integers(min_value=1, max_value=10).map(lambda s: s * S),
    taken=st.lists(st.integers(min_value=0, max_value=119), min_size=1, max_size=12),
    preferred=st.integers(min_value=0, max_value=1_000),
)
def test_the_place_is_the_first_clear_second_from_the_start(
    interval: timedelta, gap: timedelta, taken: list[int], preferred: int
) -> None:
    """Whole seconds everywhere, so the first clear place is a whole second: found by
    walking every second of the interval from the start."""
    others = [T0 + s * S for s in taken]
    start = T0 + preferred * S
    first = next(
        (
            start + k * S
            for k in range(int(interval / S))
            if all(distance(start + k * S, other, interval) >= gap for other in others)
        ),
        start,
    )
    assert SiteSpread(interval, gap, others).place(start) == first


def test_targets_added_together_follow_the_last_one_placed() -> None:
    """The second of two targets preferring 40 s goes 2 s after the first (the last one
    placed), not 2 s after an older target of the site at 10 s, which is also clear."""
    spread = SiteSpread(60 * S, 2 * S, [T0 + 10 * S])
    assert spread.place(T0 + 40 * S) == T0 + 40 * S
    assert spread.place(T0 + 40 * S) == T0 + 42 * S
    assert spread.place(T0 + 40 * S) == T0 + 44 * S


DAILY = CalendarGrid(Calendar.parse("0 8 * * *", "Europe/Berlin"), "t-1")
EIGHT = datetime(2026, 8, 7, 6, 0, tzinfo=UTC)  # 08:00 in Berlin (CEST)
D, H = timedelta(days=1), timedelta(hours=1)


def test_a_calendar_grid_goes_through_the_slot_functions() -> None:
    assert next_slot(EIGHT, DAILY, EIGHT + 2 * D + H) == EIGHT + 3 * D  # missed days skipped
    assert next_slot(EIGHT, DAILY, EIGHT - H) == EIGHT + D  # at least one step from the slot
    assert slots_between(EIGHT, EIGHT + 3 * D, DAILY) == [EIGHT + D, EIGHT + 2 * D]
    assert latest_due_slot(EIGHT, DAILY, EIGHT + 2 * D + H) == EIGHT + 2 * D
    assert latest_due_slot(EIGHT + H, DAILY, EIGHT + 2 * H) == EIGHT + H  # not before the anchor
    assert latest_due_slot(EIGHT + 5 * D, DAILY, EIGHT) == EIGHT + 5 * D  # still ahead


@given(
    slot=st.integers(min_value=0, max_value=400).map(lambda d: EIGHT + d * D),
    late=st.timedeltas(min_value=-10 * D, max_value=60 * D),
)
def test_the_next_calendar_slot_is_the_first_one_after_both_the_slot_and_now(
    slot: datetime, late: timedelta
) -> None:
    now = slot + late
    following = next_slot(slot, DAILY, now)
    assert following > max(slot, now)
    assert DAILY.between(max(slot, now), following) == []
    assert slots_between(slot, following, DAILY) == DAILY.between(slot, following)


@pytest.mark.parametrize("interval", [timedelta(0), -H])
def test_an_interval_that_is_not_positive_is_refused_by_name(interval: timedelta) -> None:
    for call in (
        lambda: next_slot(EIGHT, interval, EIGHT + D),
        lambda: slots_between(EIGHT, EIGHT + D, interval),
        lambda: latest_due_slot(EIGHT, interval, EIGHT + D),
    ):
        with pytest.raises(ValueError, match=r"^interval must be positive$"):
            call()


def test_the_edges_of_the_pause_and_first_task_rules() -> None:
    # A start exactly on the anchor: the anchor itself came due.
    assert due_before_first_task(EIGHT, H, started=EIGHT, slot=EIGHT + 2 * H) == [EIGHT, EIGHT + H]
    # A slot exactly at the moment the pause took effect was due.
    assert due_before_pause(EIGHT, paused_at=EIGHT, resumed=EIGHT + 3 * H, grid=H) == [EIGHT]
    assert due_before_pause(EIGHT, paused_at=EIGHT + H, resumed=EIGHT + 5 * H, grid=H) == [
        EIGHT,
        EIGHT + H,
    ]
    # The slot a resume continues at is not skipped.
    assert due_before_pause(EIGHT + H, paused_at=EIGHT + 2 * H, resumed=EIGHT + H, grid=H) == []


def test_a_moment_is_written_to_the_second() -> None:
    assert format_time(EIGHT.replace(microsecond=654_321)) == "2026-08-07T06:00:00Z"


@given(st.text(min_size=1, max_size=40))
def test_a_targets_sub_second_offset_is_four_bytes_of_blake2b_mod_1000(target_id: str) -> None:
    """The same offset everywhere, now and after an upgrade: the spread targets keep theirs."""
    digest = hashlib.blake2b(target_id.encode(), digest_size=4).digest()
    expected = timedelta(milliseconds=int.from_bytes(digest, "big") % 1000)
    assert sub_second_offset(target_id) == expected
    assert sub_second_offset("t-1") == timedelta(milliseconds=402)
