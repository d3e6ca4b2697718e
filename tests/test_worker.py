"""The worker as shipped runs workflow activations inline on its event loop; sandboxed (the
tests), on the SDK's threads."""

import asyncio
import ipaddress
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
import temporalio.bridge.worker
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.checks import CheckActivities
from activities.notify import NotifyActivities
from activities.retention import Retention, RetentionActivities
from fetchers.http import new_client
from pricewatch.settings import DEV_ALLOW_NETWORKS_FILE, Settings
from tests.conftest import LOOPBACK, with_database
from tests.helpers import NO_SMTP
from workers.worker import (
    Activities,
    InlineActivations,
    WorkerTuning,
    address_policy,
    build_worker,
    worker_activities,
)


@workflow.defn(sandboxed=False)
class WhereActivated:
    """Test-only: reports the thread each of its two activations ran on."""

    @workflow.run
    async def run(self) -> list[int]:
        threads = [threading.get_ident()]
        await workflow.sleep(timedelta(days=1))
        threads.append(threading.get_ident())
        return threads


async def test_activations_run_on_the_event_loop_and_leave_it_running(client: Client) -> None:
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    loop = asyncio.get_running_loop()
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[WhereActivated],
        workflow_runner=UnsandboxedWorkflowRunner(),
        workflow_task_executor=InlineActivations(),
    ):
        threads = await client.execute_workflow(
            WhereActivated.run, id=f"where-{task_queue}", task_queue=task_queue
        )
        # An activation clears the running loop on exit; the worker's must be back.
        assert asyncio.get_running_loop() is loop
        await asyncio.sleep(0)
    assert threads == [threading.get_ident()] * 2


async def test_only_the_sandboxed_worker_keeps_the_sdks_threads(
    client: Client, pool: asyncpg.Pool
) -> None:
    async with new_client(LOOPBACK) as http:
        activities = Activities(
            CheckActivities(pool, http),
            NotifyActivities(pool, http, NO_SMTP),
            RetentionActivities(pool, Retention()),
        )
        shipped = build_worker(client, "tq-shipped", activities, WorkerTuning())
        sandboxed = build_worker(client, "tq-sandboxed", activities, WorkerTuning(sandboxed=True))
    assert isinstance(shipped.config()["workflow_task_executor"], InlineActivations)
    assert sandboxed.config()["workflow_task_executor"] is None


async def test_building_a_worker_installs_the_payload_walk_skip(
    client: Client, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("decode_activation", "encode_completion"):
        walk = getattr(temporalio.bridge.worker, name)
        monkeypatch.setattr(temporalio.bridge.worker, name, getattr(walk, "__wrapped_walk__", walk))
    async with new_client(LOOPBACK) as http:
        activities = Activities(
            CheckActivities(pool, http),
            NotifyActivities(pool, http, NO_SMTP),
            RetentionActivities(pool, Retention()),
        )
        build_worker(client, "tq-skip", activities, WorkerTuning())
    assert hasattr(temporalio.bridge.worker.decode_activation, "__wrapped_walk__")
    assert hasattr(temporalio.bridge.worker.encode_completion, "__wrapped_walk__")


async def test_a_worker_told_not_to_migrate_leaves_the_schema_alone(
    postgres_server_url: str,
) -> None:
    """PRICEWATCH_MIGRATE=false: a one-shot job migrates; workers only connect."""
    name = f"empty_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres_server_url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        url = with_database(postgres_server_url, name)
        ledger = "SELECT to_regclass('schema_migrations') IS NOT NULL"
        async with worker_activities(url, NO_SMTP, LOOPBACK, migrate_schema=False) as activities:
            assert not await activities.checks.pool.fetchval(ledger)
        async with worker_activities(url, NO_SMTP, LOOPBACK) as activities:
            assert await activities.checks.pool.fetchval(ledger)
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


def test_beside_pricewatch_dev_the_guard_allows_what_dev_allows(tmp_path: Path) -> None:
    """`pricewatch try --render` in a second terminal reads the demo's loopback pages, as
    `add` and a plain `try` do: the policy takes the dev stack's networks from its data dir."""
    loopback = ipaddress.ip_address("127.0.0.1")
    alone = Settings(data_dir=tmp_path, allow_networks="", database_url="")
    assert address_policy(alone).refusal(loopback) is not None
    (tmp_path / DEV_ALLOW_NETWORKS_FILE).write_text("127.0.0.1/32\n")
    assert address_policy(alone).refusal(loopback) is None
    configured = Settings(data_dir=tmp_path, allow_networks="", database_url="postgresql://x/y")
    assert address_policy(configured).refusal(loopback) is not None, "a deployment: its own"
