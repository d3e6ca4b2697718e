"""The worker process: runs `MonitorTarget` workflows and their activities."""

import asyncio
import concurrent.futures
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities import store
from activities.checks import CheckActivities
from activities.migrate import migrate
from activities.notify import NotifyActivities, SmtpSettings
from activities.outages import POSTGRES, SMTP, OutageInterceptor, postgres_address, watching
from activities.retention import Retention, RetentionActivities
from activities.selfwatch import SelfWatchActivities, Watch
from client.temporal import (
    RPC_TIMEOUT,
    check_namespace,
    connect,
    ensure_retention_schedule,
    ensure_selfwatch_schedule,
    missing_search_attributes,
)
from client.temporal import address as temporal_address
from fetchers.guard import AddressPolicy
from fetchers.http import new_client
from pricewatch.names import render_queue
from pricewatch.settings import Settings
from workers.observability import (
    configure_logging,
    configure_tracing,
    core_runtime,
    heartbeating,
    serve_health,
    watch_gc_pauses,
    watching_loop_lag,
    watching_temporal,
)
from workers.payloads import skip_idle_payload_walks
from workflows.monitor import MonitorTarget
from workflows.retention import PruneChecks
from workflows.selfwatch import WatchSelf

if TYPE_CHECKING:  # Playwright is the `render` extra: only a render worker imports it
    from fetchers.browser import BrowserFetcher


@dataclass(frozen=True)
class WorkerTuning:
    """Concurrency and shutdown. In-flight activities get `shutdown_grace` to finish on
    SIGTERM; one cut off is retried elsewhere and its lease keeps the slot single. The
    workflow cache should hold every target the worker has: an evicted workflow replays its
    whole history on every wake-up. The sandbox is for tests and development (see
    `Settings.worker_sandbox`); it also keeps the SDK's activation threads and their
    deadlock detector, which the production worker trades for `InlineActivations`."""

    max_activities: int = 100
    max_workflow_tasks: int = 100
    max_cached_workflows: int = 2000
    shutdown_grace: timedelta = timedelta(seconds=30)
    sandboxed: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> "WorkerTuning":
        return cls(
            max_activities=settings.worker_max_activities,
            max_workflow_tasks=settings.worker_max_workflow_tasks,
            max_cached_workflows=settings.worker_max_cached_workflows,
            shutdown_grace=timedelta(seconds=settings.shutdown_grace_seconds),
            sandboxed=settings.worker_sandbox,
        )

    @property
    def pool_size(self) -> int:
        """Activities hold a connection only for single statements: a few suffice."""
        return max(2, min(self.max_activities, 20))


class InlineActivations(concurrent.futures.ThreadPoolExecutor):
    """Runs each workflow activation on the worker's event loop instead of a thread.

    The SDK hands activations to a thread pool so that its deadlock detector can time out
    a workflow that never yields. Our activations are short (no I/O, a few steps of
    workflow code), and the hop to a thread and back (two wake-ups, the GIL changing hands
    twice) cost 7-10% of the worker's CPU per check at 50 checks/s. The price: a workflow
    stuck in a loop stalls the worker instead of failing its task, so the tests run the
    workflow sandboxed, in threads, with the detector on. Runs from a plain callback, as the
    SDK's own debug mode does: stepping the workflow's tasks from inside a task of this loop
    is refused on newer Pythons."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)  # never started: `submit` runs on the loop

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        loop = asyncio.get_running_loop()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def activate() -> None:
            if not future.set_running_or_notify_cancel():
                return  # cancelled while queued, as a thread pool would skip it
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as err:  # the SDK gets it, as from a thread
                future.set_exception(err)
            finally:
                # An activation leaves no running loop behind it (it ran its own). A private
                # asyncio call, as in the SDK's debug mode; `tests/test_worker.py` runs a
                # worker this way and fails if it stops working.
                asyncio._set_running_loop(loop)

        loop.call_soon(activate)
        return future


DEFAULT_RETENTION = Retention()


@dataclass(frozen=True)
class Activities:
    checks: CheckActivities
    notify: NotifyActivities
    retention: RetentionActivities
    selfwatch: SelfWatchActivities | None = None


def smtp_settings(settings: Settings) -> SmtpSettings:
    return SmtpSettings.of(settings)


def retention_settings(settings: Settings) -> Retention:
    return Retention(settings.check_retention, settings.change_retention)


def address_policy(settings: Settings) -> AddressPolicy:
    """The guard's policy; beside a running `pricewatch dev` (its database from the data dir)
    the networks it allows, as the CLI's add and try have them (`try --render` runs here)."""
    return AddressPolicy.allowing(settings.resolved_allow_networks().split(","))


