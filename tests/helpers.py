"""Helpers the test modules share (a module of its own, so no test module imports another):
a worker in this process for the time-skipping tests, a target on the page server, and the
`pricewatch` CLI and worker as processes for the end-to-end tests."""

import asyncio
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import asyncpg
from temporalio.client import Client

from activities.checks import CheckActivities
from activities.fetch import new_client
from activities.notify import NotifyActivities, SmtpSettings
from activities.retention import Retention, RetentionActivities
from pricewatch.models import TargetConfig
from tests.conftest import LOOPBACK, PageServer
from workers.worker import Activities, WorkerTuning, build_worker

HOUR = timedelta(hours=1)
NO_SMTP = SmtpSettings(host="127.0.0.1", port=9, sender="pricewatch@localhost")
# Tests run workflows in the sandbox, which stops a non-deterministic call where it happens.
DEFAULT_TUNING = WorkerTuning(sandboxed=True)
PRICEWATCH = str(Path(sys.executable).parent / "pricewatch")


@asynccontextmanager
async def running_worker(
    client: Client,
    task_queue: str,
    pool: asyncpg.Pool,
    smtp: SmtpSettings = NO_SMTP,
    tuning: WorkerTuning = DEFAULT_TUNING,
) -> AsyncIterator[None]:
    async with new_client(LOOPBACK) as http:
        activities = Activities(
            CheckActivities(pool, http),
            NotifyActivities(pool, http, smtp),
            RetentionActivities(pool, Retention()),
        )
        async with build_worker(client, task_queue, activities, tuning):
            yield


def new_target(page_server: PageServer, interval: timedelta = HOUR) -> TargetConfig:
    target_id = f"t-{uuid.uuid4().hex[:8]}"
    page_server.set(f"/{target_id}", "price 10")
    return TargetConfig(
        target_id=target_id,
        url=page_server.url(f"/{target_id}"),
        interval_seconds=int(interval.total_seconds()),
    )


async def rows(pool: asyncpg.Pool, target_id: str) -> list[asyncpg.Record]:
    return list(
        await pool.fetch(
            "SELECT * FROM source_checks WHERE target_id = $1 ORDER BY scheduled_for", target_id
        )
    )


async def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        PRICEWATCH, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@asynccontextmanager
async def worker_process(
    env: dict[str, str], output: list[bytes] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`pricewatch worker` as its own process; SIGTERM (graceful) on the way out, which
    must exit 0. Its output is drained all along (a full pipe would stall the worker's
    logging) into `output` if given.
    """
    process = await asyncio.create_subprocess_exec(
        PRICEWATCH,
        "worker",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    drain = None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        assert b"polling" in line, line
        drain = asyncio.create_task(process.stdout.read())
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout=40)
            except TimeoutError:
                process.kill()
                await process.wait()
        if drain is not None:
            logged = await drain
            if output is not None:
                output.append(logged)
