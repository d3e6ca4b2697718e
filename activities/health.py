"""Postgres's part of schedule health (issue 48): the window's slots and the workers'
heartbeats, each one named statement of `sql/health.sql`."""

import json
from collections.abc import Sequence
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