@contextlib.asynccontextmanager
async def worker_activities(
    database_url: str,
    smtp: SmtpSettings,
    policy: AddressPolicy,
    snapshots_kept: int = 50,
    pool_size: int = 10,
    retention: Retention = DEFAULT_RETENTION,
    migrate_schema: bool = True,
    watch: Watch | None = None,
) -> AsyncIterator[Activities]:
    """The worker's one pool and one HTTP client, shared by all activities, closed on exit.
    Applies pending migrations first unless told not to (a one-shot job does it)."""
    POSTGRES.address = postgres_address(database_url)  # what its outage line names
    SMTP.address = f"{smtp.host}:{smtp.port}"
    pool = await store.create_pool(database_url, max_size=pool_size)
    try:
        if migrate_schema:
            async with pool.acquire() as conn:
                await migrate(conn)
        async with (
            new_client(policy) as http,
            watching(POSTGRES, lambda: pool.fetchval("SELECT 1")),
        ):
            yield Activities(
                CheckActivities(pool, http, snapshots_kept),
                NotifyActivities(pool, http, smtp, policy),
                RetentionActivities(pool, retention),
                SelfWatchActivities(pool, policy, watch),
            )
    finally:
        try:
            await asyncio.wait_for(pool.close(), POOL_CLOSE_TIMEOUT)
        except TimeoutError:
            pool.terminate()


def build_worker(
    client: Client, task_queue: str, activities: Activities, tuning: WorkerTuning = WorkerTuning()
) -> Worker:
    checks, notify = activities.checks, activities.notify
    skip_idle_payload_walks()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[MonitorTarget, PruneChecks, WatchSelf],
        activities=[
            checks.register_target,
            checks.sync_target,
            checks.reconfigure_target,
            checks.check_slot,
            checks.record_failed_slot,
            checks.remove_target,
            checks.unnotified_changes,
            notify.deliver_notice,
            notify.record_delivery_failed,
            activities.retention.prune_checks,
            *([activities.selfwatch.watch_self] if activities.selfwatch else []),
        ],
        interceptors=[OutageInterceptor()],
        graceful_shutdown_timeout=tuning.shutdown_grace,
        max_cached_workflows=tuning.max_cached_workflows,
        max_concurrent_activities=tuning.max_activities,
        max_concurrent_workflow_tasks=tuning.max_workflow_tasks,
        workflow_runner=SandboxedWorkflowRunner()
        if tuning.sandboxed
        else UnsandboxedWorkflowRunner(),
        workflow_task_executor=None if tuning.sandboxed else InlineActivations(),
    )


def build_render_worker(
    client: Client, task_queue: str, checks: CheckActivities, concurrency: int,
    tuning: WorkerTuning = WorkerTuning(),
) -> Worker:  # fmt: skip
    """The render task queue's worker: only the check, with a browser fetcher, at most
    `concurrency` at once (each is one Chromium context)."""
    return Worker(
        client,
        task_queue=render_queue(task_queue),
        activities=[checks.check_slot],
        interceptors=[OutageInterceptor()],
        graceful_shutdown_timeout=tuning.shutdown_grace,
        max_concurrent_activities=concurrency,
    )


@contextlib.asynccontextmanager
async def browser(settings: Settings) -> AsyncIterator["BrowserFetcher"]:
    """The render worker's fetcher, its Chromium closed on exit; ChromiumMissing (one line)
    if there is none to launch."""
    from fetchers.browser import BrowserFetcher
    from workers.chromium import chromium_args, find_chromium

    fetcher = BrowserFetcher(
        address_policy(settings), find_chromium(settings.chromium), chromium_args(),
        settings.render_concurrency, settings.render_recycle_after, settings.render_recycle_mib,
    )  # fmt: skip
    try:
        yield fetcher
    finally:
        await fetcher.close()


