"""Notices to a target's channels: signed webhooks (Standard Webhooks), email, and any
Apprise service (activities/services.py).

One activity call is one notice to one channel. The `deliveries` row keyed on (work id,
channel, notice) makes every re-execution after a recorded send a no-op. The one window
that cannot be closed is "sent, then the worker died before recording it": the re-send
carries the same webhook-id / Message-ID, so the receiver can drop it; a chat service has
no such key, so its people see that message twice (docs/notifications.md). A worker frozen
between its claim and its send wakes with its lease lapsed: right before the send, the
attempt renews its lease or, finding another's there (or the row recorded), sends nothing.
"""

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage

import aiosmtplib
import asyncpg
import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import services
from activities.freezes import STALLS
from activities.metrics import count
from activities.outages import SMTP
from activities.queries import QUERIES, parse
from fetchers.guard import AddressPolicy, BlockedAddress
from fetchers.http import TRANSIENT_STATUSES
from pricewatch import isolated, notices
from pricewatch.deliveries import DeliveryFailureInput, DeliveryInput, DeliveryResult, Notice
from pricewatch.models import ChannelKind, CheckResult, CheckStatus
from pricewatch.names import Activity
from pricewatch.policy import (
    PERMANENT_DELIVERY_ERROR,
    TRANSIENT_DELIVERY_ERROR,
    expected_failure,
)
from pricewatch.prices import move_line
from pricewatch.settings import Settings
from pricewatch.slots import format_slot

# Longer than one attempt (10 s): a second execution of the same delivery waits it out.
SENDING_LEASE = timedelta(seconds=15)
# One send ends well inside the lease, whatever the per-operation timeouts add up to, so a
# retry that takes a lapsed lease never overlaps a send still in flight.
SEND_DEADLINE = timedelta(seconds=9)
WEBHOOK_TIMEOUT = httpx.Timeout(8.0, connect=4.0)
SMTP_TIMEOUT_SECONDS = 8.0

NOTIFY_LOG = logging.getLogger("pricewatch.notify")

# Right before a notice goes out, the attempt renews its lease, or learns it has none: a
# worker frozen since its claim (SIGSTOP, a paused VM) wakes believing no time has passed,
# while its lease lapsed and another attempt may have taken it and sent. The row still holds
# the lease this attempt's claim set (`now() + SENDING_LEASE` in that statement) only if no
# other claim or record came since: then nobody else sent, even if it lapsed (a slow render
# on a loaded machine), and renewing it is safe.
HOLD_DELIVERY = parse("""-- name: hold_delivery
UPDATE deliveries SET sending_until = now() + :sending_lease::interval
 WHERE work_id = :work_id AND channel_id = :channel_id AND notice = :notice
   AND status <> 'sent' AND sending_until = :held
RETURNING sending_until;
""")["hold_delivery"]


@dataclass(frozen=True)
class Lease:
    """The sending lease the current attempt's claim took: `sending_until` as the claim set
    it, and when (monotonic: a freeze since then is named if it cost the lease)."""

    delivery: DeliveryInput
    held: datetime
    taken: float


LEASE: ContextVar[Lease | None] = ContextVar("delivery_lease", default=None)
"""Set for the send of a claimed delivery. A context variable, not a parameter: the senders'
signatures are the seams the chaos run's fault windows wrap (tests/chaos/worker.py)."""


class LeaseLost(Exception):
    """Another attempt took this one's sending lease before its send (this one's worker was
    frozen or slow past the lease): it may have sent the notice, so this one must not."""


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int
    sender: str
    username: str | None = None
    password: str | None = None
    use_tls: bool = False

    @classmethod
    def of(cls, settings: Settings) -> "SmtpSettings":
        password = settings.smtp_password.get_secret_value() if settings.smtp_password else None
        return cls(
            host=settings.smtp_host,
            port=settings.smtp_port,
            sender=settings.smtp_sender,
            username=settings.smtp_username,
            password=password,
            use_tls=settings.smtp_tls,
        )


