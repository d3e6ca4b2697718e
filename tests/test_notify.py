"""Notices: signed webhooks and email, each channel told once per change, with real
receivers on 127.0.0.1 (signatures verified by the reference `standardwebhooks` package,
mail by an aiosmtpd server) and real Postgres."""

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg
import httpx
import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities.notify import SENDERS, NotifyActivities, SmtpSettings
from pricewatch import policy
from pricewatch.deliveries import DeliveryInput, DeliveryResult, Notice
from pricewatch.models import Channel, ChannelKind
from pricewatch.names import Activity
from pricewatch.policy import PERMANENT_DELIVERY_ERROR
from tests.conftest import Hold, MailSink, PageServer, Start, WebhookReceiver
from tests.helpers import (
    CHANGED,
    add_target,
    anchor_of,
    deliveries,
    delivery,
    dies_at_the_record,
    rows,
    running_worker,
    watched,
)


async def test_every_channel_kind_has_a_sender_that_calls_its_method_as_it_did(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The table covers every kind, and each kind's send and test send reach the one method
    with the arguments the old if/elif gave it (a test send disables nothing)."""
    assert set(SENDERS) == set(ChannelKind)
    notify = NotifyActivities(
        cast(asyncpg.Pool, None), cast(httpx.AsyncClient, None), SmtpSettings("h", 25, "s")
    )
    Call = tuple[str, tuple[object, ...], dict[str, object]]
    calls: list[Call] = []
    for method in ("_post_webhook", "_send_email", "_notify_service"):

        async def called(*args: object, _name: str = method, **kwargs: object) -> None:
            calls.append((_name, args, kwargs))

        monkeypatch.setattr(notify, method, called)
    d = DeliveryInput(
        notice=Notice.CHANGED, channel_id="c1", target_id="t1", url="https://e.test/",
        result=CHANGED,
    )  # fmt: skip
    notice: dict[str, object] = {"type": "page.changed"}
    row: Any = {"destination": "dest", "secret": "whsec_x"}
    now = datetime(2026, 1, 1, tzinfo=UTC)
    expected: dict[ChannelKind, tuple[Call, Call]] = {
        ChannelKind.WEBHOOK: (
            ("_post_webhook", (d, notice, "dest", "whsec_x", now), {}),
            ("_post_webhook", (d, notice, "dest", "whsec_x", now), {"disable": False}),
        ),
        ChannelKind.EMAIL: (
            ("_send_email", (d, notice, "dest"), {}),
            ("_send_email", (d, notice, "dest"), {"test_notice": True}),
        ),
        ChannelKind.APPRISE: (
            ("_notify_service", ("t1", "c1", notice, row), {}),
            ("_notify_service", ("t1", "c1", notice, row), {"test": True}),
        ),
    }
    assert set(expected) == set(ChannelKind)
    for kind, (send, test) in expected.items():
        calls.clear()
        await SENDERS[kind].send(notify, d, notice, row, now)
        await SENDERS[kind].test(notify, d, notice, row, now)
        assert calls == [send, test], kind


async def test_a_webhook_is_signed_sent_once_and_never_again(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp_server[1])
    notice = delivery(config, ChannelKind.WEBHOOK)
    first = await ActivityEnvironment().run(notify.deliver_notice, notice)
    again = await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert (first.status, first.attempt_count, first.already_sent) == ("sent", 1, False)
    assert again.already_sent
    assert len(webhook_receiver.received) == 1  # verified by standardwebhooks on arrival
    webhook_id, payload = webhook_receiver.received[0]
    assert webhook_id == f"msg_{notice.delivery_id}"
    assert payload["work_id"] == CHANGED.work_id
    assert (payload["previous_hash"], payload["new_hash"]) == ("a" * 64, "b" * 64)


async def test_an_email_carries_a_message_id_from_the_work_id_and_is_sent_once(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    sink, smtp = smtp_server
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp)
    notice = delivery(config, ChannelKind.EMAIL)
    await ActivityEnvironment().run(notify.deliver_notice, notice)
    await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert len(sink.messages) == 1
    message = sink.messages[0]
    assert message["Message-ID"] == f"<{notice.delivery_id}@pricewatch>"
    assert message["To"] == "ops@example.com"
    assert "acme changed" in message["Subject"]


async def test_a_failing_webhook_is_retried_on_its_row_then_sent(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp_server[1])
    notice = delivery(config, ChannelKind.WEBHOOK)
    webhook_receiver.answers = [500]
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert not failed.value.non_retryable
    [row] = await deliveries(pool)
    # Still owed, not settled: a run that replaces this one (a reset) tells it again.
    assert (row["status"], row["attempt_count"]) == ("pending", 1)
    assert "HTTP 500" in row["last_error"]
    sent = await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert (sent.status, sent.attempt_count) == ("sent", 2)
    assert len(set(webhook_receiver.ids())) == 1, "every re-send keeps the webhook-id"


@pytest.mark.parametrize(("answer", "retryable"), [(429, True), (503, True), (400, False)])
async def test_webhook_answers_are_classified(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings], answer: int, retryable: bool,
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    webhook_receiver.answers = [answer]
    notify = NotifyActivities(pool, http, smtp_server[1])
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(
            notify.deliver_notice, delivery(config, ChannelKind.WEBHOOK)
        )
    assert failed.value.non_retryable is not retryable


async def test_a_gone_webhook_disables_its_channel(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    webhook_receiver.answers = [410]
    notify = NotifyActivities(pool, http, smtp_server[1])
    notice = delivery(config, ChannelKind.WEBHOOK)
    for _ in range(2):
        with pytest.raises(ApplicationError) as failed:
            await ActivityEnvironment().run(notify.deliver_notice, notice)
        assert failed.value.type == PERMANENT_DELIVERY_ERROR
    assert len(webhook_receiver.received) == 1, "a disabled endpoint is not called again"
    reason = await pool.fetchval("SELECT disabled_reason FROM channels WHERE kind = 'webhook'")
    assert "410" in reason


@pytest.mark.parametrize(
    ("answer", "retryable"),
    [("451 4.3.0 try again later", True), ("550 5.1.1 no such user", False)],
)
async def test_smtp_answers_are_classified(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings], answer: str, retryable: bool,
) -> None:  # fmt: skip
    sink, smtp = smtp_server
    config = await add_target(pool, webhook_receiver)
    sink.answers = [answer]
    notify = NotifyActivities(pool, http, smtp)
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(notify.deliver_notice, delivery(config, ChannelKind.EMAIL))
    assert failed.value.non_retryable is not retryable
    assert sink.messages == []


async def test_a_crash_between_send_and_record_resends_once_with_the_same_id(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The attempt dies after the receiver got the POST but before `sent` was recorded:
    the next attempt (once the sending lease lapsed) re-sends once, same webhook-id."""
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp_server[1])
    notice = delivery(config, ChannelKind.WEBHOOK)
    monkeypatch.setattr(notify, "_record", dies_at_the_record)
    with pytest.raises(ConnectionResetError):
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    monkeypatch.undo()
    [row] = await deliveries(pool)
    assert row["status"] != "sent"
    await pool.execute("UPDATE deliveries SET sending_until = now() - interval '1 s'")
    resent = await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert resent.status == "sent"
    assert webhook_receiver.ids() == [f"msg_{notice.delivery_id}"] * 2
    assert (await ActivityEnvironment().run(notify.deliver_notice, notice)).already_sent
    assert len(webhook_receiver.received) == 2


