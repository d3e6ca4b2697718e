"""The three designs, each started on the same workload: N targets, one page each, due
every `interval` seconds on grids spread evenly over the interval, each target at the
sub-second offset `pricewatch add` gives it.
"""

import asyncio
import contextlib
import math
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
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
from bench.scheduled import WORKFLOW_NAME
from bench.stack import TASK_QUEUE, Database, Stack, TemporalServer, python_module
from pricewatch.models import MonitorState, TargetConfig
from pricewatch.slots import sub_second_offset
from pricewatch.temporal import DATA_CONVERTER, start_monitor

PRICEWATCH = str(Path(sys.executable).parent / "pricewatch")
# Starts and creates in flight at once while a design sets up its targets.
SETUP_CONCURRENCY = 32


@dataclass(frozen=True)
class Workload:
    targets: int
    interval: int
    seconds: float
    workers: int = 1  # worker processes per Temporal design

    @property
    def offered_per_second(self) -> float:
        return self.targets / self.interval

    @property
    def target_ids(self) -> list[str]:
        return [f"bench-{index:05d}" for index in range(self.targets)]

    def anchors(self, base: datetime) -> list[datetime]:
        """Each target's first due slot: spread evenly over one interval in whole seconds,
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


@dataclass(frozen=True)
class Running:
    worker_pids: list[int]
    anchors: list[datetime]
    temporal: TemporalServer | None = None
    client: Client | None = None


Design = Callable[[Stack, Workload, Database, asyncpg.Pool], AbstractAsyncContextManager[Running]]


def first_base(workload: Workload) -> datetime:
    """The first grid anchor: a whole second, after the time it takes to set targets up
    (about 25 a second on two cores: each start is a workflow task, a sync activity and
    another task), with some slack: the first cycle costs more (each run records its patch
    markers), and checks falling due while targets still register start with a backlog."""
    lead = 3 + workload.targets / 20
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


@asynccontextmanager
async def worker_processes(
    stack: Stack, workload: Workload, design: str, args: list[str], env: dict[str, str]
) -> AsyncIterator[list[int]]:
    """`--workers` worker processes of a Temporal design, all on its task queue."""
    async with contextlib.AsyncExitStack() as workers:
        pids = []
        for n in range(workload.workers):
            process = stack.process(f"{design}-worker-{n}", args, env)
            pids.append((await workers.enter_async_context(process)).pid)
        yield pids


@asynccontextmanager
async def pricewatch(
    stack: Stack, workload: Workload, database: Database, pool: asyncpg.Pool
) -> AsyncIterator[Running]:
    """The product: `pricewatch worker` with its shipped defaults, one MonitorTarget each."""
    with stack.temporal("pricewatch") as temporal:
        env = stack.design_env(database, temporal)
        async with worker_processes(
            stack, workload, "pricewatch", [PRICEWATCH, "worker"], env
        ) as pids:
            client = await connect(temporal)
            anchors = workload.anchors(first_base(workload))
            await bounded(
                start_monitor(
                    client,
                    MonitorState(
                        config=workload.config(stack, target_id),
                        start_at=anchor,
                        # TEST-ONLY: the product's minimum interval is 15 minutes
                        # (PRICEWATCH_MIN_INTERVAL); the benchmark needs seconds.
                        min_interval_seconds=workload.interval,
                    ),
                    TASK_QUEUE,
                )
                for target_id, anchor in zip(workload.target_ids, anchors, strict=True)
            )
            yield Running(pids, anchors, temporal, client)


@asynccontextmanager
async def schedules(
    stack: Stack, workload: Workload, database: Database, pool: asyncpg.Pool
) -> AsyncIterator[Running]:
    """One Schedule per target (interval spec, default policies); each action starts a
    short workflow that runs the product's check activity."""
    with stack.temporal("schedules") as temporal:
        env = stack.design_env(database, temporal)
        worker_args = python_module("bench.scheduled")
        async with worker_processes(stack, workload, "schedules", worker_args, env) as pids:
            client = await connect(temporal)
            anchors = workload.anchors(first_base(workload))
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
            yield Running(pids, anchors, temporal, client)


def schedule_id(target_id: str) -> str:
    return f"schedule-{target_id}"


@asynccontextmanager
async def poller(
    stack: Stack, workload: Workload, database: Database, pool: asyncpg.Pool
) -> AsyncIterator[Running]:
    """One asyncio process polling the table; no Temporal at all."""
    anchors = workload.anchors(first_base(workload))
    await insert_targets(stack, workload, pool, anchors)
    env = stack.design_env(database, None)
    async with stack.process("poller", python_module("bench.poller"), env) as worker:
        yield Running([worker.pid], anchors)


DESIGNS: dict[str, Design] = {
    "pricewatch": pricewatch,
    "schedules": schedules,
    "poller": poller,
}
