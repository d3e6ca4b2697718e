"""Calendar grids: slots at local wall-clock times (`--cron "0 8 * * 1-5" --tz Europe/Berlin`,
or `--at 08:00 --on mon-fri --tz Europe/Berlin`), optionally shifted by a per-target jitter.

Pure functions with time passed in, like `pricewatch.slots`, so the workflow, the CLI and the
tests share one definition; the `calendar_*` functions in `activities/sql/schema.sql` (from
0008_calendar.sql) are the same arithmetic in SQL (the database's clock decides the next
slot) and tests/test_calendar.py proves they agree. A slot's identity stays its UTC
instant. An `--every` grid (`anchor + k * interval`) is not a calendar and keeps its
meaning; both are a `pricewatch.slots.Grid`.

The DST rules. A nominal slot is a local date and time the calendar matches; it becomes one
instant:

- a local time that exists once is that instant;
- a local time that does not exist (spring forward) fires once, at the first instant after
  the gap: Europe/Berlin 2026-03-29 02:30 -> 03:00 CEST = 01:00Z. Several nominal times in
  one gap (`*/15` at 02:00..02:45) collapse into that one instant, with 03:00 if it matches;
- a local time that happens twice (fall back) fires once, at its first occurrence:
  Europe/Berlin 2026-10-25 02:30 -> 02:30 CEST = 00:30Z, not again at 01:30Z. This holds for
  every field, `*/15 * * * *` too: the repeated hour is not checked twice.

The local-to-instant map is non-decreasing in local time, so slots come out strictly
increasing, none twice (collapsed ones are one slot) and none missing. Cron's own
implementations differ only at transitions: Vixie/Debian cron and cronsim (the reference in
the tests) follow these rules when the minute and hour fields are fixed, but run a job whose
minute or hour field starts with `*` in both copies of a repeated hour and not at all for
the nonexistent times of a gap.

How an instant is found, identically here and in SQL: the offsets in effect 24 hours
either side of the local time (read as UTC) give at most two candidates; those that read
back as the local time are its occurrences (the earliest wins); with none the time is in a
gap, whose end a binary search over whole seconds finds. Postgres's own `timestamp AT TIME
ZONE` takes the later reading of a repeated time and the before-gap offset for a missing one
(02:30 -> 03:30 CEST), so neither language's built-in resolution is used.

Jitter: slot = nominal + a shift in whole seconds below `jitter_seconds`, so a target's slots
are spread but reproducible in SQL. The shift is also kept below the distance to the next
nominal slot, which a DST gap can make shorter than the calendar's spacing (59 1,2 * * *:
01:59 and the 02:59 that becomes 03:00 are a minute apart on 29 March in Berlin), so order
always holds. Its place in the jitter comes from one of two rules:

- `offset_seconds` (1.7: chosen by `add` and `apply`, so that the targets of one site on one
  calendar fall due PRICEWATCH_SITE_GAP apart): without jitter every slot is shifted by it;
  with jitter the shift is `(rotation(nominal) + offset) mod jitter`, where the rotation,
  `sha256(work_id("", nominal))` (first six bytes, big-endian), is the same for every target.
  The site sees a different second each day while its targets keep their distances;
- no offset (a target added before 1.7): `sha256(work_id(target, nominal))` modulo the
  jitter, a shift of its own for each target and slot.

Cron syntax: five fields (minute hour day-of-month month day-of-week), numbers, names
(jan..dec, sun..sat, any case), `*`, lists, ranges, steps; 0 or 7 is Sunday; @yearly,
@annually, @monthly, @weekly, @daily, @midnight, @hourly. Day-of-month and day-of-week
follow Vixie cron: when both are restricted (neither starts with `*`) a day matching either
matches, else a day must match both. cronsim parses and expands the fields; L, W, #, ?,
seconds fields and @reboot are refused.
"""

import hashlib
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cached_property, lru_cache
from itertools import pairwise
from typing import Any, Self
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, ConfigDict, Field, model_validator

