"""`python -m bench.collector --workflows 1000`: what each cached workflow adds to a full
garbage collection, the pause that stops a worker holding many of them.

Starts that many `MonitorTarget` workflows on a time-skipping server against one in-process
worker that caches them all (registration answered by a stub: no Postgres, no page), lets
them go to sleep until their first slot, a day away, and times `gc.collect()` before and
after, the fastest of five each. Then starts as many again, which evicts the first ones, and
counts what they leave for the collector: every object of an evicted workflow sits in a
reference cycle (its event loop, tasks and coroutines refer to each other), so once it is
old only a full collection frees it, and `gc.freeze()` would keep it for good. Prints the
objects and the pause per cached workflow, the object types they add, and the cycles'
objects per evicted workflow.
"""

import argparse
import asyncio
import collections
import gc
import os
import sys
import time
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from client.temporal import DATA_CONVERTER, register_search_attributes, start_monitor
from pricewatch.models import MonitorState, RegisterTargetInput, Registration, TargetConfig
from pricewatch.names import Activity
from workers.embedded import find_binary
from workers.payloads import skip_idle_payload_walks
from workers.worker import InlineActivations
from workflows.monitor import MonitorTarget

TASK_QUEUE = "bench-collector"


class Registrations:
    def __init__(self) -> None:
        self.left = 0
        self.done = asyncio.Event()

    def expect(self, workflows: int) -> None:
        self.left = workflows
        self.done.clear()

    @activity.defn(name=Activity.REGISTER_TARGET)
    async def register_target(self, request: RegisterTargetInput) -> Registration:
        self.left -= 1
        if self.left == 0:
            self.done.set()
        tomorrow = datetime.now(UTC) + timedelta(days=1)
        return Registration(anchor=request.anchor, next_slot=tomorrow, created=True)


def full_collection_ms() -> float:
    pauses = []
    for _ in range(5):
        started = time.perf_counter()
        gc.collect()
        pauses.append((time.perf_counter() - started) * 1000)
    return min(pauses)


def object_types() -> collections.Counter[str]:
    return collections.Counter(type(o).__name__ for o in gc.get_objects())


async def start_sleeping(
    env: WorkflowEnvironment, registrations: Registrations, prefix: str, workflows: int
) -> None:
    registrations.expect(workflows)
    start_at = datetime.now(UTC) + timedelta(hours=1)
    for index in range(workflows):
        config = TargetConfig(
            target_id=f"{prefix}-{index:05d}",
            url=f"https://example.com/{index}",
            interval_seconds=86400,
        )
        await start_monitor(env.client, MonitorState(config=config, start_at=start_at),
                            TASK_QUEUE)  # fmt: skip
    await registrations.done.wait()


async def cyclic_garbage_of_evicted(
    env: WorkflowEnvironment, registrations: Registrations, workflows: int
) -> int:
    """Start as many again: the cache holds only `workflows`, so the first ones are evicted.
    Returns what the collector then finds unreachable: an evicted workflow's objects refer to
    each other, so reference counting alone never frees them."""
    gc.collect()
    gc.disable()
    try:
        await start_sleeping(env, registrations, "evicting", workflows)
        await asyncio.sleep(2)
        return gc.collect()
    finally:
        gc.enable()


async def measure(workflows: int) -> None:
    skip_idle_payload_walks()
    quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")  # not the SDK's notices
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=DATA_CONVERTER,
        test_server_existing_path=find_binary("temporal-test-server"),
        runtime=Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet))),
    )
    registrations = Registrations()
    try:
        await register_search_attributes(env.client)
        async with Worker(
            env.client, task_queue=TASK_QUEUE, workflows=[MonitorTarget],
            activities=[registrations.register_target], max_cached_workflows=workflows,
            workflow_runner=UnsandboxedWorkflowRunner(), workflow_task_executor=InlineActivations(),
        ):  # fmt: skip
            before, empty_ms = object_types(), full_collection_ms()
            await start_sleeping(env, registrations, "cached", workflows)
            await asyncio.sleep(2)  # every workflow's timer started: all of them asleep
            after, full_ms = object_types(), full_collection_ms()
            evicted_garbage = await cyclic_garbage_of_evicted(env, registrations, workflows)
    finally:
        await env.shutdown()
    added = after - before
    print(f"{workflows} cached workflows: {added.total() / workflows:.0f} objects each; a full "
          f"collection {empty_ms:.0f} ms with none, {full_ms:.0f} ms with them: "
          f"{(full_ms - empty_ms) * 1000 / workflows:.0f} us per cached workflow")  # fmt: skip
    print(f"evicting {workflows} left {evicted_garbage / workflows:.0f} objects each in reference "
          f"cycles, for the collector to free")  # fmt: skip
    for name, count in added.most_common(12):
        print(f"{count / workflows:8.1f}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.collector", description=__doc__)
    parser.add_argument("--workflows", type=int, default=1000, help="cached workflows")
    args = parser.parse_args()
    if args.workflows < 1:
        parser.error("--workflows must be positive")
    asyncio.run(measure(args.workflows))
    # As `surfaces.cli.main`: skip interpreter teardown, which temporalio's native threads
    # can abort (temporalio/sdk-python#300; here a third of runs once the cache has evicted).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
