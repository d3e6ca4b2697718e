"""What an operator sees of a worker: JSON logs, Prometheus metrics, health endpoints.

Metrics go through Temporal's own runtime (one Prometheus endpoint serves the SDK's metrics
and pricewatch's, recorded with `activity.metric_meter()`), so there is no second registry.
"""

import asyncio
import contextlib
import gc
import json
import logging
import os
import re
import sys
import threading
import time
import traceback
import warnings
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg
from temporalio import workflow
from temporalio.client import Client
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

from activities.freezes import STALLS, quiet_after_a_stall
from activities.health import worker_beat, worker_gone
from activities.outages import TEMPORAL, watching
from pricewatch.health import HEARTBEAT_EVERY
from pricewatch.policy import CHECK_TIMEOUT

# Fields that activity and workflow loggers attach (`temporal_activity`/`temporal_workflow`)
# and that pricewatch adds itself, lifted to the top level of each JSON line.
CONTEXT_FIELDS = (
    "target_id", "work_id", "execution_id", "outcome", "elapsed_ms",
    "dependency", "state", "problem", "outage_seconds",  # activities/outages.py
)  # fmt: skip


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the ids that tie a line
    to a target, a slot and an attempt."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            if (value := getattr(record, key, None)) is not None:
                line[key] = value
        temporal = getattr(record, "temporal_activity", None) or getattr(
            record, "temporal_workflow", None
        )
        if isinstance(temporal, dict):
            line["temporal"] = temporal
            if "workflow_id" in temporal and "target_id" not in line:
                line["target_id"] = str(temporal["workflow_id"]).removeprefix("pricewatch-")
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(log_format: str) -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    # httpx logs every request at INFO: a second line per check that says less than ours.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def configure_dev_console(verbose: bool) -> None:
    """`pricewatch dev`: one line per check (`12:00:00 hetzner unchanged 183 ms`), one when a
    dependency becomes unreachable and one when it is back (`activities/outages.py`), and
    otherwise only warnings and errors (real faults, with their tracebacks). Verbose: every
    info line of the worker too, each failed attempt's traceback among them."""
    configure_logging("text")
    logging.getLogger().setLevel(logging.INFO if verbose else logging.WARNING)
    lines = logging.StreamHandler()
    lines.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    for name in ("pricewatch.checks", "pricewatch.outages"):
        log = logging.getLogger(name)
        log.handlers = [lines]
        log.setLevel(logging.INFO)
        log.propagate = False
    # The workflows' own lines (a delivery that gave up) read like a check's: without the
    # logger's name and the dict of workflow ids the SDK appends (the summary names the work).
    workflow.logger.workflow_info_on_message = False
    workflow_log = logging.getLogger("temporalio.workflow")
    workflow_log.handlers = [lines]
    workflow_log.propagate = False
    if not verbose:  # the outage line says it; `--verbose` shows every poll error too
        CORE_LOG.addFilter(drop_poll_errors)


# The SDK's Core (Rust) logs: forwarded to this Python logger, so they take the process's
# format (JSON lines, or plain text: Core's own console output has terminal colour codes,
# whatever it writes to) and its filters.
CORE_LOG = logging.getLogger("temporalio.core")
# Core warns of a workflow task that takes over 5 s ([TMPRL1104]). A check's first attempt
# is a local activity and runs inside the workflow task the slot's timer woke: a slow page,
# or a statement waiting out its timeout while Postgres is away, makes a long task by
# design. Warn only past what a first attempt may take (its start-to-close timeout, and
# the longest per-target one), where it means a stuck worker. The variable overrides it.
WORKFLOW_TASK_WARN_SECONDS = int(CHECK_TIMEOUT.total_seconds()) + 90
# Core's lines for a poll that failed (the frontend away or refusing): Temporal is away.
POLL_ERROR = re.compile(
    r"Error while polling|Task polling has encountered errors|gRPC call poll_\w+ retried"
)


def report_poll_errors(record: logging.LogRecord) -> bool:
    """A poll error tells `TEMPORAL` it is away (the outage's one line); kept."""
    message = record.getMessage()
    if POLL_ERROR.search(message):
        detail = re.search(r"message: \"([^\"]*)\"", message)
        TEMPORAL.failed(detail[1] if detail else "its polls fail")
    return True


def drop_poll_errors(record: logging.LogRecord) -> bool:
    """The dev console: a poll error is reported, not printed (the outage line says it)."""
    report_poll_errors(record)  # filters stop at the first that drops a record
    return not POLL_ERROR.search(record.getMessage())