async def test_a_cancelled_attempt_records_its_send_and_is_never_resent(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    """Cancelled mid-send (its worker shutting down past the grace, its timeout passed),
    the attempt first records what the send did: the next one finds the notice sent."""
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp_server[1])
    notice = delivery(config, ChannelKind.WEBHOOK)
    webhook_receiver.hold = hold = Hold(arrived=asyncio.Event(), release=asyncio.Event())
    cancelled = asyncio.create_task(ActivityEnvironment().run(notify.deliver_notice, notice))
    await asyncio.wait_for(hold.arrived.wait(), timeout=10)
    cancelled.cancel()
    await asyncio.sleep(0.2)
    assert not cancelled.done(), "it waits for the send in flight"
    hold.release.set()  # the receiver answers 204
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    [row] = await deliveries(pool)
    assert (row["status"], row["attempt_count"]) == ("sent", 1)
    await pool.execute("UPDATE deliveries SET sending_until = now() - interval '1 s'")
    assert (await ActivityEnvironment().run(notify.deliver_notice, notice)).already_sent
    assert len(webhook_receiver.received) == 1


# The workflow: who is told what, on the time-skipping server.


async def channels_for(webhook: WebhookReceiver) -> list[Channel]:
    return [
        Channel(kind=ChannelKind.WEBHOOK, destination=webhook.url),
        Channel(kind=ChannelKind.EMAIL, destination=f"ops-{uuid.uuid4().hex[:6]}@example.com"),
    ]


