"""Helpers the test modules share (a module of its own, so no test module imports another):
a worker in this process for the time-skipping tests, a target on the page server, check
attempts and a slot-after-slot checker for the activity tests, targets with channels and
their deliveries for the notice tests, and the `pricewatch` CLI and worker as processes for
the end-to-end tests."""

import asyncio
import dataclasses
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities import store
from activities.checks import CheckActivities
from activities.notify import NotifyActivities, SmtpSettings
from activities.retention import Retention, RetentionActivities
from fetchers.http import new_client
from pricewatch.deliveries import DeliveryInput, Notice
from pricewatch.models import (
    Channel,
    ChannelKind,
    CheckInput,
    CheckResult,
    CheckStatus,
    TargetConfig,
)
from tests.conftest import LOOPBACK, PageServer, WebhookReceiver
from workers.embedded import free_port
from workers.worker import Activities, WorkerTuning, build_worker

HOUR = timedelta(hours=1)
# The slot the activity-level tests check (an instant on an hourly grid).
SLOT = datetime(2026, 8, 7, 8, 0, tzinfo=UTC)
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
    notify: type[NotifyActivities] = NotifyActivities,
) -> AsyncIterator[None]:
    async with new_client(LOOPBACK) as http:
        activities = Activities(
            CheckActivities(pool, http),
            notify(pool, http, smtp, LOOPBACK),
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
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        if process.returncode is None:  # timed out, or the test was cancelled: not left behind
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def remove_all(env: dict[str, str], scratch: Path, count: int) -> None:
    """Remove every target (there are `count`) with one `apply --prune` of an empty file in
    `scratch`: one process, where a `remove` each took a CLI start each (seconds apiece on a
    loaded machine)."""
    empty = scratch / "no-targets.yaml"
    await asyncio.to_thread(empty.write_text, "targets: []\n")
    code, out, err = await cli(env, "apply", str(empty), "--prune")
    assert code == 0 and f"applied {count} changes" in out, (out, err)


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
        await read_until(process, b"polling", [])  # a warning may come first (a GC pause)
        drain = asyncio.create_task(process.stdout.read())
        yield process
    finally:
        await terminated(process, grace=40)
        if drain is not None:
            logged = await drain
            if output is not None:
                output.append(logged)


async def read_until(
    process: asyncio.subprocess.Process,
    said: bytes,
    seen: list[bytes],
    within: float = 60,
    each: Callable[[bytes], object] | None = None,
) -> None:
    """Read the process's output into `seen` (each line handed to `each`) up to and
    including the first line holding `said`; fail with what it printed if it exits first."""
    assert process.stdout is not None
    async with asyncio.timeout(within):
        while True:
            line = await process.stdout.readline()
            assert line, b"the process exited:\n" + b"".join(seen)
            seen.append(line)
            if each is not None:
                each(line)
            if said in line:
                return


async def terminated(process: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM (a graceful stop) unless it exited; SIGKILL after `grace` seconds."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=grace)
        except TimeoutError:
            process.kill()
            await process.wait()


CHANGED = CheckResult(
    work_id="acme:2026-08-07T08:00:00Z",
    slot=SLOT,
    status=CheckStatus.CHANGED,
    checked_at=SLOT,
    attempt_count=1,
    result_hash="b" * 64,
    previous_hash="a" * 64,
)


async def add_target(
    pool: asyncpg.Pool, webhook: WebhookReceiver, mail_to: str = "ops@example.com"
) -> TargetConfig:
    config = TargetConfig(
        target_id="acme",
        url="https://example.com/pricing",
        interval_seconds=3600,
        channels=[
            Channel(kind=ChannelKind.WEBHOOK, destination=webhook.url),
            Channel(kind=ChannelKind.EMAIL, destination=mail_to),
        ],
    )
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    return config


def delivery(config: TargetConfig, kind: ChannelKind) -> DeliveryInput:
    channel = next(c for c in config.channels if c.kind is kind)
    return DeliveryInput(
        notice=Notice.CHANGED,
        channel_id=channel.channel_id,
        target_id=config.target_id,
        url=config.url,
        result=CHANGED,
    )


async def deliveries(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch("SELECT * FROM deliveries ORDER BY channel_id"))


def watched(page_server: PageServer, channels: list[Channel], **config: Any) -> TargetConfig:
    target_id = f"t-{uuid.uuid4().hex[:8]}"
    page_server.set(f"/{target_id}", "price 10")
    return TargetConfig(
        target_id=target_id, url=page_server.url(f"/{target_id}"), interval_seconds=3600,
        channels=channels, **config,
    )  # fmt: skip


async def anchor_of(env: WorkflowEnvironment) -> datetime:
    return (await env.get_current_time()).replace(microsecond=0) + HOUR


def attempt(number: int, heartbeats: list[object] | None = None) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, workflow_run_id="run-1", activity_id="1", attempt=number,
        current_attempt_scheduled_time=SLOT,
    )  # fmt: skip
    if heartbeats is not None:
        env.on_heartbeat = lambda *details: heartbeats.append(details)
    return env


def local_attempt() -> ActivityEnvironment:
    env = attempt(1)
    env.info = dataclasses.replace(env.info, is_local=True)
    return env


class Checker:
    """Runs the real check activity slot after slot for one target."""

    def __init__(self, pool: asyncpg.Pool, http: httpx.AsyncClient, config: TargetConfig) -> None:
        self.activities = CheckActivities(pool, http, snapshots_kept=2)
        self.config = config
        self.slot = SLOT

    async def check(self) -> CheckResult:
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, current_attempt_scheduled_time=self.slot)
        check = CheckInput.of(self.config, self.slot)
        result: CheckResult = await env.run(self.activities.check_slot, check)
        assert result.next_slot is not None
        self.slot = result.next_slot
        return result


Build = Callable[[asyncpg.Connection], Awaitable[object]]


@asynccontextmanager
async def built(server: str, build: Build) -> AsyncIterator[asyncpg.Connection]:
    """A new database on the server, built by `build`, dropped afterwards."""
    name = f"schema_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        conn = await asyncpg.connect(server, database=name)
        try:
            await build(conn)
            yield conn
        finally:
            await conn.close()
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


@asynccontextmanager
async def serve_process(env: dict[str, str], *args: str) -> AsyncIterator[str]:
    """`pricewatch serve` as its own process on a free loopback port: its base URL once it
    answers. SIGTERM on the way out."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        PRICEWATCH, "serve", "--port", str(port), *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    base = f"http://127.0.0.1:{port}"
    drain = None
    try:
        async with asyncio.timeout(60):
            line = await process.stdout.readline()
            assert line.startswith(b"dashboard:"), line + await process.stdout.read()
        drain = asyncio.create_task(process.stdout.read())
        yield base
    finally:
        await terminated(process, grace=20)
        logged = b"" if drain is None else await drain
    assert b"Traceback" not in logged, logged.decode()  # every failure was an answer


async def python_output(*args: str, within: float, env: dict[str, str] | None = None) -> str:
    """What `python ARGS` printed (stdout and stderr together); it must exit 0 in time, and
    is killed if it does not."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(within):
            out, _ = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    text = out.decode(errors="replace")
    assert process.returncode == 0, text[-3000:]
    return text


async def dies_at_the_record(*args: object, **kwargs: object) -> None:
    """In place of `NotifyActivities._record`: the worker dies after the send, before `sent`
    is recorded (a cancel is no crash: a cancelled attempt records its send first)."""
    raise ConnectionResetError("the worker died here: sent, not recorded")