# Start-up waits for a dependency that is away (a deploy racing a database failover, a
# frontend restarting): it tries again, at most this far apart, instead of exiting for a
# supervisor to restart it.
STARTUP_RETRY_CAP = 30.0
# What says "not reachable now" at start-up, as opposed to a real error (a bad migration).
UNREACHABLE = (
    OSError,  # refused, reset, unknown host; ConnectionError from `connect`
    TimeoutError,
    asyncpg.InterfaceError,  # the connection closed under a statement
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,  # starting up or shutting down
    RPCError,  # a frontend away or overloaded: "Timeout expired", "transport error"
)
# Temporal's answers that waiting will not change: a misspelt namespace, bad credentials.
FATAL_RPC = (
    RPCStatusCode.NOT_FOUND,
    RPCStatusCode.INVALID_ARGUMENT,
    RPCStatusCode.PERMISSION_DENIED,
    RPCStatusCode.UNAUTHENTICATED,
)
LOG = logging.getLogger("pricewatch.worker")
T = TypeVar("T")
# Closing the pool waits for its connections; one stuck in a black hole gets this long.
POOL_CLOSE_TIMEOUT = 5.0


class Stopping(Exception):
    """SIGINT or SIGTERM came while start-up was still waiting."""


async def until_up(what: str, start: Callable[[], Awaitable[T]], stop: asyncio.Event) -> T:
    """`start()`, tried again with backoff (one line each) while `what` is unreachable."""
    delay = 1.0
    while True:
        try:
            return await start()
        except UNREACHABLE as err:
            if isinstance(err, RPCError) and err.status in FATAL_RPC:
                raise
            problem = f"{type(err).__name__}: {err}".rstrip(": ")
        LOG.warning("waiting for %s (%s); trying again in %.0f s", what, problem, delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            raise Stopping
        delay = min(2 * delay, STARTUP_RETRY_CAP)


# How often a starting worker looks whether the SDK's start-up check has passed: the SDK
# sets no event for it, only `is_running`.
STARTED_POLL = 0.05


def discard(worker: Worker) -> None:
    """Release a worker whose start-up check failed. The SDK leaves it registered with the
    client, and a new worker for the same task queue is refused ("Registration of multiple
    workers with overlapping worker task types ... not allowed"); starting the bridge's
    shutdown releases it (its finalising waits for polls that never began). Private: there
    is no public way, and `tests/test_worker_start.py` fails if this stops working."""
    worker._bridge_worker.initiate_shutdown()


@contextlib.asynccontextmanager
async def polling(
    new_worker: Callable[[], Worker], client: Client, stop: asyncio.Event
) -> AsyncIterator[Worker]:
    """A worker running once the SDK's own start-up check has passed, shut down on exit. A
    fatal error while it runs sets `stop`, and is raised at the exit.

    The SDK checks the namespace as the worker starts; against a frozen frontend the check
    hangs, or fails as a bare RuntimeError ("Worker validation failed: ... http2 error")
    that `async with worker` makes fatal. Here a hang is said every RPC_TIMEOUT and waited
    out (the check cannot be cancelled and asked again: the SDK allows one per worker), and
    a failure is classified by asking once more with a status: a namespace that does not
    exist stays fatal (NOT_FOUND); otherwise a new worker tries, once Temporal answers."""
    what = f"Temporal at {temporal_address()}"
    worker = new_worker()
    run = asyncio.create_task(worker.run())
    clock = asyncio.get_running_loop().time
    said_at = clock()
    while not worker.is_running:
        if stop.is_set():
            run.cancel()
            raise Stopping
        if run.done():
            failure = run.exception()
            discard(worker)
            await until_up(what, lambda: check_namespace(client), stop)  # NOT_FOUND raises
            said = str(failure).partition(": Status {")[0][:200]
            LOG.warning("waiting for %s (the worker's start-up check failed: %s)", what, said)
            worker, said_at = new_worker(), clock()
            run = asyncio.create_task(worker.run())
        await asyncio.sleep(STARTED_POLL)
        # By the clock, not by the sleeps counted: on a starved machine each sleep lasts
        # longer than asked, and a count of them said nothing for minutes (a burner's clone).
        if clock() - said_at >= RPC_TIMEOUT.total_seconds():
            LOG.warning("waiting for %s (no answer to the worker's start-up check)", what)
            said_at = clock()
    run.add_done_callback(lambda _: stop.set())
    try:
        yield worker
    finally:
        await worker.shutdown()
        await asyncio.wait([run])
        run.result()


def stop_on_signals() -> asyncio.Event:
    """An event that SIGINT (Ctrl-C) or SIGTERM (a supervisor's stop) sets."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def temporal_when_up(
    stop: asyncio.Event, tracing: bool, runtime: Runtime | None = None
) -> Client:
    """A client once Temporal answers: it may be away, and a server just started opens its
    port before its frontend answers."""
    return await until_up(
        f"Temporal at {temporal_address()}",
        lambda: asyncio.wait_for(connect(runtime, tracing), RPC_TIMEOUT.total_seconds()),
        stop,
    )


async def run_worker(settings: Settings) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully and exit 0. Start-up waits
    for Temporal and Postgres if they are away."""
    configure_logging(settings.log_format)
    if settings.tracing:
        configure_tracing()
    stop = stop_on_signals()
    with contextlib.suppress(Stopping):
        await _serve(settings, stop)


async def _serve(settings: Settings, stop: asyncio.Event) -> None:
    runtime = core_runtime(settings.metrics_address)
    watch_gc_pauses(runtime)
    selfwatch = Watch.of(settings)  # a URL Apprise cannot use ends the start here
    client = await temporal_when_up(stop, settings.tracing, runtime)
    tuning = WorkerTuning.from_settings(settings)

    def open_activities() -> contextlib.AbstractAsyncContextManager[Activities]:
        return worker_activities(
            settings.resolved_database_url(),
            smtp_settings(settings),
            address_policy(settings),
            settings.snapshot_retention,
            tuning.pool_size,
            retention_settings(settings),
            migrate_schema=settings.migrate,
            watch=selfwatch,
        )

    async with contextlib.AsyncExitStack() as stack:
        activities = await until_up(
            "Postgres", lambda: stack.enter_async_context(open_activities()), stop
        )
        await until_up(
            "Temporal (the retention Schedule)",
            lambda: ensure_retention_schedule(client, settings.task_queue),
            stop,
        )
        if selfwatch is not None:
            await until_up(
                "Temporal (the self-watch Schedule)",
                lambda: ensure_selfwatch_schedule(
                    client, settings.task_queue, settings.selfwatch_every
                ),
                stop,
            )
        unregistered = await until_up(
            "Temporal (search attributes)", lambda: missing_search_attributes(client), stop
        )
        if unregistered:
            LOG.warning(
                "search attributes %s are not registered and could not be added: register "
                "them (temporal operator search-attribute create --name NAME --type TYPE), "
                "or the workflows that set them stall",
                ", ".join(unregistered),
            )
        if settings.render:
            fetcher = await stack.enter_async_context(browser(settings))
            checks = activities.checks.fetching_with(fetcher)

            def new_worker() -> Worker:
                return build_render_worker(
                    client, settings.task_queue, checks, settings.render_concurrency, tuning
                )
        else:

            def new_worker() -> Worker:
                return build_worker(client, settings.task_queue, activities, tuning)

        worker = await stack.enter_async_context(polling(new_worker, client, stop))
        polled = render_queue(settings.task_queue) if settings.render else settings.task_queue
        pool = activities.checks.pool

        async def ready() -> bool:
            try:
                async with asyncio.timeout(2):
                    await pool.fetchval("SELECT 1")
            except (OSError, TimeoutError, asyncpg.PostgresError):
                return False
            return worker.is_running

        health = None
        if settings.health_address:
            health = await serve_health(settings.health_address, ready)
        try:
            async with (
                watching_temporal(client),
                watching_loop_lag(runtime) as watch,
                heartbeating(watch, pool, client.identity, [polled]),
            ):
                print(f"worker polling task queue {polled!r}", flush=True)
                await stop.wait()
        finally:
            if health is not None:
                health.close()
