"""The worker process: runs `MonitorTarget` workflows and their activities."""

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
from temporalio.client import Client
from temporalio.worker import Worker

from activities.checks import CheckActivities
from activities.fetch import new_client
from activities.migrate import migrate
from pricewatch.settings import Settings
from pricewatch.temporal import connect
from workflows.monitor import MonitorTarget

# In-flight checks get this long to finish on SIGTERM before they are cancelled; a check
# that is cut off is retried by another worker and its lease keeps the slot single.
GRACEFUL_SHUTDOWN = timedelta(seconds=30)
# One cached workflow per target the worker holds: an evicted workflow replays its whole
# history on every wake-up.
MAX_CACHED_WORKFLOWS = 2000


@contextlib.asynccontextmanager
async def check_activities(database_url: str) -> AsyncIterator[CheckActivities]:
    """The worker's one pool and one HTTP client, closed on the way out."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=10)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        async with new_client() as http:
            yield CheckActivities(pool, http)
    finally:
        await pool.close()


def build_worker(client: Client, task_queue: str, activities: CheckActivities) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[MonitorTarget],
        activities=[
            activities.sync_target,
            activities.check_slot,
            activities.record_failed_slot,
            activities.remove_target,
        ],
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        max_cached_workflows=MAX_CACHED_WORKFLOWS,
    )


async def run_worker(settings: Settings) -> None:
    """Run until SIGINT or SIGTERM, then shut down gracefully."""
    client = await connect()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with check_activities(settings.resolved_database_url()) as activities:
        worker = build_worker(client, settings.task_queue, activities)
        async with worker:
            print(f"worker polling task queue {settings.task_queue!r}", flush=True)
            await stop.wait()
