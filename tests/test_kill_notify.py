"""Precise tests for deliveries (activities/notify.py) that `make mutants` showed missing:
each kills mutants no other test noticed. The activity runs in-process against real
Postgres and real receivers on 127.0.0.1 (conftest), one call at a time."""

import asyncio
import json
import logging
import time
from datetime import UTC, datetime, timedelta
from threading import Event

import asyncpg
import httpx
import pytest
from pydantic import SecretStr
from standardwebhooks.webhooks import Webhook
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import freezes, services, store
from activities import notify as notify_module
from activities.notify import NotifyActivities, SmtpSettings, _subject, notice_body
from activities.queries import QUERIES
from fetchers.guard import AddressPolicy
from fetchers.http import new_client
from pricewatch import isolated
from pricewatch.deliveries import DeliveryFailureInput, DeliveryInput, Notice
from pricewatch.models import Channel, ChannelKind, TargetConfig
from pricewatch.policy import PERMANENT_DELIVERY_ERROR, TRANSIENT_DELIVERY_ERROR
from pricewatch.prices import move_line
from pricewatch.settings import Settings
from tests.conftest import LOOPBACK, Held, Hold, MailSink, Services, WebhookReceiver
from tests.helpers import CHANGED, NO_SMTP, SLOT, add_target, deliveries, delivery

EMAIL_ONLY = TargetConfig(
    target_id="acme", url="https://example.com/pricing", interval_seconds=3600,
    channels=[Channel(kind=ChannelKind.EMAIL, destination="ops@example.com")],
)  # fmt: skip
MOVE: dict[str, object] = {
    "name": "Pro", "old": "12.00", "new": "13.00", "currency": "EUR", "change": "1.00",
    "change_percent": "8.33", "direction": "rise", "rules": None,
}  # fmt: skip


def test_the_notice_body_names_every_field() -> None:
    """The JSON every channel gets: each field from where it belongs; `prices` only for a
    change in price mode."""
    base = delivery(EMAIL_ONLY, ChannelKind.EMAIL).model_copy(update={"failure_streak": 3})
    body = notice_body(base, "was 12, now 13", None)
    assert body == {
        "type": "page.changed",
        "target_id": "acme",
        "url": "https://example.com/pricing",
        "slot": "2026-08-07T08:00:00Z",
        "work_id": CHANGED.work_id,
        "status": "changed",
        "previous_hash": "a" * 64,
        "new_hash": "b" * 64,
        "checked_at": CHANGED.checked_at.isoformat(),
        "error": None,
        "failure_streak": 3,
        "excerpt": "was 12, now 13",
    }
    priced = notice_body(base, None, [MOVE])
    assert (priced["type"], priced["prices"]) == ("price.changed", [MOVE])
    failing = notice_body(base.model_copy(update={"notice": Notice.FAILING}), None, [MOVE])
    assert failing["type"] == "page.failing" and "prices" not in failing


def test_each_notice_has_its_own_subject() -> None:
    notice = delivery(EMAIL_ONLY, ChannelKind.EMAIL)
    slot = "(2026-08-07T08:00:00Z)"
    assert _subject(notice) == f"[pricewatch] acme changed {slot}"
    assert _subject(notice, price=True) == f"[pricewatch] acme price changed {slot}"
    for kind, words in ((Notice.FAILING, "is failing"), (Notice.RECOVERED, "recovered")):
        assert _subject(notice.model_copy(update={"notice": kind})) == (
            f"[pricewatch] acme {words} {slot}"
        )


def test_smtp_settings_come_from_the_settings() -> None:
    settings = Settings(
        smtp_host="mail.example.com", smtp_port=2525, smtp_sender="pw@example.com",
        smtp_username="pw", smtp_password=SecretStr("s3cret"), smtp_tls=True,
    )  # fmt: skip
    assert SmtpSettings.of(settings) == SmtpSettings(
        host="mail.example.com", port=2525, sender="pw@example.com", username="pw",
        password="s3cret", use_tls=True,
    )  # fmt: skip
    assert SmtpSettings.of(Settings()).password is None