async def test_a_change_is_told_once_per_channel_and_nothing_else_is(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, smtp_server: tuple[MailSink, SmtpSettings],
    start: Start, task_queue: str,
) -> None:  # fmt: skip
    sink, smtp = smtp_server
    env = time_skipping_env
    config = watched(page_server, await channels_for(webhook_receiver))
    async with running_worker(env.client, task_queue, pool, smtp):
        handle = await start(config, start_at=await anchor_of(env))
        await env.sleep(timedelta(hours=3, minutes=30))  # baseline + unchanged: silence
        assert webhook_receiver.received == [] and sink.messages == []
        page_server.set(f"/{config.target_id}", "price 12")
        await env.sleep(timedelta(hours=3))
        history = await handle.fetch_history()
    changed = [r for r in await rows(pool, config.target_id) if r["status"] == "changed"]
    assert len(changed) == 1
    assert [p["work_id"] for _, p in webhook_receiver.received] == [changed[0]["work_id"]]
    assert len(sink.messages) == 1
    assert [(r["status"], r["notice"]) for r in await deliveries(pool)] == [("sent", "changed")] * 2
    secret = await pool.fetchval("SELECT secret FROM channels WHERE kind = 'webhook'")
    assert secret.startswith("whsec_")
    assert secret not in history.to_json(), "a secret leaked into the workflow history"
    assert secret.removeprefix("whsec_") not in history.to_json()


async def test_a_webhook_failing_three_times_is_sent_once_and_email_once(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, smtp_server: tuple[MailSink, SmtpSettings],
    start: Start, task_queue: str,
) -> None:  # fmt: skip
    sink, smtp = smtp_server
    env = time_skipping_env
    config = watched(page_server, await channels_for(webhook_receiver))
    webhook_receiver.answers = [500, 500, 500]
    async with running_worker(env.client, task_queue, pool, smtp):
        await start(config, start_at=await anchor_of(env))
        await env.sleep(timedelta(hours=1, minutes=30))
        page_server.set(f"/{config.target_id}", "price 12")
        await env.sleep(timedelta(hours=2))
    assert len(webhook_receiver.received) == 4
    assert len(set(webhook_receiver.ids())) == 1
    assert len(sink.messages) == 1
    by_kind = {r["channel_id"].split("-")[0]: r for r in await deliveries(pool)}
    assert (by_kind["webhook"]["status"], by_kind["webhook"]["attempt_count"]) == ("sent", 4)
    assert (by_kind["email"]["status"], by_kind["email"]["attempt_count"]) == ("sent", 1)


