"""The designs, each started on the same workload: N targets, one page each, due
every `interval` seconds on grids spread evenly over the interval, each target at the
sub-second offset `pricewatch add` gives it. `pricewatch-calendar` is the product again on
calendar grids at the same rate and spread (issue 31), in whole seconds: a calendar's
offset is.
"""

import asyncio
import contextlib
import math
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
)

from activities import store
from bench import bare as bare_loop
from bench.scheduled import WORKFLOW_NAME
from bench.stack import TASK_QUEUE, Database, Stack, TemporalServer, python_module
from client.temporal import DATA_CONVERTER, start_monitor
from pricewatch.calendar import Calendar, slot_after
from pricewatch.models import MonitorState, TargetConfig
from pricewatch.slots import sub_second_offset
from workers.embedded import free_port

PRICEWATCH = str(Path(sys.executable).parent / "pricewatch")
PRODUCT_CHECKS_PER_RUN: int = MonitorState.model_fields["max_checks_per_run"].default
# Targets a design sets up per second, the slowest (pricewatch: each start is a workflow
# task, a registration and another task) on two cores: the first slots' lead time.
SETUP_RATE = 20
# Starts and creates in flight at once while a design sets up its targets: enough to keep
# the server busy, whatever the fleet; more only queue in the client.
SETUP_CONCURRENCY = 32
# pricewatch-calendar's zone: a real one, so the local-time resolution runs as it does for
# users (a minute grid falls on the same instants in every zone with whole-hour offsets).
CALENDAR_TIME_ZONE = "Europe/Berlin"


def calendar_cron(interval: int) -> str:
    """The cron grid due every `interval` seconds: `*/k * * * *` for k minutes dividing an
    hour (cron's finest grid is the minute); ValueError for any other interval."""
    minutes, rest = divmod(interval, 60)
    if rest or minutes < 1 or 60 % minutes:
        raise ValueError(
            f"a calendar target's interval is whole minutes dividing an hour "
            f"(60, 120, ... 3600 s), not {interval} s"
        )
    return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"


@dataclass(frozen=True)
class Workload:
    targets: int
    interval: int
    seconds: float
    workers: int = 1  # worker processes per Temporal design
    cache: int | None = None
    """Each worker's max_cached_workflows; None: the product's default."""
    checks_per_run: int = PRODUCT_CHECKS_PER_RUN
    """The loops continue as new after this many checks."""
    aged: int = 0
    """Checks each loop's current run holds when the window opens."""

    @property
    def offered_per_second(self) -> float:
        return self.targets / self.interval

    @property
    def target_ids(self) -> list[str]:
        return [f"bench-{index:05d}" for index in range(self.targets)]

    def anchors(self, base: datetime) -> list[datetime]:
        """Each target's first slot: spread evenly over one interval in whole seconds,
        each with the sub-second offset `pricewatch add` gives its id."""
        return [
            base
            + timedelta(seconds=(index * self.interval) // self.targets)
            + sub_second_offset(target_id)
            for index, target_id in enumerate(self.target_ids)
        ]

    def slots_due(self, anchors: Iterable[datetime], start: datetime, end: datetime) -> int:
        """How many grid slots of all targets fall in [start, end)."""
        step = self.interval

        def before(anchor: datetime, moment: datetime) -> int:
            return math.ceil((moment - anchor).total_seconds() / step)

        return sum(max(0, before(a, end) - max(0, before(a, start))) for a in anchors)

    def grid_offset(self, anchor: datetime) -> timedelta:
        """Where the anchor's grid sits within each interval counted from the Unix epoch."""
        return timedelta(seconds=anchor.timestamp() % self.interval)

    def config(self, stack: Stack, target_id: str) -> TargetConfig:
        return TargetConfig(
            target_id=target_id, url=stack.page_url(target_id), interval_seconds=self.interval
        )

    def calendar_configs(self, stack: Stack) -> list[TargetConfig]:
        """Each target on `calendar_cron(interval)` in CALENDAR_TIME_ZONE, offset by the
        whole seconds `anchors` spreads the targets by (the offset `add` gives a site's
        targets): its interval_seconds is then the calendar's spacing, the interval."""
        calendar = Calendar.parse(calendar_cron(self.interval), CALENDAR_TIME_ZONE)
        return [
            TargetConfig.model_validate(
                {
                    "target_id": target_id,
                    "url": stack.page_url(target_id),
                    "calendar": calendar.model_copy(
                        update={"offset_seconds": (index * self.interval) // self.targets}
                    ),
                }
            )
            for index, target_id in enumerate(self.target_ids)
        ]


@dataclass(frozen=True)
class Running:
    worker_pids: list[int]
    base: datetime
    anchors: list[datetime]
    setup_started: float
    """time.monotonic() when the design began setting targets up."""
    temporal: TemporalServer | None = None
    client: Client | None = None
    metrics_urls: list[str] = field(default_factory=list)
    """Each worker's Prometheus endpoint."""


Design = Callable[[Stack, Workload, Database, asyncpg.Pool], AbstractAsyncContextManager[Running]]


def first_base(workload: Workload) -> datetime:
    """The first grid anchor: a whole second, after the time it takes to set targets up
    (about 25 a second on two cores), with some slack: the first cycle costs more (each run
    records its patch markers), and checks falling due while targets still register start
    with a backlog. The registration time is reported beside it."""
    lead = 3 + workload.targets / SETUP_RATE
    now = datetime.now(UTC)
    return now.replace(microsecond=0) + timedelta(seconds=math.ceil(lead))


async def bounded(calls: Iterable[Awaitable[object]]) -> None:
    gate = asyncio.Semaphore(SETUP_CONCURRENCY)

    async def one(call: Awaitable[object]) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(call) for call in calls))