from pricewatch.durations import format_duration
from pricewatch.slots import work_id

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
SUPPORTED = (
    "standard 5-field cron only: minute hour day-of-month month day-of-week with numbers, "
    "names, *, lists, ranges and steps, or @hourly, @daily, @weekly, @monthly, @yearly"
)
MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # cron's numbering: 0 is Sunday
WEEK = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]  # the order `--on` ranges run in
ON_WORDS = {"daily": "mon-sun", "weekdays": "mon-fri", "weekends": "sat,sun"}
# Zone names Python may list that are not zones of their own (nor known to Postgres).
NOT_ZONES = {"localtime", "posixrules", "Factory"}
DAY = timedelta(days=1)
SECOND = timedelta(seconds=1)
# The Gregorian calendar repeats every 400 years: a calendar with no date in them has none.
CYCLE_DAYS = 146097


class Calendar(BaseModel):
    """A calendar grid, expanded: what the SQL functions take, plus how it was written.

    `times` are minutes after local midnight (the cron's hours x minutes, or `--at`'s list,
    which need not be a product: 08:00 and 17:30); weekdays are cron's (0 = Sunday)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cron: str | None = None  # as written (`parse`), or None for `at`
    at_times: tuple[str, ...] = ()  # `at`: the times as written
    on: str | None = None  # `at`: the days as written
    time_zone: str
    jitter_seconds: int = Field(default=0, ge=0)
    offset_seconds: int | None = Field(default=None, ge=0)  # chosen by add/apply (1.7)
    times: tuple[int, ...]
    days_of_month: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    dom_restricted: bool
    dow_restricted: bool

    @classmethod
    def parse(cls, cron: str, tz: str, jitter_seconds: int = 0) -> Self:
        """From a cron expression; raises ValueError naming what is wrong."""
        fields = _expand_cron(cron)
        return cls._checked(cron=cron, time_zone=tz, jitter_seconds=jitter_seconds, **fields)

    @classmethod
    def at(cls, times: list[str], on: str, tz: str, jitter_seconds: int = 0) -> Self:
        """From `--at 08:00 [--at 17:30] --on mon-fri|daily|weekdays|weekends|sat,sun`."""
        minutes = sorted({_time_of_day(t) for t in times})
        if not minutes:
            raise ValueError("--at needs at least one time, like 08:00")
        weekdays = _weekdays(on)
        return cls._checked(
            at_times=tuple(times),
            on=on,
            time_zone=tz,
            jitter_seconds=jitter_seconds,
            times=tuple(minutes),
            days_of_month=tuple(range(1, 32)),
            months=tuple(range(1, 13)),
            weekdays=weekdays,
            dom_restricted=False,
            dow_restricted=len(weekdays) < 7,
        )

    @classmethod
    def _checked(cls, **fields: Any) -> Self:
        """Build, with a plain ValueError (not pydantic's wrapper) for the CLI to show."""
        problem = _problem(cls.model_construct(**fields))
        if problem:
            raise ValueError(problem)
        return cls(**fields)

    @model_validator(mode="after")
    def _valid(self) -> Self:
        # Also when a calendar is decoded (a workflow's history, a payload): same checks.
        if problem := _problem(self):
            raise ValueError(problem)
        return self

    @cached_property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    @property
    def days_or(self) -> bool:
        """Vixie cron: both day fields restricted means either may match."""
        return self.dom_restricted and self.dow_restricted


def slot_after(calendar: Calendar, target_id: str, after: datetime) -> datetime:
    """The first slot strictly after `after`, jitter applied (SQL: `calendar_after`)."""
    return next(_slots(calendar, target_id, after))


def slots_between(
    calendar: Calendar, target_id: str, after: datetime, before: datetime
) -> list[datetime]:
    """The slots strictly between `after` and `before` (SQL: `calendar_between`)."""
    found: list[datetime] = []
    for slot in _slots(calendar, target_id, after):
        if slot >= before:
            return found
        found.append(slot)
    raise AssertionError("unreachable: _slots never ends")


def latest_at_or_before(calendar: Calendar, target_id: str, now: datetime) -> datetime:
    """The last slot at or before `now` (the mirror of `slots.latest_due_slot`): a target
    registered with a calendar gets its baseline on the grid right away."""
    nominal = _nominal_at_or_before(calendar, now)
    slot = _jittered(calendar, target_id, nominal, _nominal_after(calendar, nominal))
    if slot <= now:
        return slot
    earlier = _nominal_at_or_before(calendar, nominal - SECOND)
    return _jittered(calendar, target_id, earlier, nominal)


def describe(calendar: Calendar) -> str:
    """As a user would write it: `weekdays 08:00 Europe/Berlin + jitter 10m`."""
    if calendar.cron is not None:
        text = f"{calendar.cron} {calendar.time_zone}"
    else:
        names = ",".join(DAY_NAMES[d] for d in sorted(calendar.weekdays, key=lambda d: (d + 6) % 7))
        days = {
            "mon,tue,wed,thu,fri,sat,sun": "daily",
            "mon,tue,wed,thu,fri": "weekdays",
            "sat,sun": "weekends",
        }.get(names, names)
        hours = ",".join(f"{t // 60:02d}:{t % 60:02d}" for t in calendar.times)
        text = f"{days} {hours} {calendar.time_zone}"
    if calendar.jitter_seconds:
        text += f" + jitter {format_duration(timedelta(seconds=calendar.jitter_seconds))}"
    elif calendar.offset_seconds:  # spread from its site's other targets
        text += f" +{format_duration(timedelta(seconds=calendar.offset_seconds))}"
    return text


def resolve(zone: ZoneInfo, local: datetime) -> datetime:
    """The instant a nominal local time (naive) fires at, by the rules of the module
    docstring; `calendar_resolve` in SQL is this, step for step."""
    base = local.replace(tzinfo=UTC)
    early = base - _offset(zone, base - DAY)  # read with the offset a day before
    late = base - _offset(zone, base + DAY)  # and with the one a day after
    found = [c for c in (early, late) if _local(zone, c) == local]
    if found:
        return min(found)  # a repeated time: its first occurrence
    # In a gap: `late` reads before the local time, `early` after it; the gap ends at the
    # first instant that reads at or after it.
    low, high = late, early
    while high - low > SECOND:
        middle = low + timedelta(seconds=int((high - low).total_seconds()) // 2)
        if _local(zone, middle) >= local:
            high = middle
        else:
            low = middle
    return high


# How it works: nominal slots, then jitter.


def _slots(calendar: Calendar, target_id: str, after: datetime) -> Iterator[datetime]:
    """Slots after `after`, in order. A slot lies in [nominal, nominal + reach], so only a
    nominal after `after - reach` can give one after `after`."""
    reach = timedelta(seconds=calendar.jitter_seconds or calendar.offset_seconds or 0)
    nominal = _nominal_after(calendar, after - reach)
    while True:
        following = _nominal_after(calendar, nominal)
        slot = _jittered(calendar, target_id, nominal, following)
        if slot > after:
            yield slot
        nominal = following


def _jittered(
    calendar: Calendar, target_id: str, nominal: datetime, following: datetime
) -> datetime:
    """The slot of a nominal one (the module docstring's jitter rules; SQL:
    `calendar_shift`)."""
    jitter, offset = calendar.jitter_seconds, calendar.offset_seconds
    if jitter == 0 and not offset:
        return nominal
    room = int((following - nominal).total_seconds())
    if jitter == 0:
        return nominal + timedelta(seconds=(offset or 0) % room)
    limit = min(jitter, room)
    if offset is None:
        return nominal + timedelta(seconds=_hashed(work_id(target_id, nominal)) % limit)
    return nominal + timedelta(seconds=(_hashed(work_id("", nominal)) + offset) % limit)


def _hashed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")


def _nominal_after(calendar: Calendar, after: datetime) -> datetime:
    """The first nominal slot strictly after `after` (SQL: `calendar_nominal_after`).

    Local times before `after`'s own cannot fire after it (the map is non-decreasing), so
    the search starts there; a later local time can still fire before it (the repeated
    hour's first copy when `after` is in the second), hence the check on each."""
    zone = calendar.zone
    start = _local(zone, after.astimezone(UTC))
    first = bisect_right(calendar.times, start.hour * 60 + start.minute)
    for day in _days(calendar, start.date(), forward=True):
        for minutes in calendar.times[first if day == start.date() else 0 :]:
            slot = resolve(zone, _at(day, minutes))
            if slot > after:
                return slot
    raise ValueError("the calendar has no date in 400 years")


def _nominal_at_or_before(calendar: Calendar, moment: datetime) -> datetime:
    """The last nominal slot at or before `moment`. Local times up to a day after
    `moment`'s may still fire before it (a repeated hour), so the search starts there."""
    zone = calendar.zone
    start = _local(zone, moment.astimezone(UTC)).date() + DAY
    for day in _days(calendar, start, forward=False):
        for minutes in reversed(calendar.times):
            slot = resolve(zone, _at(day, minutes))
            if slot <= moment:
                return slot
    raise ValueError("the calendar has no date in 400 years")


def _days(calendar: Calendar, start: date, forward: bool) -> Iterator[date]:
    """The calendar's dates from `start` on (or back) for 400 years (every date a
    calendar has comes round in them), months it skips skipped whole."""
    day, end = start, start + timedelta(days=CYCLE_DAYS if forward else -CYCLE_DAYS)
    months, days, weekdays = (
        set(calendar.months),
        set(calendar.days_of_month),
        set(calendar.weekdays),
    )
    while day <= end if forward else day >= end:
        if day.month not in months:
            first = day.replace(day=1)
            day = (first + timedelta(days=32)).replace(day=1) if forward else first - DAY
            continue
        in_month, in_week = day.day in days, (day.weekday() + 1) % 7 in weekdays
        if (in_month or in_week) if calendar.days_or else (in_month and in_week):
            yield day
        day += DAY if forward else -DAY


def _offset(zone: ZoneInfo, moment: datetime) -> timedelta:
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _local(zone: ZoneInfo, moment: datetime) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None)


def _at(day: date, minutes: int) -> datetime:
    return datetime(day.year, day.month, day.day, minutes // 60, minutes % 60)


# Parsing and validation.


def _expand_cron(cron: str) -> dict[str, Any]:
    text = ALIASES.get(cron.strip().lower(), cron.strip())
    parts = text.split()
    if text.startswith("@"):
        raise ValueError(f"cron {cron!r}: {parts[0]} is not supported ({SUPPORTED})")
    if len(parts) == 6:
        raise ValueError(f"cron {cron!r}: a seconds field is not supported ({SUPPORTED})")
    if len(parts) != 5:
        raise ValueError(f"cron {cron!r}: needs 5 fields, has {len(parts)} ({SUPPORTED})")
    for field, names in zip(parts, [(), (), (), MONTH_NAMES, DAY_NAMES], strict=True):
        if unsupported := _unsupported(field, names):
            raise ValueError(f"cron {cron!r}: {unsupported} is not supported ({SUPPORTED})")
    try:
        sim = CronSim(text, datetime(2000, 1, 1))
    except CronSimError as err:
        raise ValueError(f"cron {cron!r}: {str(err).lower()} ({SUPPORTED})") from None
    weekdays = {int(d) % 7 for d in sim.weekdays}  # type: ignore[arg-type]  # no L or #: ints
    return {
        "times": tuple(sorted(h * 60 + m for h in sim.hours for m in sim.minutes)),
        "days_of_month": tuple(sorted(sim.days)),
        "months": tuple(sorted(sim.months)),
        "weekdays": tuple(sorted(weekdays)),
        "dom_restricted": not parts[2].startswith("*"),
        "dow_restricted": not parts[4].startswith("*"),
    }


def _unsupported(field: str, names: tuple[str, ...]) -> str | None:
    """What in a field is beyond standard cron (L, W, #, ?), if anything; names (JUL, WED)
    hold those letters too, so each atom is read whole."""
    for mark in ("#", "?"):
        if mark in field:
            return mark
    for term in field.lower().replace("/", ",").replace("-", ",").split(","):
        if term == "*" or term.isdigit() or term in names:
            continue
        if "l" in term:
            return "L"
        if "w" in term:
            return "W"
    return None  # anything else cronsim refuses with its own reason


def _time_of_day(text: str) -> int:
    hours, sep, minutes = text.strip().partition(":")
    if (
        sep
        and hours.isdigit()
        and len(minutes) == 2
        and minutes.isdigit()
        and int(hours) < 24
        and int(minutes) < 60
    ):
        return int(hours) * 60 + int(minutes)
    raise ValueError(f"--at {text!r}: use a 24-hour local time like 08:00 or 17:30")


def _weekdays(on: str) -> tuple[int, ...]:
    """`mon-fri`, `sat,sun`, `fri-mon` (a range runs on through the week), or daily,
    weekdays, weekends; as cron's numbers (0 = Sunday)."""
    text = ON_WORDS.get(on.strip().lower(), on.strip().lower())
    found: set[int] = set()
    for term in text.split(","):
        first, _, last = term.strip().partition("-")
        if first not in WEEK or (last and last not in WEEK):
            raise ValueError(
                f"--on {on!r}: use day names (mon..sun), ranges (mon-fri), lists (sat,sun), "
                "daily, weekdays or weekends"
            )
        start, count = WEEK.index(first), (WEEK.index(last or first) - WEEK.index(first)) % 7
        found |= {(start + i + 1) % 7 for i in range(count + 1)}  # WEEK[i] is cron's i + 1
    return tuple(sorted(found))


def _problem(calendar: Calendar) -> str | None:
    """Why a calendar cannot be used, or None."""
    if calendar.time_zone in NOT_ZONES or not _is_zone(calendar.time_zone):
        return f"unknown time zone {calendar.time_zone!r}: use an IANA name like Europe/Berlin"
    for name, values, low, high in (
        ("times", calendar.times, 0, 1439),
        ("days_of_month", calendar.days_of_month, 1, 31),
        ("months", calendar.months, 1, 12),
        ("weekdays", calendar.weekdays, 0, 6),
    ):
        if (
            not values
            or list(values) != sorted(set(values))
            or not low <= values[0] <= values[-1] <= high
        ):
            return f"calendar {name} must be sorted, distinct and within {low}..{high}"
    if not calendar.days_or and not any(
        day <= (29 if month == 2 else 30 if month in (4, 6, 9, 11) else 31)
        for month in calendar.months
        for day in calendar.days_of_month[:1]
    ):
        return f"{_written(calendar)}: no month has that day"
    if calendar.jitter_seconds and calendar.jitter_seconds >= (
        spacing_ := _smallest_spacing(calendar)
    ):
        spacing = timedelta(seconds=spacing_)
        return (
            f"jitter {format_duration(timedelta(seconds=calendar.jitter_seconds))} must be "
            f"shorter than the smallest spacing of {_written(calendar)} "
            f"({format_duration(spacing)}), so slots keep their order"
        )
    if calendar.offset_seconds and calendar.offset_seconds >= (
        calendar.jitter_seconds or _smallest_spacing(calendar)
    ):
        return f"offset {calendar.offset_seconds}s must be inside the jitter or the spacing"
    return None


def _smallest_spacing(calendar: Calendar, enough: int = 0) -> int:
    """The smallest wall-clock spacing of nominal slots, in seconds (`enough`: any spacing
    at most that will do, when the times of one day already have one). DST can bring two
    slots closer; the jitter's cap at the next slot (`_jittered`) covers that."""
    times = calendar.times
    within = min((b - a for a, b in pairwise(times)), default=CYCLE_DAYS * 1440) * 60
    overnight = (1440 - times[-1] + times[0]) * 60  # to the first time of the next date
    if within <= overnight or within <= enough:
        return within
    return min(within, overnight + (_smallest_day_gap(calendar) - 1) * 86400)


def _smallest_day_gap(calendar: Calendar) -> int:
    """Days between the calendar's two closest dates, over the 400-year cycle. The scan
    stops at a gap no two of its dates can be closer than (a weekly calendar: 7 days, at
    once; a yearly one scans, about 20 ms), and is cached by the days alone: a decoded
    calendar (a payload, a workflow's history) is checked again, and the targets of one
    site share their days but not their offsets."""
    return _day_gap(
        calendar.days_of_month, calendar.months, calendar.weekdays,
        calendar.dom_restricted, calendar.dow_restricted,
    )  # fmt: skip


@lru_cache(maxsize=256)
def _day_gap(
    days_of_month: tuple[int, ...],
    months: tuple[int, ...],
    weekdays: tuple[int, ...],
    dom_restricted: bool,
    dow_restricted: bool,
) -> int:
    calendar = Calendar.model_construct(  # only the days: what `_days` reads
        time_zone="UTC", times=(0,), days_of_month=days_of_month, months=months,
        weekdays=weekdays, dom_restricted=dom_restricted, dow_restricted=dow_restricted,
    )  # fmt: skip
    floor = 1
    if not calendar.days_or:
        weekdays, days = calendar.weekdays, calendar.days_of_month
        if len(weekdays) < 7:  # two dates on these weekdays are at least this far apart
            floor = min((b - a) % 7 or 7 for a, b in pairwise((*weekdays, weekdays[0])))
        if len(days) < 31:  # and on these days of the month (no month is under 28 days)
            apart = min((b - a for a, b in pairwise(days)), default=28)
            floor = max(floor, min(apart, 28 - days[-1] + days[0]))
    gap, previous = CYCLE_DAYS, None
    for day in _days(calendar, date(2000, 1, 1), forward=True):
        if previous is not None:
            gap = min(gap, (day - previous).days)
            if gap <= floor:
                break
        previous = day
    return gap


def _is_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (KeyError, ValueError, OSError):  # not found, not a key, a directory
        return False
    return True


def _written(calendar: Calendar) -> str:
    if calendar.cron is not None:
        return f"cron {calendar.cron!r}"
    return f"--at {','.join(calendar.at_times)} --on {calendar.on}"


@dataclass(frozen=True)
class CalendarGrid:
    """A target's calendar as a `pricewatch.slots.Grid` (the jitter needs the target). Its
    points are fixed, so the slot a method is given only bounds where to look."""

    calendar: Calendar
    target_id: str

    def next(self, slot: datetime, now: datetime) -> datetime:
        return self.after(max(slot, now))

    def between(self, slot: datetime, later: datetime) -> list[datetime]:
        return slots_between(self.calendar, self.target_id, slot, later)

    def latest(self, anchor: datetime, now: datetime) -> datetime:
        return max(anchor, latest_at_or_before(self.calendar, self.target_id, now))

    def after(self, moment: datetime) -> datetime:
        """The first slot strictly after `moment` (SQL: `calendar_after`)."""
        return slot_after(self.calendar, self.target_id, moment)


def spread_key(calendar: Calendar) -> tuple[object, ...]:
    """What the targets of one site are spread apart on (`offset_seconds`): the same nominal
    slots (however they were written) and the same jitter."""
    return (
        calendar.times, calendar.days_of_month, calendar.months, calendar.weekdays,
        calendar.days_or, calendar.time_zone, calendar.jitter_seconds,
    )  # fmt: skip


def offset_width(calendar: Calendar) -> int:
    """The offsets a calendar's targets can take: within its jitter, else its spacing."""
    return calendar.jitter_seconds or _smallest_spacing(calendar)


def preferred_offset(calendar: Calendar, target_id: str) -> int:
    """A new target's offset when its site has no other on its calendar: none (the slots as
    written), or with jitter a place of its own, so that targets of different sites do not
    all fall due on the same second of their jitter."""
    return _hashed(target_id) % calendar.jitter_seconds if calendar.jitter_seconds else 0


def spacing_seconds(calendar: Calendar) -> int:
    """The smallest wall-clock time between two of its slots: what the minimum interval is
    checked against, and a calendar target's `interval_seconds`."""
    return _smallest_spacing(calendar, 0)


def written(
    cron: str | None,
    at: list[str] | None,
    on: str | None,
    tz: str | None,
    jitter_seconds: int | None,
    flag: str = "--",
) -> Calendar | None:
    """The calendar a target's options ask for (`--cron`, or `--at` with `--on`; in `--tz`,
    default UTC; with `--jitter`), None for an interval grid; ValueError naming the options
    that do not go together (`flag`: how they are written, `--` on the command line, empty
    in a targets file)."""
    if cron is not None and at:
        raise ValueError(f"{flag}cron and {flag}at are two calendars: pick one")
    if on is not None and not at:
        raise ValueError(f"{flag}on needs {flag}at (the days of the times to check at)")
    if cron is None and not at:
        if tz is not None or jitter_seconds is not None:
            extra = f"{flag}tz" if tz is not None else f"{flag}jitter"
            raise ValueError(f"{extra} needs {flag}cron or {flag}at (a calendar)")
        return None
    # Given empty is not left out: `--tz ''` is no zone, not UTC, and `--on ''` no days.
    zone, spread = "UTC" if tz is None else tz, jitter_seconds or 0
    if cron is not None:
        return Calendar.parse(cron, zone, spread)
    return Calendar.at(at or [], "daily" if on is None else on, zone, spread)