async def test_an_email_lists_the_prices_and_what_changed_before_the_json(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    sink, smtp = smtp_server
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp)
    notice = delivery(config, ChannelKind.EMAIL)
    body = notice_body(notice, "Pro: 12 -> 13", [MOVE])
    await notify._send_email(notice, body, "ops@example.com")
    [message] = sink.messages
    assert message["From"] == "pricewatch@test.local"
    assert message["Subject"] == "[pricewatch] acme price changed (2026-08-07T08:00:00Z)"
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    text = payload.decode().replace("\r\n", "\n")
    prices, changed, rest = text.split("\n\n", 2)
    assert prices == "Prices:\n" + move_line(MOVE)
    assert changed == "What changed:\nPro: 12 -> 13"
    sent = json.loads(rest)
    assert sent == {k: v for k, v in body.items() if k != "excerpt"}
    assert '  "type"' in rest  # indented for people

    await notify._send_email(notice, notice_body(notice, None, None), "ops@example.com")
    plain = sink.messages[1].get_payload(decode=True)
    assert isinstance(plain, bytes) and json.loads(plain)["type"] == "page.changed"


class Counted:
    """`activities.notify.count`, recording instead of counting."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    def __call__(self, name: str, description: str, **labels: str) -> None:
        self.calls.append((name, description, labels))


async def test_every_outcome_is_counted_with_its_labels(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    counted = Counted()
    monkeypatch.setattr(notify_module, "count", counted)
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp_server[1])
    notice = delivery(config, ChannelKind.WEBHOOK)
    webhook_receiver.answers = [500]
    with pytest.raises(ApplicationError):
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    await ActivityEnvironment().run(notify.deliver_notice, notice)
    await ActivityEnvironment().run(notify.deliver_notice, notice)
    what = ("pricewatch_deliveries", "notices by outcome")
    assert counted.calls == [
        (*what, {"notice": "changed", "kind": "webhook", "outcome": "failed"}),
        (*what, {"notice": "changed", "kind": "webhook", "outcome": "sent"}),
        (*what, {"notice": "changed", "outcome": "already_sent"}),
    ]


async def test_a_channel_removed_or_disabled_is_given_up_and_recorded(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp_server[1])
    await pool.execute(
        "UPDATE channels SET disabled_reason = 'HTTP 410 Gone' WHERE kind = 'webhook'"
    )
    with pytest.raises(ApplicationError) as disabled:
        await ActivityEnvironment().run(
            notify.deliver_notice, delivery(config, ChannelKind.WEBHOOK)
        )
    assert (disabled.value.message, disabled.value.type) == (
        "channel disabled: HTTP 410 Gone",
        PERMANENT_DELIVERY_ERROR,
    )
    assert disabled.value.non_retryable
    await pool.execute("DELETE FROM channels WHERE kind = 'email'")
    with pytest.raises(ApplicationError) as removed:
        await ActivityEnvironment().run(notify.deliver_notice, delivery(config, ChannelKind.EMAIL))
    assert removed.value.message == "the channel was removed from the target"
    assert removed.value.non_retryable
    rows = {row["channel_id"][:5]: row for row in await deliveries(pool)}
    assert sorted((r["status"], r["attempt_count"], r["last_error"]) for r in rows.values()) == [
        ("failed", 0, "channel disabled: HTTP 410 Gone"),
        ("failed", 0, "the channel was removed from the target"),
    ]
    assert webhook_receiver.received == []


async def test_a_notice_another_attempt_is_sending_is_not_sent_twice(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp_server[1])
    notice = delivery(config, ChannelKind.WEBHOOK)
    webhook_receiver.hold = hold = Hold(arrived=asyncio.Event(), release=asyncio.Event())
    first = asyncio.create_task(ActivityEnvironment().run(notify.deliver_notice, notice))
    await asyncio.wait_for(hold.arrived.wait(), timeout=10)
    with pytest.raises(ApplicationError) as busy:
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert (busy.value.message, busy.value.type) == (
        "another attempt is sending this notice",
        TRANSIENT_DELIVERY_ERROR,
    )
    assert not busy.value.non_retryable
    hold.release.set()
    assert (await first).status == "sent"
    assert len(webhook_receiver.received) == 1


async def test_a_given_up_delivery_is_recorded_failed_unless_it_was_sent(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp_server[1])
    webhook, email = (delivery(config, kind) for kind in (ChannelKind.WEBHOOK, ChannelKind.EMAIL))
    webhook_receiver.answers = [503]
    with pytest.raises(ApplicationError):
        await ActivityEnvironment().run(notify.deliver_notice, webhook)
    await ActivityEnvironment().run(notify.deliver_notice, email)
    for given_up in (webhook, email):
        failure = DeliveryFailureInput(delivery=given_up, error_message="timed out 5 times")
        await ActivityEnvironment().run(notify.record_delivery_failed, failure)
    # A delivery no attempt ever recorded gets its row too.
    never = delivery(config, ChannelKind.WEBHOOK).model_copy(update={"notice": Notice.FAILING})
    failure = DeliveryFailureInput(delivery=never, error_message="no attempt got far")
    await ActivityEnvironment().run(notify.record_delivery_failed, failure)
    got = {(r["notice"], r["channel_id"]): r for r in await deliveries(pool)}
    assert [
        (r["status"], r["attempt_count"], r["last_error"])
        for r in (
            got["changed", webhook.channel_id],
            got["changed", email.channel_id],
            got["failing", never.channel_id],
        )
    ] == [
        ("failed", 1, "timed out 5 times"),
        ("sent", 1, None),
        ("failed", 0, "no attempt got far"),
    ]


async def test_an_unreachable_or_refused_webhook_says_why(
    pool: asyncpg.Pool, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    notice = delivery(config, ChannelKind.WEBHOOK)
    async with new_client(AddressPolicy()) as guarded:  # refuses 127.0.0.1
        notify = NotifyActivities(pool, guarded, smtp_server[1])
        with pytest.raises(ApplicationError) as blocked:
            await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert blocked.value.non_retryable and "127.0.0.1" in blocked.value.message
    closed = webhook_receiver.url.replace(webhook_receiver.url.split("/")[2], "127.0.0.1:9")
    await pool.execute("UPDATE channels SET destination = $1 WHERE kind = 'webhook'", closed)
    await pool.execute("UPDATE deliveries SET status = 'pending', sending_until = NULL")
    async with new_client(AddressPolicy.allowing(["127.0.0.1/32"])) as http:
        notify = NotifyActivities(pool, http, smtp_server[1])
        with pytest.raises(ApplicationError) as unreachable:
            await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert unreachable.value.message.startswith("webhook unreachable: ")
    assert not unreachable.value.non_retryable
    [row] = await deliveries(pool)
    assert (row["status"], row["last_error"]) == ("pending", unreachable.value.message)


async def test_a_test_notice_reaches_each_kind_and_disables_nothing(
    pool: asyncpg.Pool, http: httpx.AsyncClient, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    sink, smtp = smtp_server
    await add_target(pool, webhook_receiver)
    notify = NotifyActivities(pool, http, smtp)
    channels = {row["kind"]: row for row in await QUERIES["channels_to_test"].fetch(
        pool, target_id="acme")}  # fmt: skip
    assert await notify.send_test("acme", channels["webhook"]) is None
    assert await notify.send_test("acme", channels["email"]) is None
    [(webhook_id, payload)] = webhook_receiver.received
    now = channels["webhook"]["now"].replace(microsecond=0)
    assert webhook_id.startswith("msg_")
    assert payload == {
        "type": "test", "target_id": "acme", "url": "https://example.com/pricing",
        "slot": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "work_id": "acme:test",
        "status": "test", "previous_hash": None, "new_hash": None,
        "checked_at": now.isoformat(), "error": None, "failure_streak": 0, "excerpt": None,
    }  # fmt: skip
    [mail] = sink.messages
    assert mail["Subject"] == "[pricewatch] test notice for acme: this channel works"
    assert mail["To"] == "ops@example.com"

    webhook_receiver.answers = [410]
    sink.answers = ["550 5.1.1 no such user"]
    assert await notify.send_test("acme", channels["webhook"]) == "webhook answered HTTP 410"
    refused = await notify.send_test("acme", channels["email"])
    assert refused == "SMTP 550 5.1.1 no such user"
    assert (
        await pool.fetchval("SELECT count(*) FROM channels WHERE disabled_reason IS NOT NULL") == 0
    )
    assert await deliveries(pool) == []


def test_a_signature_is_the_reference_packages() -> None:
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    at = datetime(2021, 2, 25, 15, 2, 10, tzinfo=UTC)
    body = '{"test": 2432232314}'
    signed = notify_module.sign(secret, "msg_p5jXN8AQM9LW", int(at.timestamp()), body.encode())
    assert signed == Webhook(secret).sign("msg_p5jXN8AQM9LW", at, body)


# Apprise services, the channel's row written as `add` leaves it (the URL is its secret).


async def apprise(pool: asyncpg.Pool, url: str | None, title: str | None = None) -> DeliveryInput:
    await store.sync_target(pool, EMAIL_ONLY, next_slot=SLOT, enabled=True)
    await pool.execute(
        """INSERT INTO channels (target_id, channel_id, kind, destination, secret,
                                 title_template)
           VALUES ('acme', 'apprise-k1', 'apprise', 'json://127.0.0.1/json', $1, $2)""",
        url, title,
    )  # fmt: skip
    return DeliveryInput(
        notice=Notice.CHANGED, channel_id="apprise-k1", target_id="acme",
        url=EMAIL_ONLY.url, result=CHANGED,
    )  # fmt: skip


async def test_a_service_gets_the_rendered_message_once(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services
) -> None:
    notice = await apprise(pool, services_app.urls()["json"], title="{{ target }} moved")
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    sent = await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert (sent.status, sent.attempt_count) == ("sent", 1)
    [(kind, body)] = services_app.received
    assert kind == "json" and body["title"] == "acme moved"
    assert f"work id {CHANGED.work_id}" in body["message"]


@pytest.mark.parametrize(
    ("answer", "transient", "disabled"),
    [(401, False, True), (400, False, False), (503, True, False)],
)
async def test_a_services_refusal_disables_only_for_its_credentials_or_destination(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services, answer: int,
    transient: bool, disabled: bool,
) -> None:  # fmt: skip
    notice = await apprise(pool, services_app.urls()["json"])
    services_app.answers["json"] = [answer, answer]
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    [channel] = [
        row for row in await QUERIES["channels_to_test"].fetch(pool, target_id="acme")
        if row["kind"] == "apprise"
    ]  # fmt: skip
    tested = await notify.send_test("acme", channel)
    assert tested is not None and f"HTTP {answer}" in tested and "disabled" not in tested
    assert (
        await pool.fetchval("SELECT count(*) FROM channels WHERE disabled_reason IS NOT NULL") == 0
    )
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert failed.value.non_retryable is not transient
    assert failed.value.message.endswith("; channel disabled") is disabled
    reason = await pool.fetchval("SELECT disabled_reason FROM channels WHERE kind = 'apprise'")
    assert (reason is not None) is disabled
    if disabled:
        assert failed.value.message == f"{reason}; channel disabled"
    row = await pool.fetchrow("SELECT status, last_error FROM deliveries")
    assert row is not None
    assert (row["status"], row["last_error"]) == (
        "pending" if transient else "failed", failed.value.message,
    )  # fmt: skip


async def test_a_service_whose_url_is_not_stored_or_whose_template_fails_is_given_up(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services
) -> None:
    notice = await apprise(pool, None)
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    with pytest.raises(ApplicationError) as missing:
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert missing.value.message == (
        "its Apprise URL is not stored in this database: add the channel again with its URL"
    )
    assert missing.value.non_retryable
    await pool.execute(
        "UPDATE channels SET secret = $1, title_template = '{{ nope() }}' WHERE kind = 'apprise'",
        services_app.urls()["json"],
    )
    await pool.execute("UPDATE deliveries SET status = 'pending'")
    with pytest.raises(ApplicationError) as broken:
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert broken.value.message.startswith("the message template failed: ")
    assert broken.value.non_retryable
    assert services_app.received == []


# The sending lease: an attempt held up between its claim and its send (frozen, or slow)
# whose lease another attempt took sends nothing, records nothing, and says why.


@pytest.mark.parametrize("stalled", [0, 20])
async def test_an_attempt_whose_lease_was_taken_meanwhile_sends_nothing_and_says_why(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    held_after_the_claim: Held, caplog: pytest.LogCaptureFixture, stalled: int,
) -> None:  # fmt: skip
    """The first attempt is held up past its lease; a second takes the lapsed lease and
    sends. The first then renews nothing, sends nothing and records nothing: a transient
    failure whose message and log line say why: a stall of this worker (at debug, and the
    freeze's summary names the notice) or, with no stall, another attempt (a warning)."""
    caplog.set_level(logging.DEBUG, "pricewatch.notify")
    claimed, go = held_after_the_claim
    notice = await apprise(pool, services_app.urls()["json"])
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    first = asyncio.create_task(ActivityEnvironment().run(notify.deliver_notice, notice))
    assert await asyncio.to_thread(claimed.wait, 30)
    await pool.execute("UPDATE deliveries SET sending_until = now() - interval '1 s'")
    second = await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert (second.status, second.attempt_count) == ("sent", 1)
    if stalled:
        now = time.monotonic()  # this worker's watchdog saw a stall that just ended
        freezes.STALLS.beat(now=now - stalled, cpu=time.process_time())
        freezes.STALLS.beat(now=now, cpu=time.process_time())
    go.set()
    with pytest.raises(ApplicationError) as lost:
        await first
    why = (
        "this worker was stalled for 20 s since its claim"
        if stalled
        else "another attempt took it while this one was slow"
    )
    assert (lost.value.type, lost.value.non_retryable) == (TRANSIENT_DELIVERY_ERROR, False)
    assert lost.value.message == f"not sent: this attempt's sending lease was taken over ({why})"
    assert len(services_app.received) == 1
    row = await pool.fetchrow("SELECT status, attempt_count, last_error FROM deliveries")
    assert row is not None and tuple(row) == ("sent", 1, None)
    [line] = [r for r in caplog.records if r.name == "pricewatch.notify"]
    assert line.levelno == (logging.DEBUG if stalled else logging.WARNING)
    assert line.getMessage() == (
        "acme changed notice to channel apprise-k1 not sent: its sending lease was taken over "
        f"({why})"
    )
    assert {
        key: getattr(line, key, None)
        for key in ("work_id", "channel_id", "notice", "target_id", "outcome")
    } == {
        "work_id": CHANGED.work_id, "channel_id": "apprise-k1", "notice": "changed",
        "target_id": "acme", "outcome": "lease lost",
    }  # fmt: skip
    assert list(freezes.STALLS.notices_given_up) == (["acme"] if stalled else [])
    assert freezes.STALLS.given_up == {}


async def test_a_message_the_machine_starved_stays_owed_and_says_so(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A render the machine starved of CPU is no verdict on the template: the notice stays
    owed (pending, transient) and the error says the machine's words, not "template failed".
    (Unfinished is injected: a test cannot starve a child reliably.)"""

    def starved(*args: object, **kwargs: object) -> None:
        raise isolated.Unfinished("the body template had 0.1 s of CPU in 30 s: the machine is busy")

    notice = await apprise(pool, services_app.urls()["json"])
    monkeypatch.setattr(isolated, "run", starved)
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    said = (
        "the message was not rendered: the body template had 0.1 s of CPU in 30 s: "
        "the machine is busy"
    )
    assert (caught.value.message, caught.value.type) == (said, TRANSIENT_DELIVERY_ERROR)
    assert not caught.value.non_retryable
    row = await pool.fetchrow("SELECT status, attempt_count, last_error FROM deliveries")
    assert row is not None and tuple(row) == ("pending", 1, said)
    assert services_app.received == []


async def test_a_test_notice_to_a_service_says_it_is_a_test(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services
) -> None:
    await apprise(pool, services_app.urls()["json"])
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    [channel] = [
        row for row in await QUERIES["channels_to_test"].fetch(pool, target_id="acme")
        if row["kind"] == "apprise"
    ]  # fmt: skip
    assert await notify.send_test("acme", channel) is None
    [(kind, body)] = services_app.received
    assert kind == "json"
    assert "This is a test notice from pricewatch: this channel works." in body["message"]
    assert await deliveries(pool) == []


async def test_a_services_message_is_its_own_templates(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services
) -> None:
    notice = await apprise(pool, services_app.urls()["json"], title="{{ target }} moved")
    await pool.execute(
        "UPDATE channels SET body_template = '{{ headline }} at {{ url }}' WHERE kind = 'apprise'"
    )
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    assert (await ActivityEnvironment().run(notify.deliver_notice, notice)).status == "sent"
    [(_, body)] = services_app.received
    assert (body["title"], body["message"]) == (
        "acme moved", "page changed at https://example.com/pricing",
    )  # fmt: skip


async def test_a_service_that_never_answers_is_cut_by_its_own_deadline(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The send keeps to the deadline itself and says so; the watchdog (a second later)
    is not what ends it. (Here with a deadline of 2 s.)"""
    monkeypatch.setattr(notify_module, "SEND_DEADLINE", timedelta(seconds=2))
    notice = await apprise(pool, services_app.urls()["json"])
    services_app.hold = asyncio.Event()  # never set: the service never answers
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    services_app.hold.set()
    assert (caught.value.message, caught.value.type) == (
        "JSON unreachable: no answer in time", TRANSIENT_DELIVERY_ERROR,
    )  # fmt: skip


async def test_a_send_past_its_deadline_is_given_up_by_the_watchdog_and_stays_owed(
    pool: asyncpg.Pool, http: httpx.AsyncClient, services_app: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """If the send overran its own deadline (a bug in a service's plugin, a lookup that
    hangs), the watchdog a second later gives the attempt up: transient, still owed, said
    in its own words. The overrun is injected: the real send keeps to its deadline."""
    overran = Event()

    def overrunning(url: str, title: str, body: str, policy: object, seconds: float) -> object:
        overran.wait(seconds + 10)
        return services.Outcome(sent=False, error="answered late", transient=False)

    monkeypatch.setattr(notify_module, "SEND_DEADLINE", timedelta(seconds=1))
    monkeypatch.setattr(services, "send", overrunning)
    notice = await apprise(pool, services_app.urls()["json"])
    notify = NotifyActivities(pool, http, NO_SMTP, LOOPBACK)
    started = time.monotonic()
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(notify.deliver_notice, notice)
    took = time.monotonic() - started
    overran.set()
    said = "the service did not answer in time"
    assert (caught.value.message, caught.value.type) == (said, TRANSIENT_DELIVERY_ERROR)
    assert not caught.value.non_retryable
    assert took < 8, "given up by the watchdog, not when the send returned"
    row = await pool.fetchrow("SELECT status, last_error FROM deliveries")
    assert row is not None and tuple(row) == ("pending", said)