async def insert_targets(
    stack: Stack, workload: Workload, pool: asyncpg.Pool, anchors: list[datetime]
) -> None:
    """The designs without a workflow of their own get the rows pricewatch's sync writes."""
    await bounded(
        store.sync_target(pool, workload.config(stack, target_id), next_slot=anchor, enabled=True)
        for target_id, anchor in zip(workload.target_ids, anchors, strict=True)
    )


async def connect(temporal: TemporalServer) -> Client:
    return await Client.connect(temporal.address, data_converter=DATA_CONVERTER)


@dataclass(frozen=True)
class Workers:
    pids: list[int]
    metrics_urls: list[str]


@asynccontextmanager
async def worker_processes(
    stack: Stack, workload: Workload, design: str, args: list[str], env: dict[str, str]
) -> AsyncIterator[Workers]:
    """`--workers` worker processes of a Temporal design, all on its task queue, each with
    `--cache` and a Prometheus endpoint of its own (the SDK's workflow-cache counters)."""
    if workload.cache is not None:
        env = {**env, "PRICEWATCH_WORKER_MAX_CACHED_WORKFLOWS": str(workload.cache)}
    async with contextlib.AsyncExitStack() as processes:
        workers = Workers([], [])
        for n in range(workload.workers):
            address = f"127.0.0.1:{free_port()}"
            process = stack.process(
                f"{design}-worker-{n}", args, {**env, "PRICEWATCH_METRICS_ADDRESS": address}
            )
            workers.pids.append((await processes.enter_async_context(process)).pid)
            workers.metrics_urls.append(f"http://{address}/metrics")
        yield workers


@asynccontextmanager
async def pricewatch(
    stack: Stack, workload: Workload, database: Database, pool: asyncpg.Pool
) -> AsyncIterator[Running]:
    """The product: `pricewatch worker` with its shipped defaults, one MonitorTarget each."""
    configs = [workload.config(stack, target_id) for target_id in workload.target_ids]
    async with monitors(stack, workload, database, "pricewatch", configs) as running:
        yield running


@asynccontextmanager
async def pricewatch_calendar(
    stack: Stack, workload: Workload, database: Database, pool: asyncpg.Pool
) -> AsyncIterator[Running]:
    """The product with calendar targets (issue 31): `pricewatch` with each target on
    `Workload.calendar_configs`, its first slot the calendar's first after the base."""
    configs = workload.calendar_configs(stack)
    async with monitors(stack, workload, database, "pricewatch-calendar", configs) as running:
        yield running


