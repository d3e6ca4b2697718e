"""Retention: check rows older than their keep time go, in small batches, off the hot path.

A Temporal Schedule (`pricewatch-retention`, hourly) starts the `PruneChecks` workflow, which
calls `prune_checks` until a pass over every target is done. `pricewatch prune` runs the same
passes from the CLI, and `--dry-run` reports what they would delete. What stays is decided in
SQL (`expired_checks` in `sql/0002_retention.sql`): each target's latest observation and
newest snapshot, slots being retried, changes not yet told, and every row of a target whose
lease is live.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg
from temporalio import activity

from activities.queries import QUERIES
from pricewatch.models import PruneProgress
from pricewatch.names import Activity
from pricewatch.policy import CHANGE_RETENTION, CHECK_RETENTION

# One statement locks this many targets and deletes at most this many rows of each, so a
# claim on one of them waits a few milliseconds at most (see docs/performance.md).
TARGETS_PER_BATCH = 20
ROWS_PER_TARGET = 100
# One activity call prunes this long, then reports where it stands; the workflow calls again.
PRUNE_BUDGET = timedelta(minutes=1)


@dataclass(frozen=True)
class Retention:
    keep_checks: timedelta = CHECK_RETENTION
    """Unchanged, skipped and failed rows."""
    keep_changes: timedelta = CHANGE_RETENTION


@dataclass(frozen=True)
class Expired:
    status: str
    rows: int
    targets: int
    deliveries: int
    oldest: datetime
    newest: datetime


async def prune_batch(
    pool: asyncpg.Pool, retention: Retention, progress: PruneProgress
) -> PruneProgress:
    """One statement. A target that had more expired rows than one batch takes is not
    passed: the next batch starts from the same place."""
    row = await QUERIES["prune_checks"].fetchrow(
        pool, after=progress.after, targets=TARGETS_PER_BATCH, rows_per_target=ROWS_PER_TARGET,
        keep_checks=retention.keep_checks, keep_changes=retention.keep_changes,
    )  # fmt: skip
    assert row is not None
    deleted = progress.deleted + row["deleted"]
    if row["last_target"] is None:
        return PruneProgress(after=progress.after, deleted=deleted, done=True)
    after = progress.after if row["capped"] else row["last_target"]
    return PruneProgress(after=after, deleted=deleted)


async def prune_pass(
    pool: asyncpg.Pool,
    retention: Retention,
    progress: PruneProgress,
    budget: timedelta | None = None,
    on_batch: Callable[[PruneProgress], None] = lambda _: None,
) -> PruneProgress:
    """Batches until every target is pruned, or the budget is spent."""
    deadline = None if budget is None else time.monotonic() + budget.total_seconds()
    while not progress.done and (deadline is None or time.monotonic() < deadline):
        progress = await prune_batch(pool, retention, progress)
        on_batch(progress)
    return progress


async def expired_summary(pool: asyncpg.Pool, retention: Retention) -> list[Expired]:
    rows = await QUERIES["expired_summary"].fetch(
        pool, keep_checks=retention.keep_checks, keep_changes=retention.keep_changes
    )
    return [Expired(**dict(row)) for row in rows]


class RetentionActivities:
    def __init__(self, pool: asyncpg.Pool, retention: Retention) -> None:
        self.pool = pool
        self.retention = retention

    @activity.defn(name=Activity.PRUNE_CHECKS)
    async def prune_checks(self, progress: PruneProgress) -> PruneProgress:
        """Prune for up to PRUNE_BUDGET from where the pass stands (or where the last attempt
        heartbeated), heartbeating after every batch."""
        if details := activity.info().heartbeat_details:
            progress = PruneProgress.model_validate(details[0])
        progress = await prune_pass(
            self.pool, self.retention, progress, PRUNE_BUDGET,
            on_batch=lambda p: activity.heartbeat(p.model_dump()),
        )  # fmt: skip
        activity.logger.info(
            "retention: %d rows deleted so far%s",
            progress.deleted,
            "" if progress.done else f", continuing after {progress.after!r}",
        )
        return progress
