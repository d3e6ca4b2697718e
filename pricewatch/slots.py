"""Due-slot arithmetic on a target's grid.

Pure functions with time passed in, so the workflow (with `workflow.now()`), the
activities (with the wall clock) and the tests (with literal datetimes) share one
definition of the grid. A target's grid is a `Grid`: an `IntervalGrid` (`--every`:
`anchor + k * interval` for integer k, and any slot on it serves as the anchor) or a
`CalendarGrid` (`--cron`/`--at`, 1.4: a calendar's local times, pricewatch.calendar). The
functions below hold the schedule's rules once, for either kind; a grid only says where its
points are. SQL mirrors the names: `interval_after`, `calendar_after`, `grid_after` (either).
"""

import bisect
import hashlib
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Grid(Protocol):
    """Where a target's slots fall. `slot` is one of its points; the calendar grid needs no
    such reference (its points are fixed), the interval grid counts from it."""

    def next(self, slot: datetime, now: datetime) -> datetime:
        """The first point after `now`, and at least one step after `slot`."""
        ...

    def between(self, slot: datetime, later: datetime) -> list[datetime]:
        """The points strictly between `slot` and `later`, in order."""
        ...

    def latest(self, anchor: datetime, now: datetime) -> datetime:
        """The last point at or before `now` (`anchor` < `now`), never before `anchor`."""
        ...


