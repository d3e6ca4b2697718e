"""Which dependency is away: one line when it becomes unreachable, one when it is back.

A worker process has one tracker per dependency (`POSTGRES`, `SMTP`, `TEMPORAL`). Whatever
meets the dependency reports to it: every activity (`OutageInterceptor`: a Postgres fault
fails the attempt as an expected, retried failure, without a traceback), the email sender,
and the SDK's pollers (`workers.observability`). The first failure logs

    20:41:03 Postgres unreachable (127.0.0.1:5433: timed out); checks wait for it

and the first success of a call begun after that logs

    20:41:44 Postgres is back after 41 s

on the logger `pricewatch.outages` (JSON logs: `dependency`, `state` = `unreachable` or
`back`, `problem`, `outage_seconds`). Each failed attempt is logged on `pricewatch.faults`
at info level with its traceback (`--verbose`, the worker's logs), never on the dev console.
"""

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from pricewatch.policy import DEPENDENCY_UNREACHABLE, expected_failure

OUTAGE_LOG = logging.getLogger("pricewatch.outages")
FAULT_LOG = logging.getLogger("pricewatch.faults")

# What a statement or a connection attempt raises when Postgres cannot be reached or is
# going away (not a wrong statement): asyncpg's own timeouts are the builtin TimeoutError.
POSTGRES_FAULTS: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unknown host
    TimeoutError,  # a statement or a connection attempt that was not answered in time
    asyncpg.ConnectionDoesNotExistError,  # the connection closed under a statement
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08
    asyncpg.CannotConnectNowError,  # starting up or shutting down
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
)


def problem(err: BaseException) -> str:
    """What went wrong, in words: `timed out`, `connection refused`."""
    if isinstance(err, TimeoutError):
        return "timed out"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, ConnectionResetError):
        return "connection reset"
    if isinstance(err, asyncpg.ConnectionDoesNotExistError):
        return "connection lost"
    return str(err).strip() or type(err).__name__


class Dependency:
    """One dependency's state: up, or unreachable since a moment (monotonic)."""

    def __init__(self, name: str, address: str = "", waiting: str = "") -> None:
        self.name = name
        self.address = address
        self.waiting = waiting
        self.down_since: float | None = None
        self.outages: deque[tuple[float, float]] = deque(maxlen=16)
        """The last outages, (start, end) monotonic: what held a check back (skip causes)."""
        self._lock = threading.Lock()  # the SDK's log forwarding may call from a thread

    def failed(self, err: BaseException | str, started: float | None = None) -> None:
        """A call (begun at `started`, monotonic, if known) could not reach it: the first
        failure of an outage says so. The outage is counted from that call's start: a call
        that times out was unanswered all along."""
        what = err if isinstance(err, str) else problem(err)
        with self._lock:
            if self.down_since is not None:
                return
            self.down_since = time.monotonic() if started is None else started
        where = f"{self.address}: {what}" if self.address else what
        OUTAGE_LOG.warning(
            "%s unreachable (%s)%s", self.name, where, f"; {self.waiting}" if self.waiting else "",
            extra={"dependency": self.name, "state": "unreachable", "problem": where},
        )  # fmt: skip

    def succeeded(self, started: float) -> None:
        """A call begun at `started` (monotonic) got its answer: if it began after the
        outage did, the dependency is back (an answer to an older call says nothing)."""
        with self._lock:
            if self.down_since is None or started < self.down_since:
                return
            now = time.monotonic()
            away = round(now - self.down_since)
            self.outages.append((self.down_since, now))
            self.down_since = None
        OUTAGE_LOG.info(
            "%s is back after %d s", self.name, away,
            extra={"dependency": self.name, "state": "back", "outage_seconds": away},
        )  # fmt: skip

    def away_since(self, since: float) -> float:
        """How long the outages that reached past `since` (monotonic) lasted, each whole,
        the one still going so far."""
        now = time.monotonic()
        with self._lock:
            spans = [*self.outages, *([(self.down_since, now)] if self.down_since else [])]
        return sum(end - start for start, end in spans if end > since)

    @property
    def down(self) -> bool:
        return self.down_since is not None