@asynccontextmanager
async def monitors(
    stack: Stack, workload: Workload, database: Database, name: str, configs: list[TargetConfig]
) -> AsyncIterator[Running]:
    """`pricewatch worker` and one MonitorTarget per config, started at its first slot."""
    with stack.temporal(name) as temporal:
        env = stack.design_env(database, temporal)
        async with worker_processes(stack, workload, name, [PRICEWATCH, "worker"], env) as workers:
            client = await connect(temporal)
            base = first_base(workload)
            anchors = [
                slot_after(config.calendar, config.target_id, base - timedelta.resolution)
                if config.calendar is not None
                else anchor
                for config, anchor in zip(configs, workload.anchors(base), strict=True)
            ]
            started = time.monotonic()
            await bounded(
                start_monitor(
                    client,
                    MonitorState(
                        config=config,
                        start_at=anchor,
                        # TEST-ONLY: the product's minimum interval is 15 minutes
                        # (PRICEWATCH_MIN_INTERVAL); the benchmark needs seconds.
                        min_interval_seconds=workload.interval,
                        max_checks_per_run=workload.checks_per_run,
                    ),
                    TASK_QUEUE,
                )
                for config, anchor in zip(configs, anchors, strict=True)
            )
            yield Running(
                workers.pids, base, anchors, started, temporal, client, workers.metrics_urls
            )


@asynccontextmanager
async def schedules(
    stack: Stack, workload: Workload, database: Database, pool: asyncpg.Pool
) -> AsyncIterator[Running]:
    """One Schedule per target (interval spec, default policies); each action starts a
    short workflow that runs the product's check activity."""
    with stack.temporal("schedules") as temporal:
        env = stack.design_env(database, temporal)
        worker_args = python_module("bench.scheduled")
        async with worker_processes(stack, workload, "schedules", worker_args, env) as workers:
            client = await connect(temporal)
            base = first_base(workload)
            anchors = workload.anchors(base)
            started = time.monotonic()
            await insert_targets(stack, workload, pool, anchors)
            interval = timedelta(seconds=workload.interval)
            await bounded(
                client.create_schedule(
                    schedule_id(target_id),
                    Schedule(
                        action=ScheduleActionStartWorkflow(
                            WORKFLOW_NAME,
                            workload.config(stack, target_id),
                            id=f"check-{target_id}",
                            task_queue=TASK_QUEUE,
                        ),
                        spec=ScheduleSpec(
                            intervals=[
                                ScheduleIntervalSpec(
                                    every=interval,
                                    offset=workload.grid_offset(anchor),
                                )
                            ],
                            start_at=anchor,
                        ),
                    ),
                )
                for target_id, anchor in zip(workload.target_ids, anchors, strict=True)
            )
            yield Running(
                workers.pids, base, anchors, started, temporal, client, workers.metrics_urls
            )


def schedule_id(target_id: str) -> str:
    return f"schedule-{target_id}"


@asynccontextmanager
async def poller(
    stack: Stack, workload: Workload, database: Database, pool: asyncpg.Pool
) -> AsyncIterator[Running]:
    """One asyncio process polling the table; no Temporal at all."""
    base = first_base(workload)
    anchors = workload.anchors(base)
    started = time.monotonic()
    await insert_targets(stack, workload, pool, anchors)
    env = stack.design_env(database, None)
    async with stack.process("poller", python_module("bench.poller"), env) as worker:
        yield Running([worker.pid], base, anchors, started)


@asynccontextmanager
async def bare(
    stack: Stack, workload: Workload, database: Database, pool: asyncpg.Pool
) -> AsyncIterator[Running]:
    """The ceiling: bench/bare.py's loop, one workflow per target. Its targets' rows are
    written first, as for the designs without registration (its rows reference them)."""
    with stack.temporal("bare") as temporal:
        env = stack.design_env(database, temporal)
        worker_args = python_module("bench.bare")
        async with worker_processes(stack, workload, "bare", worker_args, env) as workers:
            client = await connect(temporal)
            base = first_base(workload)
            anchors = workload.anchors(base)
            started = time.monotonic()
            await insert_targets(stack, workload, pool, anchors)
            await bounded(
                client.start_workflow(
                    bare_loop.WORKFLOW_NAME,
                    bare_loop.BareLoop(
                        target_id=target_id,
                        url=stack.page_url(target_id),
                        anchor=anchor,
                        interval_seconds=workload.interval,
                        max_checks_per_run=workload.checks_per_run,
                    ),
                    id=bare_loop.workflow_id(target_id),
                    task_queue=TASK_QUEUE,
                )
                for target_id, anchor in zip(workload.target_ids, anchors, strict=True)
            )
            yield Running(
                workers.pids, base, anchors, started, temporal, client, workers.metrics_urls
            )


DESIGNS: dict[str, Design] = {
    "pricewatch": pricewatch,
    "pricewatch-calendar": pricewatch_calendar,
    "schedules": schedules,
    "poller": poller,
    "bare": bare,
}
# Run when --designs is not given: the four designs, each on interval grids.
DEFAULT_DESIGNS = ("pricewatch", "schedules", "poller", "bare")
