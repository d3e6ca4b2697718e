"""Regressions found in review: IPv6 forms that embed a private IPv4 address, a webhook to
a blocked address, and a queued check while deliveries drain before continue-as-new."""

import asyncio
import ipaddress
from datetime import timedelta

import asyncpg
import pytest
from temporalio.client import WorkflowUpdateStage
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.fetch import new_client
from activities.guard import AddressPolicy
from activities.notify import NotifyActivities, SmtpSettings
from pricewatch.models import Channel, ChannelKind, CheckResult
from tests.conftest import MailSink, PageServer, Start, WebhookReceiver
from tests.test_notify import add_target, anchor_of, deliveries, delivery, watched
from tests.test_workflow import rows, running_worker


@pytest.mark.parametrize(
    "address",
    ["64:ff9b::a9fe:a9fe", "64:ff9b::a00:1", "64:ff9b:1::a00:1", "2002:a9fe:a9fe::1", "::7f00:1"],
)
def test_ipv6_forms_embedding_private_ipv4_are_refused(address: str) -> None:
    assert AddressPolicy().refusal(ipaddress.ip_address(address)) is not None


async def test_a_webhook_to_a_blocked_address_fails_permanently_and_is_recorded(
    pool: asyncpg.Pool, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    async with new_client(AddressPolicy()) as strict:  # loopback NOT allowed: refused pre-connect
        notify = NotifyActivities(pool, strict, smtp_server[1])
        notice = delivery(config, ChannelKind.WEBHOOK)
        with pytest.raises(ApplicationError) as err:
            await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert err.value.non_retryable
    [row] = await deliveries(pool)
    assert row["status"] == "failed"


async def test_check_now_while_deliveries_drain_before_continue_as_new(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, smtp_server: tuple[MailSink, SmtpSettings],
    start: Start, task_queue: str,
) -> None:  # fmt: skip
    _, smtp = smtp_server
    env = time_skipping_env
    config = watched(
        page_server, [Channel(kind=ChannelKind.WEBHOOK, destination=webhook_receiver.url)]
    )
    webhook_receiver.answers = [503] * 100
    async with running_worker(env.client, task_queue, pool, smtp):
        handle = await start(config, start_at=await anchor_of(env), max_checks_per_run=1)
        await env.sleep(timedelta(hours=1, minutes=30))  # baseline, then CAN
        page_server.set(f"/{config.target_id}", "price 12")
        await env.sleep(timedelta(minutes=32))  # change; webhook retrying; CAN waits
        update = await handle.start_update(
            "check_now", result_type=CheckResult, wait_for_stage=WorkflowUpdateStage.ACCEPTED
        )
        await env.sleep(timedelta(hours=3))
        before = len(await rows(pool, config.target_id))
        assert before >= 5, f"schedule stalled: only {before} rows"
        result = await asyncio.wait_for(update.result(), timeout=20)
        assert result.work_id
