"""Every network call has a bound: a dependency that accepts the connection and then never
answers (a black hole, the chaos run's proxy) fails the call within its documented bound
(docs/failures.md, "Bounds on every network call") instead of hanging it."""

import asyncio
import time
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities import store
from activities.notify import SEND_DEADLINE, NotifyActivities, SmtpSettings
from client.temporal import DATA_CONVERTER, RPC_TIMEOUT, ensure_retention_schedule
from fetchers.http import new_client
from pricewatch.deliveries import DeliveryInput, Notice
from pricewatch.models import (
    Channel,
    ChannelKind,
    CheckKind,
    CheckResult,
    CheckStatus,
    TargetConfig,
)
from tests.chaos.proxy import Proxy, postgres_upstream, through
from tests.conftest import LOOPBACK, MailSink

SLACK = 3.0  # scheduling on a busy two-core machine


async def test_every_bound_holds_against_a_black_hole(
    database_url: str,
    pool: asyncpg.Pool,
    smtp_server: tuple[MailSink, SmtpSettings],
    time_skipping_env: WorkflowEnvironment,
) -> None:
    """The probes run side by side (each waits out its bound); any that fails is named."""
    async with asyncio.TaskGroup() as probes:
        probes.create_task(a_statement_fails_within_twice_its_timeout(database_url))
        probes.create_task(a_new_connection_gives_up_within_the_connect_timeout(database_url))
        probes.create_task(an_email_fails_within_the_send_deadline(pool, smtp_server))
        probes.create_task(our_temporal_calls_fail_within_the_rpc_timeout(time_skipping_env))


async def a_statement_fails_within_twice_its_timeout(database_url: str) -> None:
    """Without the pool's statement timeout the claim waits forever (asyncpg's default)."""
    proxy = Proxy("postgres", postgres_upstream(database_url))
    await proxy.start()
    pool = await store.create_pool(through(database_url, proxy), max_size=2)
    try:
        await pool.fetchval("SELECT 1")
        hole = asyncio.create_task(proxy.fault("blackhole", 30))
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await store.claim(
                pool, target_id="acme", work_id="acme:x", execution_id="t",
                lease=timedelta(seconds=45), on_schedule=True, slot=datetime.now(UTC),
            )  # fmt: skip
        waited = time.monotonic() - started
        assert waited <= 2 * store.STATEMENT_TIMEOUT.total_seconds() + SLACK, waited
        hole.cancel()
        await asyncio.gather(hole, return_exceptions=True)
        assert await pool.fetchval("SELECT 1") == 1, "the pool recovers once the hole closes"
    finally:
        await pool.close()
        await proxy.stop()


async def a_new_connection_gives_up_within_the_connect_timeout(database_url: str) -> None:
    proxy = Proxy("postgres", postgres_upstream(database_url))
    await proxy.start()
    hole = asyncio.create_task(proxy.fault("blackhole", 30))
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            await store.create_pool(through(database_url, proxy), max_size=1)
        waited = time.monotonic() - started
        assert waited <= store.CONNECT_TIMEOUT.total_seconds() + SLACK, waited
    finally:
        hole.cancel()
        await proxy.stop()


async def an_email_fails_within_the_send_deadline(
    pool: asyncpg.Pool, smtp_server: tuple[MailSink, SmtpSettings]
) -> None:
    _, smtp = smtp_server
    proxy = Proxy("smtp", (smtp.host, smtp.port))
    await proxy.start()
    mail = Channel(kind=ChannelKind.EMAIL, destination="ops@example.com")
    config = TargetConfig(
        target_id="acme", url="http://127.0.0.1:9/", interval_seconds=60, channels=[mail]
    )
    now = datetime.now(UTC)
    await store.sync_target(pool, config, next_slot=now, enabled=True)
    result = CheckResult(
        work_id="acme:x", slot=now, kind=CheckKind.SCHEDULED,
        status=CheckStatus.CHANGED, checked_at=now, attempt_count=1,
    )  # fmt: skip
    delivery = DeliveryInput(
        notice=Notice.CHANGED, channel_id=mail.channel_id, target_id="acme",
        url=config.url, result=result,
    )  # fmt: skip
    hole = asyncio.create_task(proxy.fault("blackhole", 30))
    try:
        async with new_client(LOOPBACK) as http:
            notify = NotifyActivities(
                pool, http, SmtpSettings("127.0.0.1", proxy.port, smtp.sender)
            )
            started = time.monotonic()
            with pytest.raises(Exception, match="SMTP"):
                await ActivityEnvironment().run(notify.deliver_notice, delivery)
        assert time.monotonic() - started <= SEND_DEADLINE.total_seconds() + SLACK
    finally:
        hole.cancel()
        await proxy.stop()


async def our_temporal_calls_fail_within_the_rpc_timeout(env: WorkflowEnvironment) -> None:
    """The worker's start-up call (the retention Schedule) must not hang a worker's start."""
    target = env.client.service_client.config.target_host
    host, _, port = target.rpartition(":")
    proxy = Proxy("temporal", (host, int(port)))
    await proxy.start()
    try:
        client = await Client.connect(proxy.address, data_converter=DATA_CONVERTER)
        hole = asyncio.create_task(proxy.fault("blackhole", 30))
        started = time.monotonic()
        with pytest.raises(RPCError):
            await ensure_retention_schedule(client, "timeouts")
        assert time.monotonic() - started <= RPC_TIMEOUT.total_seconds() + SLACK
        hole.cancel()
    finally:
        await proxy.stop()