POSTGRES = Dependency("Postgres", waiting="checks wait for it")
SMTP = Dependency("SMTP", waiting="email notices wait for it")
TEMPORAL = Dependency("Temporal", waiting="the worker waits for it")
DEPENDENCIES = (POSTGRES, SMTP, TEMPORAL)


def any_down() -> bool:
    return any(dependency.down for dependency in DEPENDENCIES)


# While a dependency is away, the worker asks it this often whether it is back, so that
# its line comes when it is, not at the next attempt of a check (30 s of backoff later).
PROBE_EVERY = 2.0
# Past the probes' own bounds (a statement's 10 s, a health check's 5 s): those end them.
PROBE_TIMEOUT = 15.0


async def watch(dependency: Dependency, probe: Callable[[], Awaitable[object]]) -> None:
    """Until cancelled: while `dependency` is away, `probe()` it every PROBE_EVERY; the
    first answer says it is back."""
    while True:
        await asyncio.sleep(PROBE_EVERY)
        if not dependency.down:
            continue
        started = time.monotonic()
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                await probe()
        except Exception:  # still away; the probe's error says nothing new
            continue
        dependency.succeeded(started)


@contextlib.asynccontextmanager
async def watching(
    dependency: Dependency, probe: Callable[[], Awaitable[object]]
) -> AsyncIterator[None]:
    """`watch(dependency, probe)` while the block runs."""
    watcher = asyncio.create_task(watch(dependency, probe))
    try:
        yield
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


def postgres_address(url: str) -> str:
    """Where a Postgres URL connects, as `host:port` or the Unix socket's directory."""
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or "localhost"])[0]
    return host if host.startswith("/") else f"{host}:{parts.port or 5432}"


class OutageInterceptor(Interceptor):
    """Every activity reads or writes Postgres: one that gets its answers (it completes, or
    fails with one of pricewatch's own errors, which it raises after reading the database)
    tells `POSTGRES` it is up; one that meets a Postgres fault tells it it is away and fails
    as `DependencyUnreachable`, an expected failure (retried, logged without a traceback)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ReportingActivity(next)


class _ReportingActivity(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        started = time.monotonic()
        try:
            result = await self.next.execute_activity(input)
        except ApplicationError:
            POSTGRES.succeeded(started)
            raise
        except POSTGRES_FAULTS as err:
            POSTGRES.failed(err, started)
            message = f"Postgres unreachable: {problem(err)}"
            info = activity.info()
            FAULT_LOG.info(
                "%s attempt %d: %s", info.activity_type, info.attempt, message, exc_info=True,
                extra={"temporal_activity": {"activity_type": info.activity_type,
                                             "workflow_id": info.workflow_id,
                                             "attempt": info.attempt}},
            )  # fmt: skip
            back = await until_back(POSTGRES, wait_left(info, started))
            raise expected_failure(
                message, DEPENDENCY_UNREACHABLE, next_retry_delay=RETRY_WHEN_BACK if back else None
            ) from err
        POSTGRES.succeeded(started)
        return result


# An attempt that met a Postgres outage waits up to this long for its end (the watcher
# probes every PROBE_EVERY) before it fails: retried RETRY_WHEN_BACK later if Postgres is
# back, so checks resume within seconds of its return instead of a check's 30 s backoff
# later; by its policy's backoff if not. What it keeps of its start-to-close, beyond the
# wait, is WAIT_MARGIN.
WAIT_FOR_RETURN = 30.0
WAIT_MARGIN = 10.0
RETRY_WHEN_BACK = timedelta(seconds=1)


def wait_left(info: activity.Info, started: float) -> float:
    """How long this attempt may wait for a dependency, within its start-to-close."""
    if info.start_to_close_timeout is None:
        return WAIT_FOR_RETURN
    left = info.start_to_close_timeout.total_seconds() - (time.monotonic() - started)
    return max(0.0, min(WAIT_FOR_RETURN, left - WAIT_MARGIN))


async def until_back(dependency: Dependency, limit: float) -> bool:
    """Wait up to `limit` seconds for `dependency` to be back (a normal activity heartbeats
    meanwhile); whether it is."""
    ends = time.monotonic() + limit
    while dependency.down and time.monotonic() < ends:
        if not activity.info().is_local:
            activity.heartbeat()
        await asyncio.sleep(0.5)
    return not dependency.down
