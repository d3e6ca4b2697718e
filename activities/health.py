"""Postgres's part of schedule health (issue 48): the window's slots and the workers'
heartbeats, each one named statement of `sql/health.sql`."""

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources

import asyncpg

from activities.queries import parse
from pricewatch.health import (
    ON_TIME_FLOOR,
    ON_TIME_SHARE,
    UNCHECKED_AFTER,
    ScheduleHealth,
    SlotCounts,
    TargetHealth,
)

HEALTH_QUERIES = parse((resources.files("activities") / "sql" / "health.sql").read_text())
# How long a server shows one reading of a window's slots before it reads them again, and
# of how many windows (`?window=` takes any duration up to a week: each is its own reading).
REUSE_SECONDS = 10.0
WINDOWS_KEPT = 8


@dataclass
class _Reading:
    asked: float  # the loop's clock: how old a reading is, nothing the schedule depends on
    task: "asyncio.Task[ScheduleHealth]"
    before: ScheduleHealth | None  # the last good reading, shown while this one runs


class SharedSchedule:
    """`schedule_health` for a server: read at most once per REUSE_SECONDS per window, one
    reading at a time, shared by every request. The query reads every slot of the window
    (about 0.4 s of Postgres at 10,000 targets), so 20 clients polling /health ran it 20
    times at once and waited 7 s. While a new reading runs, the last good one is shown (its
    `at` says when it was read); a failed reading is not reused, so the next request asks
    again and waits for it."""

    def __init__(self, reuse_seconds: float = REUSE_SECONDS) -> None:
        self.reuse_seconds = reuse_seconds
        self._readings: dict[timedelta, _Reading] = {}

    async def read(self, pool: asyncpg.Pool, window: timedelta) -> ScheduleHealth:
        now = asyncio.get_running_loop().time()
        reading = self._readings.get(window)
        if reading is None or _stale(reading, now, self.reuse_seconds):
            before = _good(reading) if reading is not None else None
            if len(self._readings) >= WINDOWS_KEPT:  # the finished ones go, the rest run on
                self._readings = {w: r for w, r in self._readings.items() if not r.task.done()}
            task = asyncio.ensure_future(schedule_health(pool, window))
            task.add_done_callback(_retrieved)
            reading = self._readings[window] = _Reading(now, task, before)
        if not reading.task.done() and reading.before is not None:
            return reading.before
        return await asyncio.shield(reading.task)  # a request's timeout leaves it to others

    def close(self) -> None:
        for reading in self._readings.values():
            reading.task.cancel()


def _stale(reading: _Reading, now: float, reuse_seconds: float) -> bool:
    done = reading.task.done()
    return done and (_good(reading) is None or now - reading.asked >= reuse_seconds)


def _good(reading: _Reading) -> ScheduleHealth | None:
    task = reading.task
    if not task.done():
        return reading.before
    return None if task.cancelled() or task.exception() else task.result()


def _retrieved(task: "asyncio.Task[ScheduleHealth]") -> None:
    """A reading whose every request gave up still had its error looked at."""
    if not task.cancelled():
        task.exception()


async def schedule_health(
    pool: asyncpg.Pool, window: timedelta, unchecked_after: int = UNCHECKED_AFTER
) -> ScheduleHealth:
    """The window's due slots (ending at Postgres's now()), for the deployment and per
    target, and the targets whose newest `unchecked_after` due slots went unchecked."""
    rows = await HEALTH_QUERIES["schedule_health"].fetch(
        pool, window=window, on_time_floor=ON_TIME_FLOOR.total_seconds(),
        on_time_share=ON_TIME_SHARE, unchecked_after=unchecked_after,
    )  # fmt: skip
    deployment, *targets = rows
    return ScheduleHealth(
        at=deployment["at"],
        window_seconds=int(window.total_seconds()),
        unchecked_after=unchecked_after,
        deployment=SlotCounts(**_counts(deployment)),
        targets=[
            TargetHealth(
                **_counts(row),
                target_id=row["target_id"],
                interval_seconds=row["interval_seconds"],
                on_time_bound_seconds=row["bound"],
                unchecked_slots=row["unchecked_slots"],
                last_checked=row["last_checked"],
            )
            for row in targets
        ],
    )


def _counts(row: asyncpg.Record) -> dict[str, object]:
    return {
        "on_time": row["on_time"], "late": row["late"], "skipped": row["skipped"],
        "failed": row["failed"], "retrying": row["retrying"], "pending": row["pending"],
        "lateness_p50_seconds": row["lateness_p50"], "lateness_p99_seconds": row["lateness_p99"],
        "skip_causes": json.loads(row["causes"]),
    }  # fmt: skip


async def worker_beat(
    pool: asyncpg.Pool, identity: str, task_queues: Sequence[str], loop_lag_seconds: float
) -> None:
    await HEALTH_QUERIES["worker_beat"].execute(
        pool, identity=identity, task_queues=list(task_queues), loop_lag_seconds=loop_lag_seconds
    )


async def worker_gone(pool: asyncpg.Pool, identity: str) -> None:
    await HEALTH_QUERIES["worker_gone"].execute(pool, identity=identity)


async def worker_beats(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return await HEALTH_QUERIES["worker_beats"].fetch(pool)
