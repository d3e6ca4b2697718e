"""Slot arithmetic and durations: the grid every check, retry and resume agrees on."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricewatch.durations import format_duration, parse_duration
from pricewatch.slots import (
    SiteSpread,
    due_before_first_task,
    due_before_pause,
    first_slot,
    format_slot,
    latest_due_slot,
    next_slot,
    slots_between,
    spread_anchor,
    sub_second_offset,
    work_id,
)

T0 = datetime(2026, 8, 7, 8, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)

moments = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
intervals = st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=30))
# How far `now` is from the slot: mostly late (up to years of outage), sometimes early.
offsets = st.timedeltas(min_value=timedelta(days=-60), max_value=timedelta(days=4000))


def on_grid(value: datetime, origin: datetime, interval: timedelta) -> bool:
    return (value - origin) % interval == timedelta(0)


@given(slot=moments, interval=intervals, offset=offsets)
def test_a_late_check_skips_exactly_the_grid_points_before_its_next_slot(
    slot: datetime, interval: timedelta, offset: timedelta
) -> None:
    """Every grid point from `slot` to the next slot is either the checked slot, a skipped
    one (each once, in order) or the next slot: together they leave no gap and no repeat."""
    now = slot + offset
    if (now - slot) // interval > 5000:  # keep the lists small; the arithmetic is the same
        now = slot + 5000 * interval
    following = next_slot(slot, interval, now)
    skipped = slots_between(slot, following, interval)
    assert [slot, *skipped, following] == [slot + k * interval for k in range(len(skipped) + 2)]
    assert all(s <= now for s in skipped)  # only slots that really came due


def test_slots_between_neighbours_or_reversed_is_empty() -> None:
    assert slots_between(T0, T0 + HOUR, HOUR) == []
    assert slots_between(T0, T0, HOUR) == []
    assert slots_between(T0 + HOUR, T0, HOUR) == []
    assert slots_between(T0, T0 + HOUR + timedelta(seconds=1), HOUR) == [T0 + HOUR]


@given(slot=moments, interval=intervals, offset=offsets)
def test_next_slot_is_the_first_grid_point_after_now(
    slot: datetime, interval: timedelta, offset: timedelta
) -> None:
    """On the grid, strictly after now, at least one step on, and never a later one than
    needed: a late run or a long outage skips missed slots instead of replaying them."""
    now = slot + offset
    result = next_slot(slot, interval, now)
    assert on_grid(result, slot, interval)
    assert result > now
    assert result >= slot + interval
    if now >= slot:
        assert result - interval <= now
    else:
        assert result == slot + interval


@given(anchor=moments, interval=intervals, offset=offsets)
def test_first_slot_keeps_an_anchor_ahead_and_skips_one_behind(
    anchor: datetime, interval: timedelta, offset: timedelta
) -> None:
    """Starting or resuming keeps a slot not yet due; slots that went by are skipped."""
    now = anchor - offset
    result = first_slot(anchor, interval, now)
    if anchor >= now:
        assert result == anchor
    else:
        assert on_grid(result, anchor, interval)
        assert now < result <= now + interval


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (T0 - timedelta(minutes=5), T0 + HOUR),  # early: still one step
        (T0, T0 + HOUR),  # exactly on time
        (T0 + timedelta(seconds=1), T0 + HOUR),
        (T0 + timedelta(hours=2, minutes=30), T0 + 3 * HOUR),  # late: 09:00 and 10:00 skipped
        (T0 + 1000 * HOUR, T0 + 1001 * HOUR),  # an outage landing exactly on a grid point
    ],
)
def test_next_slot_examples(now: datetime, expected: datetime) -> None:
    """Literal cases a reader can check by hand."""
    assert next_slot(T0, HOUR, now) == expected


def test_first_slot_examples() -> None:
    """An anchor due now or later is kept; one in the past moves to the next grid point."""
    assert first_slot(T0, HOUR, T0 - timedelta(days=3)) == T0
    assert first_slot(T0, HOUR, T0) == T0
    assert first_slot(T0, HOUR, T0 + timedelta(hours=5, minutes=1)) == T0 + 6 * HOUR


@pytest.mark.parametrize("interval", [timedelta(0), timedelta(seconds=-1)])
def test_non_positive_interval_is_refused(interval: timedelta) -> None:
    """A zero or negative interval would loop forever or walk backwards."""
    with pytest.raises(ValueError, match="interval must be positive"):
        next_slot(T0, interval, T0 + HOUR)
    with pytest.raises(ValueError, match="interval must be positive"):
        first_slot(T0, interval, T0 + HOUR)


def test_work_id_and_format_slot() -> None:
    """The work id is stable text: UTC with a Z, microseconds only when present."""
    assert work_id("acme", T0) == "acme:2026-08-07T08:00:00Z"
    assert format_slot(T0.replace(microsecond=500)) == "2026-08-07T08:00:00.000500Z"
    berlin_summer = timezone(timedelta(hours=2))
    assert format_slot(datetime(2026, 8, 7, 10, 0, tzinfo=berlin_summer)) == "2026-08-07T08:00:00Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("24h", timedelta(hours=24)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        (" 2H ", timedelta(hours=2)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    """The forms the CLI documents, case and surrounding space ignored."""
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "  ", "1x", "h", "1.5h", "-1h", "1 h", "15", "1h30"])
def test_parse_duration_rejects_garbage(text: str) -> None:
    """Anything not made only of <number><unit> parts is an error, not a guess."""
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(days=1), "1d"),
        (timedelta(days=1, hours=1, minutes=1, seconds=1), "1d1h1m1s"),
    ],
)
def test_format_duration(value: timedelta, expected: str) -> None:
    """Largest units first, zero parts left out."""
    assert format_duration(value) == expected


@given(st.integers(min_value=0, max_value=10**9))
def test_format_then_parse_round_trips(seconds: int) -> None:
    """What the CLI prints can be typed back in."""
    value = timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value


@given(anchor=moments, interval=intervals, offset=offsets)
def test_latest_due_slot_checks_once_now_for_a_start_in_the_past(
    anchor: datetime, interval: timedelta, offset: timedelta
) -> None:
    """Registration: a past anchor yields the last grid point at or before now (one check
    right away), a future anchor is kept."""
    now = anchor + offset
    slot = latest_due_slot(anchor, interval, now)
    if anchor >= now:
        assert slot == anchor
    else:
        assert (slot - anchor) % interval == timedelta(0)
        assert slot <= now < slot + interval


def test_latest_due_slot_examples() -> None:
    anchor = datetime(2026, 8, 7, 8, 0, tzinfo=UTC)
    hour = timedelta(hours=1)
    assert latest_due_slot(anchor, hour, anchor - hour) == anchor
    assert latest_due_slot(anchor, hour, anchor) == anchor
    assert latest_due_slot(anchor, hour, anchor + timedelta(minutes=59)) == anchor
    assert (
        latest_due_slot(anchor, hour, anchor + timedelta(hours=5, minutes=1)) == anchor + 5 * hour
    )


@given(target_id=st.text(min_size=1, max_size=64), moment=moments)
def test_a_spread_anchor_is_the_next_second_plus_the_targets_own_milliseconds(
    target_id: str, moment: datetime
) -> None:
    anchor = spread_anchor(target_id, moment)
    assert moment <= anchor < moment + timedelta(seconds=2)
    assert anchor.microsecond % 1000 == 0
    assert anchor - anchor.replace(microsecond=0) == sub_second_offset(target_id)
    assert spread_anchor(target_id, moment) == anchor  # no randomness: replays agree


def test_targets_added_together_fall_due_at_different_instants() -> None:
    """A thousand targets added in the same second: their first slots spread over it."""
    anchors = {spread_anchor(f"shop-{n}", T0) for n in range(1000)}
    assert len(anchors) > 600  # distinct milliseconds (a birthday spread, not a queue)
    assert min(anchors) >= T0 and max(anchors) < T0 + timedelta(seconds=1)


def test_slots_due_before_the_first_task_ran() -> None:
    """Started at T0 + 10 min on an hourly grid anchored at T0; the first task ran at
    T0 + 3h 10min and checks T0 + 3h: T0 + 1h and T0 + 2h came due in between."""
    started = T0 + timedelta(minutes=10)
    assert due_before_first_task(T0, HOUR, started, T0 + 3 * HOUR) == [T0 + HOUR, T0 + 2 * HOUR]
    assert due_before_first_task(T0, HOUR, T0, T0) == []  # on time: nothing passed
    # A start in the past (anchor long before the start) makes nothing before the start due.
    assert due_before_first_task(T0 - 100 * HOUR, HOUR, T0, T0 + HOUR) == [T0]


def test_slots_overdue_when_a_late_pause_took_effect() -> None:
    """The schedule stood at T0; the pause took effect at T0 + 2h 30min; the resume goes
    on at T0 + 5h. T0..T0 + 2h were due (except the one being checked); later ones were not."""
    paused_at, resumed = T0 + 2.5 * HOUR, T0 + 5 * HOUR
    assert due_before_pause(T0, paused_at, resumed, HOUR) == [T0, T0 + HOUR, T0 + 2 * HOUR]
    assert due_before_pause(T0, paused_at, resumed, HOUR, checking=T0) == [T0 + HOUR, T0 + 2 * HOUR]
    assert due_before_pause(T0, None, resumed, HOUR) == []
    assert due_before_pause(T0, T0 - HOUR, T0, HOUR) == []  # paused before the slot came


@given(
    preferred=moments,
    interval=st.integers(min_value=1, max_value=86_400).map(lambda s: timedelta(seconds=s)),
    taken=st.lists(st.integers(min_value=-(10**9), max_value=10**9), max_size=40),
    gap=st.integers(min_value=0, max_value=30).map(lambda s: timedelta(seconds=s)),
    adds=st.integers(min_value=1, max_value=5),
)
def test_a_new_target_is_spread_from_its_sites_others_as_far_as_the_grid_allows(
    preferred: datetime, interval: timedelta, taken: list[int], gap: timedelta, adds: int
) -> None:
    """Each start at or after the preferred one, within one interval; clear of every other
    target of the site by `gap` on the interval's grid, unless no place is (then unmoved)."""
    others = [preferred + timedelta(milliseconds=ms) for ms in taken]
    spread = SiteSpread(interval, gap, others)
    for _ in range(adds):
        placed = spread.place(preferred)
        assert preferred <= placed < preferred + interval
        clear = all(gap <= (placed - other) % interval <= interval - gap for other in others)
        assert clear or placed == preferred
        others.append(placed)


def test_two_hundred_pages_of_one_shop_are_two_seconds_apart() -> None:
    now, day, gap = datetime(2026, 12, 2, tzinfo=UTC), timedelta(days=1), timedelta(seconds=2)
    spread = SiteSpread(day, gap, [])
    assert [spread.place(now) for _ in range(200)] == [now + k * gap for k in range(200)]
    crowded = SiteSpread(timedelta(seconds=3), gap, [now])  # no place 2 s from both sides
    assert crowded.place(now) == now
