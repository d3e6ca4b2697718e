"""The worker process: runs `MonitorTarget` workflows and their activities."""

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
from temporalio.client import Client
from temporalio.worker import Worker

from activities.checks import CheckActivities
from activities.fetch import new_client
from activities.guard import AddressPolicy
from activities.migrate import migrate
from activities.notify import NotifyActivities, SmtpSettings
from pricewatch.settings import Settings
from pricewatch.temporal import connect
from workflows.monitor import MonitorTarget

# In-flight checks get this long to finish on SIGTERM before they are cancelled; a check
# that is cut off is retried by another worker and its lease keeps the slot single.
GRACEFUL_SHUTDOWN = timedelta(seconds=30)
# One cached workflow per target the worker holds: an evicted workflow replays its whole
# history on every wake-up.
MAX_CACHED_WORKFLOWS = 2000


@dataclass(frozen=True)
class Activities:
    checks: CheckActivities
    notify: NotifyActivities


def smtp_settings(settings: Settings) -> SmtpSettings:
    password = settings.smtp_password.get_secret_value() if settings.smtp_password else None
    return SmtpSettings(
        host=settings.smtp_host,
        port=settings.smtp_port,
        sender=settings.smtp_sender,
        username=settings.smtp_username,
        password=password,
        use_tls=settings.smtp_tls,
    )


def address_policy(settings: Settings) -> AddressPolicy:
    return AddressPolicy.allowing(settings.allow_networks.split(","))


@contextlib.asynccontextmanager
async def worker_activities(
    database_url: str, smtp: SmtpSettings, policy: AddressPolicy, snapshots_kept: int = 50
) -> AsyncIterator[Activities]:
    """The worker's one pool and one HTTP client, shared by all activities, closed on exit."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=10)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        async with new_client(policy) as http:
            yield Activities(
                CheckActivities(pool, http, snapshots_kept), NotifyActivities(pool, http, smtp)
            )
    finally:
        await pool.close()


def build_worker(client: Client, task_queue: str, activities: Activities) -> Worker:
    checks, notify = activities.checks, activities.notify
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[MonitorTarget],
        activities=[
            checks.sync_target,
            checks.check_slot,
            checks.record_failed_slot,
            checks.remove_target,
            notify.deliver_notice,
            notify.record_delivery_failed,
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
    database_url = settings.resolved_database_url()
    policy = address_policy(settings)
    async with worker_activities(
        database_url, smtp_settings(settings), policy, settings.snapshot_retention
    ) as activities:
        worker = build_worker(client, settings.task_queue, activities)
        async with worker:
            print(f"worker polling task queue {settings.task_queue!r}", flush=True)
            await stop.wait()
