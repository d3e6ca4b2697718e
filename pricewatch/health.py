"""Schedule health (issue 48): what `pricewatch health`, `GET /api/v1/health` and the
dashboard's /health page show, and the bounds that decide it. The numbers come from one
query (activities/sql/health.sql) on Postgres's clock; the workers from Temporal's
task-queue description and the workers' own heartbeats; the services from this process's
own calls."""

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, computed_field

from pricewatch.durations import format_duration, parse_duration
from pricewatch.slots import format_time

# A result recorded within the greater of these after its slot is on time. Measured to the
# recorded result, not to the check's start (which no row keeps): the fetch is in it.
ON_TIME_FLOOR = timedelta(seconds=10)
ON_TIME_SHARE = 0.1
ON_TIME_BOUND = (
    f"recorded within max({format_duration(ON_TIME_FLOOR)}, {ON_TIME_SHARE:.0%} of the "
    "interval) after its slot"
)
# A target whose newest this many due slots in a row went unchecked is named.
UNCHECKED_AFTER = 3
DEFAULT_WINDOW = "1d"
MAX_WINDOW = timedelta(days=7)
MIN_WINDOW = timedelta(minutes=1)
# A worker beats every HEARTBEAT_EVERY (workers/observability.py); one silent for
# HEARTBEAT_SILENT is not polling (a freeze, a kill, a lost database). Temporal renews a
# poller's last access each time it polls, at least once a long poll (about a minute): one
# unseen for POLL_SILENT is not polling either.
HEARTBEAT_EVERY = timedelta(seconds=2)
HEARTBEAT_SILENT = timedelta(seconds=15)
POLL_SILENT = timedelta(seconds=90)
# Each service gets this long to answer a health call; the other's part is shown anyway.
# The window's query then gets QUERY_BOUND: a week of 500 targets every 5 minutes (a million
# rows) took 5.8 s on a busy 2-core machine.
ANSWER_BOUND = timedelta(seconds=5)
QUERY_BOUND = timedelta(seconds=60)


def parse_window(text: str) -> timedelta:
    """`1h`, `1d`, `7d` or any duration from a minute to a week; ValueError naming the
    window otherwise."""
    try:
        window = parse_duration(text)
    except ValueError as err:
        raise ValueError(f"window: {err}") from None
    if not MIN_WINDOW <= window <= MAX_WINDOW:
        raise ValueError(f"window: {text.strip()!r} is not between 1m and 7d")
    return window


class View(BaseModel):
    model_config = ConfigDict(frozen=True)


class SlotCounts(View):
    """The due slots of a window, by what became of them."""

    on_time: int
    """Recorded (unchanged or changed) within the on-time bound after the slot."""
    late: int
    """Recorded after the bound."""
    skipped: int
    failed: int
    retrying: int
    """Their check failed and is being tried again."""
    pending: int
    """Due, with no row yet: the check in flight, or a schedule that does not move."""
    lateness_p50_seconds: float | None
    """Of the recorded slots: from the slot to the recorded result."""
    lateness_p99_seconds: float | None
    skip_causes: dict[str, int]
    """What the skipped slots' rows say held them back, durations and counts blanked (`…`,
    `N`) so that alike causes add up; a row naming two causes counts under each."""

    def causes(self) -> list[tuple[str, int]]:
        """The skip causes, most slots first."""
        return sorted(self.skip_causes.items(), key=lambda cause: (-cause[1], cause[0]))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def due(self) -> int:
        return self.on_time + self.late + self.skipped + self.failed + self.retrying + self.pending

    @computed_field  # type: ignore[prop-decorator]
    @property
    def on_time_rate(self) -> float | None:
        """On time of the settled due slots (not those pending or being retried)."""
        settled = self.on_time + self.late + self.skipped + self.failed
        return self.on_time / settled if settled else None


class TargetHealth(SlotCounts):
    target_id: str
    interval_seconds: int
    on_time_bound_seconds: float
    unchecked_slots: int
    """Its newest due slots in a row that no check took (skipped, or due with no row),
    whatever the window; 0 for a paused target."""
    last_checked: datetime | None
    """Its newest check of any result but skipped."""