class DeliveryError(Exception):
    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def delivery_keys(delivery: DeliveryInput) -> dict[str, str]:
    """The deliveries row's primary key: (work id, channel, notice)."""
    return {
        "work_id": delivery.result.work_id,
        "channel_id": delivery.channel_id,
        "notice": delivery.notice.value,
    }


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks: `v1,` + base64(HMAC-SHA256(key, "id.timestamp.body"))."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def notice_body(
    delivery: DeliveryInput, excerpt: str | None, price_moves: list[dict[str, object]] | None
) -> dict[str, object]:
    """The JSON every channel gets (docs/schemas/notice.json). A change in price mode is a
    `price.changed` with the moves (`prices`); every other field is as for `page.changed`."""
    result = delivery.result
    kind = "price" if price_moves is not None and delivery.notice is Notice.CHANGED else "page"
    body: dict[str, object] = {
        "type": f"{kind}.{delivery.notice.value}",
        "target_id": delivery.target_id,
        "url": delivery.url,
        "slot": format_slot(result.slot),
        "work_id": result.work_id,
        "status": result.status.value,
        "previous_hash": result.previous_hash,
        "new_hash": result.result_hash,
        "checked_at": result.checked_at.isoformat(),
        "error": result.error_message,
        "failure_streak": delivery.failure_streak,
        "excerpt": excerpt,
    }
    if kind == "price":
        body["prices"] = price_moves
    return body


Send = Callable[
    ["NotifyActivities", DeliveryInput, dict[str, object], asyncpg.Record, datetime],
    Awaitable[None],
]
"""`(notifier, delivery, notice JSON, the channel's row, the send's time)`: one notice out."""


@dataclass(frozen=True)
class Sender:
    """How one channel kind sends a notice (`send`, from `deliver_notice`) and a marked test
    notice (`test`, from `notify-test`: nothing disabled on a refusal)."""

    send: Send
    test: Send


# One sender per channel kind: a new kind is one sender and one line here. Each looks up the
# notifier's method when it sends, so the seams the chaos run wraps on the class stay seams.
SENDERS: dict[ChannelKind, Sender] = {
    ChannelKind.WEBHOOK: Sender(
        send=lambda n, d, notice, row, now: n._post_webhook(
            d, notice, row["destination"], row["secret"], now
        ),
        test=lambda n, d, notice, row, now: n._post_webhook(
            d, notice, row["destination"], row["secret"], now, disable=False
        ),
    ),
    ChannelKind.EMAIL: Sender(
        send=lambda n, d, notice, row, now: n._send_email(d, notice, row["destination"]),
        test=lambda n, d, notice, row, now: n._send_email(
            d, notice, row["destination"], test_notice=True
        ),
    ),
    ChannelKind.APPRISE: Sender(
        send=lambda n, d, notice, row, now: n._notify_service(
            d.target_id, d.channel_id, notice, row
        ),
        test=lambda n, d, notice, row, now: n._notify_service(
            d.target_id, d.channel_id, notice, row, test=True
        ),
    ),
}