def core_runtime(metrics_address: str | None = None) -> Runtime:
    """The SDK's runtime for a worker: Core's logs through Python logging, and Prometheus
    metrics if an address is given."""
    os.environ.setdefault(
        "TEMPORAL_WORKFLOW_TASK_DURATION_WARN_SECONDS", str(WORKFLOW_TASK_WARN_SECONDS)
    )
    logs = LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(
            logger=CORE_LOG, append_target_to_name=False, prepend_target_on_message=False
        ),
    )
    CORE_LOG.addFilter(report_poll_errors)  # once: a logger keeps one of each filter
    # A thawed worker's completions the server no longer knows: the freeze's lines say it.
    CORE_LOG.addFilter(quiet_after_a_stall)
    logging.getLogger("temporalio.activity").addFilter(quiet_after_a_stall)
    # The SDK's cancel of a local attempt that has just ended (a thaw does it): nothing to do.
    warnings.filterwarnings("ignore", "Cannot find activity to cancel", UserWarning)
    metrics = PrometheusConfig(bind_address=metrics_address) if metrics_address else None
    return Runtime(telemetry=TelemetryConfig(logging=logs, metrics=metrics))


def watching_temporal(client: Client) -> contextlib.AbstractAsyncContextManager[None]:
    """While Temporal is away, ask the frontend's health now and then: its answer says it
    is back (`activities.outages.watch`)."""
    return watching(
        TEMPORAL, lambda: client.service_client.check_health(timeout=timedelta(seconds=5))
    )


