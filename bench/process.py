"""What the benchmark's own worker processes share with `pricewatch worker`: its settings,
logging, tuning and client, and a clean stop on SIGINT or SIGTERM."""

import asyncio
import signal
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from client.temporal import connect
from pricewatch.settings import Settings
from workers.observability import configure_logging, core_runtime
from workers.worker import WorkerTuning


@dataclass(frozen=True)
class WorkerProcess:
    settings: Settings
    tuning: WorkerTuning
    client: Client
    stop: asyncio.Event

    def options(self) -> dict[str, Any]:
        """The product worker's task queue, cache, concurrency and shutdown grace."""
        return {
            "task_queue": self.settings.task_queue,
            "graceful_shutdown_timeout": self.tuning.shutdown_grace,
            "max_cached_workflows": self.tuning.max_cached_workflows,
            "max_concurrent_activities": self.tuning.max_activities,
            "max_concurrent_workflow_tasks": self.tuning.max_workflow_tasks,
        }

    async def serve(self, worker: Worker) -> None:
        """Poll until stopped; the line the benchmark waits for says it polls."""
        async with worker:
            print(f"worker polling task queue {self.settings.task_queue!r}", flush=True)
            await self.stop.wait()


async def worker_process() -> WorkerProcess:
    settings = Settings()
    configure_logging(settings.log_format)
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    client = await connect(core_runtime(settings.metrics_address))
    return WorkerProcess(settings, WorkerTuning.from_settings(settings), client, stop)
