"""Tests that kill the mutants `make mutants` found surviving in pricewatch/slots.py
(docs/testing.md#mutation-testing): where `SiteSpread.place` puts a site's new target.

The property in test_slots.py allows "unmoved" whenever a placement is not clear, so a
placer that never moved anything passed it; these pin that a clear place is found whenever
one exists, that a clear preferred start is kept, and the order the candidates are tried in.
"""

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from pricewatch.slots import SiteSpread

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


def test_targets_added_together_follow_the_last_one_placed() -> None:
    """The second of two targets preferring 40 s goes 2 s after the first (the last one
    placed), not 2 s after an older target of the site at 10 s, which is also clear."""
    spread = SiteSpread(60 * S, 2 * S, [T0 + 10 * S])
    assert spread.place(T0 + 40 * S) == T0 + 40 * S
    assert spread.place(T0 + 40 * S) == T0 + 42 * S
    assert spread.place(T0 + 40 * S) == T0 + 44 * S
