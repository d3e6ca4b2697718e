"""Timeouts, retry policies, the lease and the error types that the workflow and the
activities agree on. No I/O: the workflow imports it."""

from datetime import timedelta
from typing import Any

from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

# Error types (ApplicationError.type) the retry policies and the workflow tell apart.
PERMANENT_FETCH_ERROR = "PermanentFetchError"
TRANSIENT_FETCH_ERROR = "TransientFetchError"
TARGET_OUT_OF_SYNC = "TargetOutOfSync"
INVALID_TARGET = "InvalidTarget"
LEASE_HELD = "LeaseHeld"
SLOT_NOT_DUE = "SlotNotDue"
PERMANENT_DELIVERY_ERROR = "PermanentDeliveryError"
TRANSIENT_DELIVERY_ERROR = "TransientDeliveryError"
# Postgres did not answer (activities/outages.py): retried like a transient failure.
DEPENDENCY_UNREACHABLE = "DependencyUnreachable"


def expected_failure(message: str, error_type: str, **options: Any) -> ApplicationError:
    """An outcome the retry policies are there for (a page or receiver error, a lease held by
    another attempt, a slot no longer due), not a fault: BENIGN, so the SDK logs it at debug
    level without a traceback and leaves it out of its failure metrics."""
    return ApplicationError(
        message, type=error_type, category=ApplicationErrorCategory.BENIGN, **options
    )


# Longer than the heartbeat timeout (20 s), and renewed by every heartbeat: while Temporal
# still considers an attempt alive, nobody else can take its lease. Shorter than that timeout
# plus the first retry's 30 s backoff: the next attempt after a crash finds the lease lapsed.
CHECK_LEASE = timedelta(seconds=45)
# A fetch heartbeats (and extends its lease) every 5 s; the heartbeat timeout is a few beats,
# well below the lease, so a silent attempt is retried before its lease could look alive.
HEARTBEAT_TIMEOUT = timedelta(seconds=20)
# A rendered check waits this long for a render worker to pick it up (none running: the slot
# is recorded failed, saying so, instead of waiting forever).
RENDER_PICKUP_TIMEOUT = timedelta(minutes=10)
# A fetch is bounded at 30 s; the rest is two short SQL statements.
CHECK_TIMEOUT = timedelta(seconds=60)
# A target's own fetch timeout (`--timeout`, `timeout:`): the overall deadline and the limit
# per read both. At least the 5 s a connect may take (below it, an ordinary page on a busy
# worker fails for nothing); at most 2 minutes (a page slower than that is broken, not slow,
# and the check holds a worker slot and its lease for all of it; see `check_timeout`).
MIN_FETCH_TIMEOUT = timedelta(seconds=5)
MAX_FETCH_TIMEOUT = timedelta(seconds=120)
# What a check needs beside its fetch: the claim, the lease extensions, the commit (each
# statement bounded at 5 s, 10 s with asyncpg's cancel). CHECK_TIMEOUT less the default
# fetch deadline: a check of a target without a timeout gets exactly CHECK_TIMEOUT.
CHECK_SQL_MARGIN = timedelta(seconds=30)


def check_timeout(fetch_timeout_seconds: int | None) -> timedelta:
    """The check activity's start-to-close: CHECK_TIMEOUT, or longer for a target whose own
    fetch timeout leaves less than CHECK_SQL_MARGIN of it (at 120 s: 150 s)."""
    if fetch_timeout_seconds is None:
        return CHECK_TIMEOUT
    return max(CHECK_TIMEOUT, timedelta(seconds=fetch_timeout_seconds) + CHECK_SQL_MARGIN)


# Transient failures back off from 30 s, doubling to 15 min (Retry-After overrides a delay);
# the target's max_attempts (default 5: about 7.5 min of backoff) bounds them. Permanent
# ones stop at once. The workflow runs the first attempt locally and the rest under this
# policy; a failed attempt records when the next one is due by the same numbers.
CHECK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=30),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=15),
    maximum_attempts=5,
    non_retryable_error_types=[PERMANENT_FETCH_ERROR, TARGET_OUT_OF_SYNC, SLOT_NOT_DUE],
)
# A notice: 10 s per attempt; transient failures back off from 10 s to 5 min, 8 attempts
# (about 15 min) a round. Permanent ones stop at once.
DELIVERY_TIMEOUT = timedelta(seconds=10)
DELIVERY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=10),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
    maximum_attempts=8,
    non_retryable_error_types=[PERMANENT_DELIVERY_ERROR],
)
# A round of DELIVERY_RETRY that ran out is followed by another, until this long after the
# notice's first try; then it is recorded failed (workflows/calls.py `deliver`).
NOTICE_TRIED_FOR = timedelta(hours=6)
# Bookkeeping statements: retried briefly through a Postgres restart, then given up so the
# workflow carries on (it never fails because the database was away).
BOOKKEEPING_TIMEOUT = timedelta(seconds=15)
BOOKKEEPING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=20,
)
# Retention: one call prunes for about a minute (activities/retention.py), heartbeating
# after each batch; a lost worker is noticed within the heartbeat timeout, and the next
# attempt resumes from the last batch it reported. The Schedule starts a pass hourly and
# skips a start while one still runs.
PRUNE_TIMEOUT = timedelta(minutes=5)
PRUNE_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
PRUNE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=10),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
    maximum_attempts=10,
)
PRUNE_EVERY = timedelta(hours=1)
# What retention keeps by default: three months of routine checks, two years of changes
# (PRICEWATCH_CHECK_RETENTION, PRICEWATCH_CHANGE_RETENTION).
CHECK_RETENTION = timedelta(days=90)
CHANGE_RETENTION = timedelta(days=730)
# A run of MonitorTarget ends (continue-as-new) after this many checks. A workflow that the
# worker's cache no longer holds replays its current run at every wake-up, at about 0.3 ms of
# worker CPU per history event: short runs keep a miss cheap (docs/performance.md, "The cost
# of a cache miss"). 1.0 ran 300 checks per run; its runs move to this at their next check.
RUN_CHECKS = 5
LEGACY_RUN_CHECKS = 300
