"""`python -m bench.collector --workflows 1000`: what each cached workflow adds to a full
garbage collection, the pause that stops a worker holding many of them.

Starts that many `MonitorTarget` workflows on a time-skipping server against one in-process
worker that caches them all (registration answered by a stub: no Postgres, no page), lets
them go to sleep until their first slot, a day away, and times `gc.collect()` before and
after, the fastest of five each. Prints the objects and the pause per cached workflow and
the object types they add.
"""

import argparse
import asyncio
import collections
import gc
import time
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from pricewatch.models import MonitorState, RegisterTargetInput, Registration, TargetConfig
from pricewatch.names import Activity
from pricewatch.temporal import DATA_CONVERTER, register_search_attributes, start_monitor
from workers.embedded import find_binary
from workers.payloads import skip_idle_payload_walks
from workers.worker import InlineActivations
from workflows.monitor import MonitorTarget

TASK_QUEUE = "bench-collector"


class Registrations:
    def __init__(self, expected: int) -> None:
        self.left = expected
        self.done = asyncio.Event()

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


async def measure(workflows: int) -> None:
    skip_idle_payload_walks()
    quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")  # not the SDK's notices
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=DATA_CONVERTER,
        test_server_existing_path=find_binary("temporal-test-server"),
        runtime=Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet))),
    )
    registrations = Registrations(workflows)
    try:
        await register_search_attributes(env.client)
        async with Worker(
            env.client, task_queue=TASK_QUEUE, workflows=[MonitorTarget],
            activities=[registrations.register_target], max_cached_workflows=2 * workflows,
            workflow_runner=UnsandboxedWorkflowRunner(), workflow_task_executor=InlineActivations(),
        ):  # fmt: skip
            before, empty_ms = object_types(), full_collection_ms()
            start_at = datetime.now(UTC) + timedelta(hours=1)
            for index in range(workflows):
                config = TargetConfig(
                    target_id=f"collector-{index:05d}",
                    url=f"https://example.com/{index}",
                    interval_seconds=86400,
                )
                await start_monitor(env.client, MonitorState(config=config, start_at=start_at),
                                    TASK_QUEUE)  # fmt: skip
            await registrations.done.wait()
            await asyncio.sleep(2)  # every workflow's timer started: all of them asleep
            after, full_ms = object_types(), full_collection_ms()
    finally:
        await env.shutdown()
    added = after - before
    print(f"{workflows} cached workflows: {added.total() / workflows:.0f} objects each; a full "
          f"collection {empty_ms:.0f} ms with none, {full_ms:.0f} ms with them: "
          f"{(full_ms - empty_ms) * 1000 / workflows:.0f} us per cached workflow")  # fmt: skip
    for name, count in added.most_common(12):
        print(f"{count / workflows:8.1f}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.collector", description=__doc__)
    parser.add_argument("--workflows", type=int, default=1000, help="cached workflows")
    args = parser.parse_args()
    if args.workflows < 1:
        parser.error("--workflows must be positive")
    asyncio.run(measure(args.workflows))


if __name__ == "__main__":
    main()