class ScheduleHealth(View):
    """One window of the schedule, on Postgres's clock."""

    at: datetime
    """Postgres's now(), which the window ends at."""
    window_seconds: int
    on_time_bound: str = ON_TIME_BOUND
    unchecked_after: int = UNCHECKED_AFTER
    deployment: SlotCounts
    targets: list[TargetHealth]
    """Those with a due slot in the window, and those unchecked; by id."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unchecked(self) -> list[str]:
        """The targets whose newest `unchecked_after` due slots or more went unchecked."""
        return [t.target_id for t in self.targets if t.unchecked_slots >= self.unchecked_after]

    @functools.cached_property
    def troubled(self) -> list[TargetHealth]:
        """The targets with a slot not on time, worst first: unchecked, then by on-time rate.
        Sorted once per reading, which a server shows to every request (10,000 targets: 8 ms)."""
        return sorted(
            (t for t in self.targets if t.due != t.on_time or t.unchecked_slots),
            key=lambda t: (-t.unchecked_slots, t.on_time_rate or 0, -t.due, t.target_id),
        )


class WorkerHealth(View):
    """One worker process on one task queue: as Temporal lists its pollers, as its own
    heartbeat row says, or both."""

    identity: str
    task_queue: str
    polls: list[str]
    """The task kinds Temporal lists it polling for: `workflow`, `activity`."""
    last_poll: datetime | None
    """Temporal's last access time of its newest poll (None: not listed, or Temporal away)."""
    last_heartbeat: datetime | None
    """Its newest heartbeat, by Postgres's clock (None: it writes none, or Postgres away)."""
    started: datetime | None
    loop_lag_seconds: float | None
    """The worst its event loop ran late in the minute before its heartbeat."""
    not_polling_since: datetime | None
    """Set when its heartbeat is older than HEARTBEAT_SILENT or its last poll older than
    POLL_SILENT: the older of the two that went silent."""


class ServiceHealth(View):
    """Temporal or Postgres, as this process's own calls found it: `error` says why it is
    unreachable, or (Postgres) that it answered but the window's query did not finish."""

    name: str
    address: str
    reachable: bool
    answered_at: datetime | None
    """When it last answered this process (None: not since the process started)."""
    error: str | None


class Health(View):
    """`health --json`: the schedule, the workers and the services, and whether all is
    well (`problems` empty) or what is not, a line each."""

    healthy: bool
    problems: list[str]
    schedule: ScheduleHealth | None
    """None when Postgres did not answer."""
    workers: list[WorkerHealth]
    services: list[ServiceHealth]


# A worker (identity, task queue) as Temporal lists its polls: which task kinds, last poll.
Pollers = dict[tuple[str, str], tuple[list[str], datetime]]


class Row(Protocol):
    """A heartbeat row as Postgres answers it (asyncpg's Record), read by column."""

    def __getitem__(self, column: str) -> Any: ...


def workers_health(
    pollers: Pollers | None, beats: Sequence[Row], now: datetime
) -> list[WorkerHealth]:
    """Each worker on each task queue, from Temporal's pollers and the heartbeat rows: not
    polling since its last sign of life when either went silent (HEARTBEAT_SILENT,
    POLL_SILENT, by `now`, Postgres's clock when it answered)."""
    rows = {(row["identity"], row["task_queue"]): row for row in beats}
    workers = []
    for key in sorted({*(pollers or {}), *rows}, key=lambda key: (key[1], key[0])):
        polls, last_poll = (pollers or {}).get(key, ([], None))
        row = rows.get(key)
        beat = row["last_seen"] if row else None
        silent: list[datetime] = []
        if row and row["silent_seconds"] > HEARTBEAT_SILENT.total_seconds():
            silent.append(row["last_seen"])
        if last_poll and now - last_poll > POLL_SILENT:
            silent.append(last_poll)
        workers.append(WorkerHealth(
            identity=key[0], task_queue=key[1], polls=polls, last_poll=last_poll,
            last_heartbeat=beat, started=row["started_at"] if row else None,
            loop_lag_seconds=row["loop_lag_seconds"] if row else None,
            not_polling_since=max(silent) if silent else None,
        ))  # fmt: skip
    return workers


def unwell(
    schedule: ScheduleHealth | None,
    workers: list[WorkerHealth],
    task_queue: str,
    services: list[ServiceHealth],
) -> list[str]:
    """What makes health unwell, a line each: a service that did not answer, a worker gone
    silent, no worker polling the task queue for workflow or for activity tasks (asked only
    of a Temporal that answered), targets unchecked for their last `unchecked_after` slots."""
    problems = [service.error for service in services if service.error]
    problems += [
        f"worker {w.identity} on {w.task_queue!r} not polling since {format_time(since)}"
        for w in workers
        if (since := w.not_polling_since)
    ]
    if all(service.reachable for service in services if service.name == "Temporal"):
        for kind in ("workflow", "activity"):
            if not any(w.task_queue == task_queue and kind in w.polls and not w.not_polling_since
                       for w in workers):  # fmt: skip
                problems.append(f"no worker polls task queue {task_queue!r} for {kind} tasks")
    if schedule and schedule.unchecked:
        names = ", ".join(schedule.unchecked[:10])
        more = f" and {len(schedule.unchecked) - 10} more" if len(schedule.unchecked) > 10 else ""
        problems.append(
            f"{len(schedule.unchecked)} target(s) not checked for their last "
            f"{schedule.unchecked_after} due slots or more: {names}{more}"
        )
    return problems