async def test_a_channel_that_always_fails_is_recorded_and_the_others_carry_on(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, smtp_server: tuple[MailSink, SmtpSettings],
    start: Start, task_queue: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Rounds of 8 attempts (about 15 min each) follow one another until NOTICE_TRIED_FOR
    (40 min here): three rounds, then `failed`."""
    monkeypatch.setattr(policy, "NOTICE_TRIED_FOR", timedelta(minutes=40))
    sink, smtp = smtp_server
    env = time_skipping_env
    config = watched(page_server, await channels_for(webhook_receiver))
    path = f"/{config.target_id}"
    webhook_receiver.answers = [503] * 100
    async with running_worker(env.client, task_queue, pool, smtp):
        await start(config, start_at=await anchor_of(env))
        await env.sleep(timedelta(hours=1, minutes=30))
        page_server.set(path, "price 12")
        await env.sleep(timedelta(hours=1))
        page_server.set(path, "price 14")
        await env.sleep(timedelta(hours=2))  # its slot, then three rounds
    records = await rows(pool, config.target_id)
    assert [r["status"] for r in records] == ["unchanged", "changed", "changed", "unchanged"]
    failed = [r for r in await deliveries(pool) if r["channel_id"].startswith("webhook")]
    assert [(r["status"], r["attempt_count"]) for r in failed] == [("failed", 24)] * 2
    assert "503" in failed[0]["last_error"]
    assert len(sink.messages) == 2, "email was told about both changes"


async def test_failing_and_recovered_are_each_told_once(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, smtp_server: tuple[MailSink, SmtpSettings],
    start: Start, task_queue: str,
) -> None:  # fmt: skip
    _, smtp = smtp_server
    env = time_skipping_env
    channels = [Channel(kind=ChannelKind.WEBHOOK, destination=webhook_receiver.url)]
    config = watched(page_server, channels, unhealthy_after=2)
    path = f"/{config.target_id}"
    async with running_worker(env.client, task_queue, pool, smtp):
        await start(config, start_at=await anchor_of(env))
        await env.sleep(timedelta(hours=1, minutes=30))
        page_server.set(path, "gone", status=404)
        await env.sleep(timedelta(hours=4))  # four failed slots: one "failing" notice
        page_server.set(path, "price 10")
        await env.sleep(timedelta(hours=2))  # good again: one "recovered" notice
    types = [payload["type"] for _, payload in webhook_receiver.received]
    assert types == ["page.failing", "page.recovered"]


class LosesItsWorkers(NotifyActivities):
    """The first `lost` attempts never end (their worker died or froze with them: no channel
    answered), as a soak under load had it eight times in a row for one notice."""

    lost = 2

    @activity.defn(name=Activity.DELIVER_NOTICE)
    async def deliver_notice(self, delivery: DeliveryInput) -> DeliveryResult:
        if self.lost > 0:
            self.lost -= 1
            await asyncio.sleep(3600)
        return await super().deliver_notice(delivery)


async def test_a_notice_whose_workers_were_lost_every_attempt_is_tried_again_and_sent(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, start: Start, task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Timed-out attempts are no verdict on the channel: it is not recorded `failed` with
    `activity StartToClose timeout`; a new round of attempts sends it, once. (A round of two
    1 s attempts here: a running activity holds the test server's clock, so eight 10 s
    timeouts would take real minutes.)"""
    monkeypatch.setattr(policy, "DELIVERY_TIMEOUT", timedelta(seconds=1))
    retry = dataclasses.replace(policy.DELIVERY_RETRY, maximum_attempts=2)
    monkeypatch.setattr(policy, "DELIVERY_RETRY", retry)
    env = time_skipping_env
    config = watched(
        page_server, [Channel(kind=ChannelKind.WEBHOOK, destination=webhook_receiver.url)]
    )
    async with running_worker(env.client, task_queue, pool, notify=LosesItsWorkers):
        await start(config, start_at=await anchor_of(env))
        await env.sleep(timedelta(hours=1, minutes=30))
        page_server.set(f"/{config.target_id}", "price 12")
        await env.sleep(timedelta(hours=1))
    assert [(r["status"], r["attempt_count"]) for r in await deliveries(pool)] == [("sent", 1)]
    assert len(webhook_receiver.received) == 1


async def test_a_receiver_down_for_longer_than_a_round_is_told_in_the_next(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, start: Start, task_queue: str,
) -> None:  # fmt: skip
    """A round's 8 transient answers are no verdict: the next round sends it, once."""
    env = time_skipping_env
    webhook = Channel(kind=ChannelKind.WEBHOOK, destination=webhook_receiver.url)
    config = watched(page_server, [webhook])
    webhook_receiver.answers = [503] * 8
    async with running_worker(env.client, task_queue, pool):
        await start(config, start_at=await anchor_of(env))
        await env.sleep(timedelta(hours=1, minutes=30))
        page_server.set(f"/{config.target_id}", "price 12")
        await env.sleep(timedelta(hours=1))
    assert [(r["status"], r["attempt_count"]) for r in await deliveries(pool)] == [("sent", 9)]
    assert len(set(webhook_receiver.ids())) == 1