class NotifyActivities:
    def __init__(
        self,
        pool: asyncpg.Pool,
        http: httpx.AsyncClient,
        smtp: SmtpSettings,
        policy: AddressPolicy | None = None,
    ) -> None:
        self.pool = pool
        self.http = http
        self.smtp = smtp
        self.policy = policy or AddressPolicy()
        """Where Apprise's own requests may connect (`http` carries its own guard)."""

    @activity.defn(name=Activity.DELIVER_NOTICE)
    async def deliver_notice(self, delivery: DeliveryInput) -> DeliveryResult:
        """Send one notice to one channel, at most once once it is recorded sent."""
        keys = delivery_keys(delivery)
        row = await QUERIES["claim_delivery"].fetchrow(
            self.pool, **keys, target_id=delivery.target_id,
            message_id=self.message_id(delivery), sending_lease=SENDING_LEASE,
        )  # fmt: skip
        assert row is not None
        if row["status"] == "sent":
            count("pricewatch_deliveries", "notices by outcome", notice=delivery.notice.value,
                  outcome="already_sent")  # fmt: skip
            return await self._result(delivery, already_sent=True)
        if row["kind"] is None:
            raise await self._give_up(delivery, "the channel was removed from the target")
        if row["disabled_reason"]:
            raise await self._give_up(delivery, f"channel disabled: {row['disabled_reason']}")
        if not row["taken"]:
            raise expected_failure(
                "another attempt is sending this notice", TRANSIENT_DELIVERY_ERROR
            )
        held = LEASE.set(Lease(delivery, row["now"] + SENDING_LEASE, time.monotonic()))
        on_the_wire = asyncio.ensure_future(self._send_and_record(delivery, row))
        LEASE.reset(held)  # the send's task keeps its copy; this context has no lease
        try:
            await asyncio.shield(on_the_wire)
        except asyncio.CancelledError:
            # The attempt was cancelled (its worker shutting down past the grace, its
            # timeout passed) with the notice maybe out already: what the send did is
            # recorded first, so the next attempt finds it sent instead of sending it again.
            # Bounded: the send by SEND_DEADLINE, the record by its statement timeout.
            with contextlib.suppress(Exception):
                await asyncio.shield(on_the_wire)
            raise
        return await self._result(delivery)

    async def _send_and_record(self, delivery: DeliveryInput, row: asyncpg.Record) -> None:
        try:
            moves = json.loads(row["price_moves"]) if row["price_moves"] else None
            body = notice_body(delivery, row["excerpt"], moves)
            await SENDERS[ChannelKind(row["kind"])].send(self, delivery, body, row, row["now"])
        except LeaseLost as err:
            # Nothing recorded: the row is another attempt's now (or `sent`). The next
            # attempt reads which.
            raise expected_failure(str(err), TRANSIENT_DELIVERY_ERROR) from err
        except DeliveryError as err:
            count("pricewatch_deliveries", "notices by outcome", notice=delivery.notice.value,
                  kind=row["kind"], outcome="failed")  # fmt: skip
            # A transient failure stays `pending`: another attempt will come, and if the run
            # that would make it is gone (a reset), the next run finds the notice still owed.
            # Only a permanent failure, or the workflow giving up, makes it `failed`.
            status = "pending" if err.transient else "failed"
            await self._record(delivery, status, attempts=1, error=str(err))
            raise expected_failure(
                str(err),
                TRANSIENT_DELIVERY_ERROR if err.transient else PERMANENT_DELIVERY_ERROR,
                non_retryable=not err.transient,
            ) from err
        await self._record(delivery, "sent", attempts=1, error=None)
        count("pricewatch_deliveries", "notices by outcome", notice=delivery.notice.value,
              kind=row["kind"], outcome="sent")  # fmt: skip

    @activity.defn(name=Activity.RECORD_DELIVERY_FAILED)
    async def record_delivery_failed(self, failure: DeliveryFailureInput) -> None:
        """The workflow gave up on a delivery: make sure its row says so (an attempt that
        timed out never got to record anything)."""
        delivery = failure.delivery
        await QUERIES["claim_delivery"].execute(
            self.pool, **delivery_keys(delivery), target_id=delivery.target_id,
            message_id=self.message_id(delivery), sending_lease=timedelta(0),
        )  # fmt: skip
        await self._record(delivery, "failed", attempts=0, error=failure.error_message)

    @staticmethod
    def message_id(delivery: DeliveryInput) -> str:
        return f"msg_{delivery.delivery_id}"

    async def _still_held(self) -> None:
        """Right before the network send: renew this attempt's sending lease (a full
        SENDING_LEASE, longer than the send's own deadline), or raise LeaseLost if another
        attempt took it meanwhile (or the row was recorded). After a freeze its line is at
        debug and the freeze's summary names the notice. What remains is the instant between
        this statement and the send."""
        lease = LEASE.get()
        if lease is None:  # a test notice: no row, no lease
            return
        delivery = lease.delivery
        keys = delivery_keys(delivery)
        held = await HOLD_DELIVERY.fetchval(
            self.pool, **keys, held=lease.held, sending_lease=SENDING_LEASE
        )
        if held is not None:
            return
        if stalled := STALLS.stalled_since(lease.taken):
            STALLS.gave_up(delivery.target_id, notice=True)
            why = f"this worker was stalled for {stalled:.0f} s since its claim"
        else:
            why = "another attempt took it while this one was slow"
        NOTIFY_LOG.log(
            logging.DEBUG if stalled else logging.WARNING,
            "%s %s notice to channel %s not sent: its sending lease was taken over (%s)",
            delivery.target_id, delivery.notice.value, delivery.channel_id, why,
            extra={**keys, "target_id": delivery.target_id, "outcome": "lease lost"},
        )  # fmt: skip
        raise LeaseLost(f"not sent: this attempt's sending lease was taken over ({why})")

    async def _give_up(self, delivery: DeliveryInput, reason: str) -> ApplicationError:
        await self._record(delivery, "failed", attempts=0, error=reason)
        return expected_failure(reason, PERMANENT_DELIVERY_ERROR, non_retryable=True)

    async def _record(
        self, delivery: DeliveryInput, status: str, *, attempts: int, error: str | None
    ) -> None:
        await QUERIES["record_delivery"].execute(
            self.pool, **delivery_keys(delivery), status=status, attempts=attempts,
            last_error=error,
        )  # fmt: skip

    async def _result(self, delivery: DeliveryInput, already_sent: bool = False) -> DeliveryResult:
        row = await QUERIES["select_delivery"].fetchrow(self.pool, **delivery_keys(delivery))
        assert row is not None
        return DeliveryResult(
            channel_id=delivery.channel_id,
            notice=delivery.notice,
            status=row["status"],
            attempt_count=row["attempt_count"],
            already_sent=already_sent,
        )

    async def _post_webhook(
        self,
        delivery: DeliveryInput,
        notice: dict[str, object],
        url: str,
        secret: str,
        now: datetime,
        disable: bool = True,
    ) -> None:
        """Same webhook-id on every re-send; a fresh timestamp and signature per attempt.
        A 410 disables the channel (unless `disable` is off: a test notice)."""
        body = json.dumps(notice, separators=(",", ":")).encode()
        message_id = self.message_id(delivery)
        timestamp = int(now.timestamp())
        headers = {
            "content-type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(secret, message_id, timestamp, body),
        }
        await self._still_held()
        try:
            async with asyncio.timeout(SEND_DEADLINE.total_seconds()):
                response = await self.http.post(
                    url, content=body, headers=headers, timeout=WEBHOOK_TIMEOUT,
                    follow_redirects=False,
                )  # fmt: skip
        except BlockedAddress as err:
            raise DeliveryError(str(err), transient=False) from err
        except TimeoutError as err:
            raise DeliveryError("webhook did not answer in time", transient=True) from err
        except httpx.TransportError as err:
            raise DeliveryError(
                f"webhook unreachable: {err or type(err).__name__}", transient=True
            ) from err
        if response.is_success:
            return
        message = f"webhook answered HTTP {response.status_code}"
        if response.status_code == 410 and disable:
            await QUERIES["disable_channel"].execute(
                self.pool, target_id=delivery.target_id, channel_id=delivery.channel_id,
                reason="HTTP 410 Gone",
            )  # fmt: skip
            raise DeliveryError(f"{message}: endpoint gone, channel disabled", transient=False)
        raise DeliveryError(message, transient=response.status_code in TRANSIENT_STATUSES)

    async def _notify_service(
        self, target_id: str, channel_id: str, notice: dict[str, object], row: asyncpg.Record,
        test: bool = False,
    ) -> None:  # fmt: skip
        """One message to an Apprise service, its templates rendered; a refusal of the
        credentials or of the destination (401, 403, 404, 410) disables the channel."""
        if row["secret"] is None:
            raise DeliveryError(
                "its Apprise URL is not stored in this database: add the channel again with "
                "its URL", transient=False,
            )  # fmt: skip
        try:
            # In a child process with a deadline (notices.render), waited for in a thread:
            # the event loop, and with it every heartbeat and record, never waits behind it.
            message = await asyncio.to_thread(
                notices.render,
                row["title_template"], row["body_template"], notices.variables(notice, test),
            )  # fmt: skip
        except ValueError as err:  # it raised, rendered nothing, or overran its bounds
            raise DeliveryError(f"the message template failed: {err}", transient=False) from err
        except isolated.Unfinished as err:  # the machine's fault, not the template's
            raise DeliveryError(f"the message was not rendered: {err}", transient=True) from err
        await self._still_held()  # the render may have taken a while, or a freeze
        seconds = SEND_DEADLINE.total_seconds()
        try:
            async with asyncio.timeout(seconds + 1):  # `send` keeps to `seconds` itself
                outcome = await asyncio.to_thread(
                    services.send, row["secret"], message.title, message.body, self.policy,
                    seconds,
                )  # fmt: skip
        except TimeoutError as err:
            raise DeliveryError("the service did not answer in time", transient=True) from err
        if outcome.sent:
            return
        error = str(outcome.error)
        if outcome.disable and not test:
            await QUERIES["disable_channel"].execute(
                self.pool, target_id=target_id, channel_id=channel_id, reason=error
            )
            error += "; channel disabled"
        raise DeliveryError(error, transient=outcome.transient)

    async def send_test(self, target_id: str, channel: asyncpg.Record) -> str | None:
        """`pricewatch notify-test`: a marked test notice to one channel now (a row of
        `channels_to_test`); None if it was accepted, else the error. No change, no
        delivery row, and a refusal disables nothing: the user reads it and decides."""
        now = channel["now"].replace(microsecond=0)
        notice: dict[str, object] = {
            "type": notices.TEST_TYPE, "target_id": target_id, "url": channel["url"],
            "slot": format_slot(now), "work_id": f"{target_id}:test",
            "status": "test", "previous_hash": None, "new_hash": None,
            "checked_at": now.isoformat(), "error": None, "failure_streak": 0,
            "excerpt": None,
        }  # fmt: skip
        test = DeliveryInput(
            notice=Notice.CHANGED, channel_id=channel["channel_id"], target_id=target_id,
            url=str(channel["url"]),
            result=CheckResult(
                work_id=f"{target_id}:test:{uuid.uuid4().hex[:8]}", slot=now,
                status=CheckStatus.UNCHANGED, checked_at=now, attempt_count=0,
            ),
        )  # fmt: skip
        try:
            await SENDERS[ChannelKind(channel["kind"])].test(self, test, notice, channel, now)
        except DeliveryError as err:
            return str(err)
        return None

    async def _send_email(
        self,
        delivery: DeliveryInput,
        notice: dict[str, object],
        address: str,
        test_notice: bool = False,
    ) -> None:
        message = EmailMessage()
        message["From"] = self.smtp.sender
        message["To"] = address
        message["Subject"] = (
            f"[pricewatch] test notice for {delivery.target_id}: this channel works"
            if test_notice
            else _subject(delivery, price="prices" in notice)
        )
        # The same Message-ID on every re-send lets mail systems collapse duplicates.
        message["Message-ID"] = f"<{delivery.delivery_id}@pricewatch>"
        text = json.dumps({k: v for k, v in notice.items() if k != "excerpt"}, indent=2)
        if notice["excerpt"]:
            text = f"What changed:\n{notice['excerpt']}\n\n{text}"
        if isinstance(moves := notice.get("prices"), list):
            text = "Prices:\n" + "\n".join(map(move_line, moves)) + f"\n\n{text}"
        message.set_content(text)
        await self._still_held()
        try:
            async with asyncio.timeout(SEND_DEADLINE.total_seconds()):
                await self._smtp_send(message)
        except TimeoutError as err:
            SMTP.failed(err)
            raise DeliveryError("SMTP server did not answer in time", transient=True) from err

    async def _smtp_send(self, message: EmailMessage) -> None:
        """Send, telling `SMTP` whether the server answered (a refusal is an answer)."""
        started = time.monotonic()
        try:
            await aiosmtplib.send(
                message,
                hostname=self.smtp.host,
                port=self.smtp.port,
                username=self.smtp.username,
                password=self.smtp.password,
                use_tls=self.smtp.use_tls,
                timeout=SMTP_TIMEOUT_SECONDS,
            )
        except aiosmtplib.SMTPRecipientsRefused as err:
            SMTP.succeeded(started)
            raise DeliveryError(f"address refused: {err}", transient=False) from err
        except aiosmtplib.SMTPResponseException as err:
            SMTP.succeeded(started)
            # 4xx: try later (greylisting, full queue); 5xx: this will never be accepted.
            raise DeliveryError(f"SMTP {err.code} {err.message}", transient=err.code < 500) from err
        except (aiosmtplib.SMTPException, OSError) as err:
            SMTP.failed(err)
            raise DeliveryError(f"SMTP unreachable: {err}", transient=True) from err
        SMTP.succeeded(started)


def _subject(delivery: DeliveryInput, price: bool = False) -> str:
    what = {
        Notice.CHANGED: "price changed" if price else "changed",
        Notice.FAILING: "is failing",
        Notice.RECOVERED: "recovered",
    }[delivery.notice]
    return f"[pricewatch] {delivery.target_id} {what} ({format_slot(delivery.result.slot)})"
