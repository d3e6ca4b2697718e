"""Tests that kill the mutants `make mutants` found surviving in pricewatch/calendar.py
(docs/testing.md#mutation-testing).

test_calendar.py proves the grid itself (against cronsim and the SQL); the options that ask
for a calendar were tested only through `pricewatch add` in a process of its own, which
imports the unmutated code. These call them in-process: which options go together and what
the refusal says, the calendar `--at`/`--on` build, the messages that name a calendar as it
was written, a new target's offset in its jitter, and a jittered calendar as a grid.
"""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pricewatch.calendar import (
    Calendar,
    CalendarGrid,
    latest_at_or_before,
    preferred_offset,
    slot_after,
    slots_between,
    written,
)


@pytest.mark.parametrize("flag", ["--", ""])
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("@daily", ["08:00"], None, None, None), "{f}cron and {f}at are two calendars: pick one"),
        ((None, None, "mon", None, None), "{f}on needs {f}at (the days of the times to check at)"),
        ((None, [], "mon", None, None), "{f}on needs {f}at (the days of the times to check at)"),
        ((None, None, None, "Europe/Berlin", None), "{f}tz needs {f}cron or {f}at (a calendar)"),
        ((None, None, None, "Europe/Berlin", 60), "{f}tz needs {f}cron or {f}at (a calendar)"),
        ((None, None, None, None, 60), "{f}jitter needs {f}cron or {f}at (a calendar)"),
        ((None, None, None, None, 0), "{f}jitter needs {f}cron or {f}at (a calendar)"),
    ],
)  # fmt: skip
def test_options_that_do_not_go_together_are_named_as_written(
    flag: str, options: tuple[str | None, list[str] | None, str | None, str | None, int | None],
    message: str,
) -> None:  # fmt: skip
    with pytest.raises(ValueError) as refused:
        written(*options, flag=flag)
    assert str(refused.value) == message.format(f=flag)


def test_the_options_give_their_calendar() -> None:
    assert written(None, None, None, None, None) is None  # an interval grid
    assert written(None, [], None, None, None) is None
    assert written("0 8 * * *", None, None, None, None) == Calendar.parse("0 8 * * *", "UTC", 0)
    assert written("0 8 * * 1", None, None, "Europe/Berlin", 600) == Calendar.parse(
        "0 8 * * 1", "Europe/Berlin", 600
    )
    assert written(None, ["08:00"], None, None, None) == Calendar.at(["08:00"], "daily", "UTC", 0)
    assert written(None, ["17:30", "08:00"], "mon-fri", "Asia/Tokyo", 30) == Calendar.at(
        ["17:30", "08:00"], "mon-fri", "Asia/Tokyo", 30
    )


def test_an_at_calendar_keeps_what_was_written_and_restricts_only_the_days() -> None:
    weekdays = Calendar.at(["17:30", "08:00"], "mon-fri", "UTC")
    assert (weekdays.at_times, weekdays.on) == (("17:30", "08:00"), "mon-fri")
    assert weekdays.times == (480, 1050)
    assert weekdays.days_of_month == tuple(range(1, 32))
    assert weekdays.months == tuple(range(1, 13))
    assert (weekdays.dom_restricted, weekdays.dow_restricted) == (False, True)
    assert Calendar.at(["08:00"], "daily", "UTC").dow_restricted is False


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Calendar.at([], "daily", "UTC"), "--at needs at least one time, like 08:00"),
        (
            lambda: Calendar.at(["08:00"], "funday", "UTC"),
            "--on 'funday': use day names (mon..sun), ranges (mon-fri), lists (sat,sun), "
            "daily, weekdays or weekends",
        ),
        (
            lambda: Calendar.at(["08:00", "08:30"], "daily", "UTC", 3600),
            "jitter 1h must be shorter than the smallest spacing of --at 08:00,08:30 --on daily "
            "(30m), so slots keep their order",
        ),
        (
            lambda: Calendar.parse("0,30 8 * * *", "UTC", 3600),
            "jitter 1h must be shorter than the smallest spacing of cron '0,30 8 * * *' (30m), "
            "so slots keep their order",
        ),
    ],
)
def test_a_refused_calendar_is_named_as_it_was_written(build: object, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        build()  # type: ignore[operator]
    assert str(refused.value) == message


def test_a_decoded_calendar_with_no_date_is_refused_by_its_cron() -> None:
    """A history or payload that holds 31 February (cronsim refuses it when parsing)."""
    with pytest.raises(ValidationError, match=r"cron '0 8 31 2 \*': no month has that day"):
        Calendar(
            cron="0 8 31 2 *", time_zone="UTC", times=(480,), days_of_month=(31,),
            months=(2,), weekdays=tuple(range(7)), dom_restricted=True, dow_restricted=False,
        )  # fmt: skip


def test_a_new_target_takes_an_offset_of_its_own_inside_its_jitter() -> None:
    jittered = Calendar.parse("0 8 * * *", "Europe/Berlin", 600)
    # sha256 of the target id, first six bytes, modulo the jitter (as the docstring says).
    assert (preferred_offset(jittered, "t-1"), preferred_offset(jittered, "shop")) == (577, 122)
    assert preferred_offset(Calendar.parse("0 8 * * *", "Europe/Berlin"), "t-1") == 0


JITTERED = Calendar.parse("0 8 * * *", "Europe/Berlin", 3600)
moments = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
)


@given(moment=moments, target=st.sampled_from(["t-1", "t-2", "shop-pro"]))
def test_a_calendar_grid_is_its_targets_jittered_calendar(moment: datetime, target: str) -> None:
    """The grid `pricewatch.slots` steps on carries the target: its jitter is the target's."""
    grid = CalendarGrid(JITTERED, target)
    assert grid.after(moment) == slot_after(JITTERED, target, moment)
    week_ago = moment - timedelta(days=7)  # an anchor well before the latest slot
    assert grid.latest(week_ago, moment) == latest_at_or_before(JITTERED, target, moment)
    later = moment + timedelta(days=3)
    assert grid.between(moment, later) == slots_between(JITTERED, target, moment, later)
    assert 2 <= len(grid.between(moment, later)) <= 4  # a day apart, each moved < 1 h


def test_targets_on_one_jittered_calendar_fall_due_apart() -> None:
    """The jitter is each target's own: the same day's slot differs between two targets."""
    start = datetime(2026, 8, 7, tzinfo=UTC)
    first, second = (CalendarGrid(JITTERED, t).after(start) for t in ("t-1", "t-2"))
    assert first != second


def test_the_command_lines_flags_are_the_default_wording() -> None:
    with pytest.raises(ValueError, match=r"^--cron and --at are two calendars: pick one$"):
        written("@daily", ["08:00"], None, None, None)