@dataclass(frozen=True)
class IntervalGrid:
    """`slot + k * interval`: an `--every` target's grid."""

    interval: timedelta

    def __post_init__(self) -> None:
        if self.interval <= timedelta(0):
            raise ValueError("interval must be positive")

    def next(self, slot: datetime, now: datetime) -> datetime:
        # Late runs keep the grid: missed points are skipped, never replayed as a burst.
        return slot + max(1, (now - slot) // self.interval + 1) * self.interval

    def between(self, slot: datetime, later: datetime) -> list[datetime]:
        steps = max(0, -((slot - later) // self.interval) - 1)  # ceil((later - slot) / i) - 1
        return [slot + k * self.interval for k in range(1, steps + 1)]

    def latest(self, anchor: datetime, now: datetime) -> datetime:
        return anchor + ((now - anchor) // self.interval) * self.interval


def as_grid(grid: Grid | timedelta) -> Grid:
    """A bare interval (the tests' and the bench's shorthand) is an interval grid."""
    return IntervalGrid(grid) if isinstance(grid, timedelta) else grid


def next_slot(slot: datetime, grid: Grid | timedelta, now: datetime) -> datetime:
    """The first grid point after `now`, counting on from `slot` (at least one step).

    Late runs keep the grid: missed slots are skipped, never replayed as a burst.
    """
    return as_grid(grid).next(slot, now)


def slots_between(slot: datetime, later: datetime, grid: Grid | timedelta) -> list[datetime]:
    """The grid points strictly between `slot` and `later`: the slots a late check skips."""
    return as_grid(grid).between(slot, later)


def first_slot(anchor: datetime, grid: Grid | timedelta, now: datetime) -> datetime:
    """`anchor` if it is still ahead of `now`, else the first grid point after `now`.

    Used when a target starts or resumes: a slot that is not yet due is kept, a
    slot that went by while paused is skipped.
    """
    if anchor >= now:
        return anchor
    return next_slot(anchor, grid, now)


def latest_due_slot(anchor: datetime, grid: Grid | timedelta, now: datetime) -> datetime:
    """`anchor` if it is still ahead, else the last grid point at or before `now`.

    Used when a target is registered: a start in the past gets one check right away (its
    baseline) on the grid, never one per slot it missed.
    """
    if anchor >= now:
        return anchor
    return as_grid(grid).latest(anchor, now)


def due_before_first_task(
    anchor: datetime, grid: Grid | timedelta, started: datetime, slot: datetime
) -> list[datetime]:
    """Slots before `slot` that came due after the workflow was `started` but before its
    first task ran (that task sat on a worker that died): they were due, so they get skipped
    rows. A start in the past does not make the slots before the start due."""
    first = anchor  # the first grid point at or after the start
    if anchor < started:
        first = next_slot(anchor, grid, started - timedelta.resolution)
    passed = [first, *slots_between(first, slot, grid)]
    return [s for s in passed if s < slot]


def due_before_pause(
    slot: datetime,
    paused_at: datetime | None,
    resumed: datetime,
    grid: Grid | timedelta,
    checking: datetime | None = None,
) -> list[datetime]:
    """Slots from `slot` that were overdue when a pause took effect (it can arrive late, e.g.
    while a worker was down), up to the slot a resume continues at: they were due, so they
    get skipped rows. The slot being checked (`checking`) gets its own row from its check."""
    if paused_at is None:
        return []
    until = min(resumed, paused_at + timedelta.resolution)
    passed = [slot, *slots_between(slot, until, grid)]
    return [s for s in passed if s <= paused_at and s < resumed and s != checking]


def work_id(target_id: str, slot: datetime) -> str:
    """The business identity of one check: the same for every execution of the slot."""
    return f"{target_id}:{format_slot(slot)}"


def format_slot(slot: datetime) -> str:
    """ISO-8601 UTC with a `Z`, microseconds only when present."""
    utc = slot.astimezone(UTC)
    text = utc.isoformat(timespec="microseconds" if utc.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def format_time(moment: datetime) -> str:
    """An instant to the second, ISO-8601 UTC with a `Z` (when a pause or a streak began)."""
    return format_slot(moment.replace(microsecond=0))


def spread_anchor(target_id: str, moment: datetime) -> datetime:
    """A new target's first slot: the next whole second after `moment` plus a sub-second
    offset fixed by its id. Targets added together would otherwise all fall due on the same
    instant every interval, and their timers, workflow tasks and fetches queue behind each
    other."""
    return whole_second_after(moment) + sub_second_offset(target_id)


# How many of a site's targets after a blocked start `SiteSpread.place` looks past before it
# takes the place after the last one it placed (a file of one shop's pages stands in a row).
NEAREST = 64


class SiteSpread:
    """Where one site's targets on one interval grid fall due (their instants modulo the
    interval, sorted), so a new one can start where none of them is within `gap` of it and a
    site never sees two checks within `gap` (`add`, `apply`)."""

    def __init__(self, interval: timedelta, gap: timedelta, taken: list[datetime]) -> None:
        self.interval, self.gap = interval, gap
        self.phases = sorted(self._phase(moment) for moment in taken)
        self.last: timedelta | None = None

    def place(self, preferred: datetime) -> datetime:
        """The first start at or after `preferred` clear of the others by `gap`, less than
        an interval later: `preferred` if it is, else just past the nearest one after it
        (among the next NEAREST), else just past the last one placed here (a file of 200
        pages of one shop: 2 s apart), else just past any; `preferred` when no place is clear
        (more targets than the interval holds at `gap`). It joins the others. Before 1.14 the
        others were tried in phase order, so a start blocked by a neighbour could land just
        past an earlier one: almost a whole interval later (a new 15m target waited 15 min)."""
        start = self._phase(preferred)
        offset = self._wait(start)
        placed = preferred + offset
        self.last = self._phase(placed)
        bisect.insort(self.phases, self.last)
        return placed

    def _wait(self, start: timedelta) -> timedelta:
        if self._clear(start):
            return timedelta(0)
        count = len(self.phases)
        # Just past each one from `gap` before `start` on, in the grid's order: each waits
        # longer than the one before, so the first clear one waits least.
        at = bisect.bisect_left(self.phases, (start - self.gap) % self.interval)
        for k in range(min(count, NEAREST)):
            candidate = (self.phases[(at + k) % count] + self.gap) % self.interval
            if self._clear(candidate):
                return (candidate - start) % self.interval
        last = [] if self.last is None else [self.last + self.gap]
        candidates = itertools.chain(last, (p + self.gap for p in self.phases))
        return next(
            ((c - start) % self.interval for c in candidates if self._clear(c % self.interval)),
            timedelta(0),
        )

    def _phase(self, moment: datetime) -> timedelta:
        return (moment - EPOCH) % self.interval

    def _clear(self, phase: timedelta) -> bool:
        if not self.phases or self.gap <= timedelta(0):
            return True
        if self.interval < 2 * self.gap:
            return False
        at = bisect.bisect_left(self.phases, phase)
        after, before = self.phases[at % len(self.phases)], self.phases[at - 1]
        return (after - phase) % self.interval >= self.gap and (
            phase - before
        ) % self.interval >= self.gap


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def sub_second_offset(target_id: str) -> timedelta:
    """Whole milliseconds in [0, 1 s), the same for a target id everywhere."""
    digest = hashlib.blake2b(target_id.encode(), digest_size=4).digest()
    return timedelta(milliseconds=int.from_bytes(digest, "big") % 1000)


def whole_second_after(moment: datetime) -> datetime:
    if moment.microsecond == 0:
        return moment
    return moment.replace(microsecond=0) + timedelta(seconds=1)