def configure_tracing() -> None:
    """Export spans over OTLP (endpoint and headers from `OTEL_EXPORTER_OTLP_*`)."""
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as err:
        raise LookupError(
            "PRICEWATCH_TRACING needs the extra: pip install 'pricewatch[otel]'"
        ) from err
    provider = TracerProvider(resource=Resource.create({"service.name": "pricewatch"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


# A full collection walks every object the worker holds, its cached workflows included
# (about 0.1 MiB each): with thousands cached, one can stop the worker for most of a second.
GC_PAUSE_WORTH_A_LINE = 0.1


def watch_gc_pauses(runtime: Runtime | None) -> None:
    """Time each garbage collection: `pricewatch_gc_pause_seconds` (per generation) and a
    warning for one that stops the worker for GC_PAUSE_WORTH_A_LINE or more."""
    meter = runtime.metric_meter if runtime is not None else None
    pauses = meter.create_histogram_float(
        "pricewatch_gc_pause_seconds", "garbage collection pauses", unit="s"
    ) if meter is not None else None  # fmt: skip
    started = 0.0
    log = logging.getLogger("pricewatch.worker")

    def timed(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
            return
        paused = time.perf_counter() - started
        if pauses is not None:
            pauses.record(paused, {"generation": str(info["generation"])})
        if paused >= GC_PAUSE_WORTH_A_LINE:
            log.warning(
                "garbage collection (generation %d) paused the worker for %.0f ms",
                info["generation"], paused * 1000,
            )  # fmt: skip

    gc.callbacks.append(timed)


# The event loop runs every heartbeat, lease extension and delivery record: blocked longer
# than this, a worker risks exactly what issue 41 saw (a cancelled attempt, a send twice).
LOOP_LAG_WORTH_A_LINE = 0.25
LOOP_PROBE_EVERY = 0.1
# Where a blocked loop's stack is worth naming: pricewatch's own code.
OUR_CODE = re.compile(r"[/\\](activities|pricewatch|workers|workflows|surfaces|client)[/\\]")


class LoopWatch:
    """A probe of the event loop: a task sleeps LOOP_PROBE_EVERY and measures how late it
    wakes (`pricewatch_loop_lag_seconds`); past LOOP_LAG_WORTH_A_LINE, one warning naming
    what ran. The name comes from a watchdog thread that, seeing the probe overdue, reads
    the loop thread's stack while the block is still on it (a thread runs while the loop's
    Python is in C or has let the GIL go, which is how a long block usually looks)."""

    def __init__(self, runtime: Runtime | None) -> None:
        meter = runtime.metric_meter if runtime is not None else None
        self.lags = meter.create_histogram_float(
            "pricewatch_loop_lag_seconds", "how late the event loop ran a 100 ms sleep",
            unit="s",
        ) if meter is not None else None  # fmt: skip
        self.beat = time.monotonic()
        self.worst = 0.0
        """The worst lag since `take_worst` last read it (a freeze is not the loop's lag)."""
        self.blocked_in: str | None = None
        self.stopped = threading.Event()
        self.log = logging.getLogger("pricewatch.worker")

    async def probe(self) -> None:
        loop_thread = threading.get_ident()
        watchdog = threading.Thread(
            target=self._watch, args=(loop_thread,), name="loop-watch", daemon=True
        )
        watchdog.start()
        try:
            while True:
                self.beat = started = time.monotonic()
                waited_before = waited_for_cpu()
                await asyncio.sleep(LOOP_PROBE_EVERY)
                lag = max(time.monotonic() - started - LOOP_PROBE_EVERY, 0.0)
                waited = waited_for_cpu() - waited_before
                if self.lags is not None:
                    self.lags.record(lag)
                blocked = lag <= LOOP_LAG_WORTH_A_LINE or not self._frozen(started, lag)
                if blocked:
                    self.worst = max(self.worst, lag)
                if lag > LOOP_LAG_WORTH_A_LINE and blocked:
                    self._say(lag, waited)
                self.blocked_in = None
        finally:
            self.stopped.set()

    def _say(self, lag: float, waited: float) -> None:
        """A lag is judged by what it would have been on an idle machine: the part not spent
        waiting for a core (running, sleeping in a call, waiting for the GIL). Under
        LOOP_LAG_WORTH_A_LINE, a busy machine stretched it, the stack the watchdog read then
        is chance, and the line says so; otherwise the loop was blocked, and it names where."""
        if lag - waited < LOOP_LAG_WORTH_A_LINE:
            self.log.warning(
                "the event loop ran %.0f ms late: it waited %.0f ms for a CPU, the machine is busy",
                lag * 1000, waited * 1000,
            )  # fmt: skip
        else:
            where = f" in {self.blocked_in}" if self.blocked_in else ""
            self.log.warning("the event loop was blocked for %.0f ms%s", lag * 1000, where)

    def take_worst(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst

    @staticmethod
    def _frozen(started: float, lag: float) -> bool:
        """Whether the whole process was stopped for most of this lag: not the loop's
        block, and the freeze's own line says it (`activities.freezes`)."""
        STALLS.beat()  # the loop may run before the watchdog after a thaw
        return STALLS.stalled_since(started, frozen=True) > lag / 2

    def _watch(self, loop_thread: int) -> None:
        try:
            self._beat(loop_thread)
        finally:
            STALLS.stop()

    def _beat(self, loop_thread: int) -> None:
        STALLS.beat()
        while not self.stopped.wait(LOOP_PROBE_EVERY):
            STALLS.beat()
            overdue = time.monotonic() - self.beat - LOOP_PROBE_EVERY
            if overdue > LOOP_LAG_WORTH_A_LINE / 2 and self.blocked_in is None:
                frame = sys._current_frames().get(loop_thread)
                if frame is not None:
                    self.blocked_in = where(frame)


def waited_for_cpu() -> float:
    """Seconds the calling thread has spent runnable but not running, waiting for a core
    (Linux's schedstat); 0 where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def where(frame: object) -> str:
    """The innermost of pricewatch's own frames on a stack (and the innermost frame, if it
    is elsewhere): `pricewatch/notices.py:250 _render_one (jinja2/runtime.py:...)`."""
    stack = traceback.extract_stack(frame)  # type: ignore[arg-type]
    if not stack:
        return "?"

    def short(entry: traceback.FrameSummary) -> str:
        parts = entry.filename.replace("\\", "/").split("/")
        return f"{'/'.join(parts[-2:])}:{entry.lineno} {entry.name}"

    ours = [entry for entry in stack if OUR_CODE.search(entry.filename)]
    innermost = stack[-1]
    if not ours:
        return short(innermost)
    if ours[-1] is innermost:
        return short(innermost)
    return f"{short(ours[-1])} ({short(innermost)})"


@contextlib.asynccontextmanager
async def watching_loop_lag(runtime: Runtime | None) -> AsyncIterator[LoopWatch]:
    """A LoopWatch probing this loop while the block runs."""
    watch = LoopWatch(runtime)
    task = asyncio.create_task(watch.probe())
    try:
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def heartbeating(
    watch: LoopWatch, pool: asyncpg.Pool, identity: str, task_queues: list[str]
) -> AsyncIterator[None]:
    """This worker's row in `workers`, written every HEARTBEAT_EVERY with the worst loop
    lag of the last minute, for `pricewatch health`: Temporal's list of pollers keeps a
    frozen worker's poll for up to a minute and knows nothing of its loop. Postgres away: the
    beat is missed (its outage has its own line). Deleted on a clean stop."""
    task = asyncio.create_task(_beat(watch, pool, identity, task_queues))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(*DATABASE_AWAY):
            async with asyncio.timeout(HEARTBEAT_EVERY.total_seconds()):
                await worker_gone(pool, identity)


DATABASE_AWAY = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def _beat(watch: LoopWatch, pool: asyncpg.Pool, identity: str, queues: list[str]) -> None:
    every = HEARTBEAT_EVERY.total_seconds()
    recent: deque[float] = deque(maxlen=round(60 / every))
    while True:
        recent.append(watch.take_worst())
        try:
            async with asyncio.timeout(every * 2):
                await worker_beat(pool, identity, queues, max(recent))
        except Exception:  # a missed beat is what health shows; it never stops the worker
            logging.getLogger("pricewatch.worker").debug("heartbeat missed", exc_info=True)
        await asyncio.sleep(every)


async def serve_health(address: str, ready: Callable[[], Awaitable[bool]]) -> asyncio.Server:
    """`GET /livez`: the process answers. `GET /readyz`: it can do work (Postgres answers
    and the worker polls). Tiny on purpose: two fixed routes need no web framework."""
    host, port = address.rsplit(":", 1)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = (await reader.readline()).decode(errors="replace").split()
            path = request_line[1] if len(request_line) > 1 else ""
            if path == "/livez":
                status = "200 OK"
            elif path == "/readyz":
                status = "200 OK" if await ready() else "503 Service Unavailable"
            else:
                status = "404 Not Found"
            body = status.split(" ", 1)[1].encode()
            head = f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
            writer.write(head.encode() + b"\r\n" + body)
            await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_server(answer, host, int(port))
