"""The monitor watching itself (issue 48): each pass asks `health`'s query (one window on
Postgres's clock) whether the deployment is unwell, its on-time rate below a threshold or a
target unchecked for N intervals, and tells the chosen channels once when an episode begins
and once when it ends.

Once per episode holds because every step is keyed in the database, never in a worker's
memory: an episode opens only where none is open (a partial unique index), so two workers or
a retried pass open one between them; its notices are `deliveries` rows keyed (work id
`selfwatch:<episode>`, channel, notice), taken with a sending lease and never sent again
once recorded sent, as a target's notices are. A notice not yet told (a channel away) is
tried again by the next pass. As for any Apprise send, the one window left is "sent, then
the worker died before recording it": that notice goes out twice (docs/notifications.md).
"""

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg
from temporalio import activity

from activities import services
from activities.health import schedule_health
from activities.notify import SEND_DEADLINE, SENDING_LEASE
from fetchers.guard import AddressPolicy
from pricewatch.durations import format_duration
from pricewatch.names import Activity
from pricewatch.policy import TRANSIENT_DELIVERY_ERROR, expected_failure
from pricewatch.settings import Settings

LOG = logging.getLogger(__name__)
# Episodes older than this are not told any more (a channel away for a week).
TELL_WITHIN = timedelta(days=7)
# How many unchecked targets a notice names; the rest are counted.
NAMED = 5


@dataclass(frozen=True)
class Watch:
    """What makes the deployment unwell, and whom to tell (Apprise URLs)."""

    urls: tuple[str, ...]
    on_time_below: float
    unchecked_after: int
    window: timedelta
    min_slots: int = 10

    @classmethod
    def of(cls, settings: Settings) -> "Watch | None":
        """The settings' watch; None when no channel is set (self-watch is off). A URL
        Apprise cannot use is a ValueError naming the setting, never the URL."""
        urls = settings.selfwatch_urls()
        if not urls:
            return None
        for url in urls:
            try:
                services.parse(url)
            except ValueError as err:
                raise ValueError(f"PRICEWATCH_SELFWATCH_NOTIFY: {err}") from None
        return cls(
            urls, settings.selfwatch_on_time_below, settings.selfwatch_unchecked_after,
            settings.selfwatch_window, settings.selfwatch_min_slots,
        )  # fmt: skip


@dataclass(frozen=True)
class Owed:
    episode: int
    notice: str
    reason: str
    started_at: datetime
    ended_at: datetime | None


async def unwell(pool: asyncpg.Pool, watch: Watch) -> str | None:
    """Why the deployment is unwell now, in one line; None if it is well."""
    health = await schedule_health(pool, watch.window, watch.unchecked_after)
    reasons = []
    rate = health.deployment.on_time_rate
    settled = health.deployment.due - health.deployment.pending - health.deployment.retrying
    if rate is not None and settled >= watch.min_slots and rate < watch.on_time_below:
        reasons.append(
            f"{rate:.0%} of {settled} slots on time in the last "
            f"{format_duration(watch.window)} (below {watch.on_time_below:.0%})"
        )
    if unchecked := health.unchecked:
        named = ", ".join(unchecked[:NAMED]) + (
            f" and {len(unchecked) - NAMED} more" if len(unchecked) > NAMED else ""
        )
        reasons.append(
            f"{len(unchecked)} target{'s' if len(unchecked) > 1 else ''} unchecked for "
            f"{watch.unchecked_after} intervals or more: {named}"
        )
    return "; ".join(reasons) or None


async def settle_episode(pool: asyncpg.Pool, reason: str | None) -> None:
    """Open an episode if unwell and none is open; end the open one if well."""
    if reason is not None:
        await pool.execute(
            "INSERT INTO selfwatch_episodes (reason) VALUES ($1) "
            "ON CONFLICT ((true)) WHERE ended_at IS NULL DO NOTHING",
            reason,
        )
    else:
        await pool.execute("UPDATE selfwatch_episodes SET ended_at = now() WHERE ended_at IS NULL")


def channel_id(url: str) -> str:
    """A channel's name in deliveries: a digest, never the URL (it holds credentials)."""
    return "selfwatch-" + hashlib.sha256(url.encode()).hexdigest()[:12]


async def owed(pool: asyncpg.Pool, channel: str) -> list[Owed]:
    """This channel's notices not yet sent nor given up, oldest episode first, `unwell`
    before `recovered`: a channel that missed the start hears it before the end."""
    rows = await pool.fetch(
        """
        SELECT e.id, n.notice, e.reason, e.started_at, e.ended_at
          FROM selfwatch_episodes e,
               LATERAL (VALUES ('unwell', 1), ('recovered', 2)) AS n(notice, place)
         WHERE e.started_at > now() - $2::interval
           AND (n.notice = 'unwell' OR e.ended_at IS NOT NULL)
           AND NOT EXISTS (
               SELECT 1 FROM deliveries d
                WHERE d.work_id = 'selfwatch:' || e.id AND d.channel_id = $1
                  AND d.notice = n.notice AND d.status IN ('sent', 'failed'))
         ORDER BY e.id, n.place
        """,
        channel,
        TELL_WITHIN,
    )
    return [Owed(*row) for row in rows]


def message(owed: Owed) -> tuple[str, str]:
    """A notice's title and body."""
    since = f"{owed.started_at:%Y-%m-%d %H:%M:%S} UTC"
    if owed.notice == "unwell":
        return "pricewatch is unwell", f"Since {since}: {owed.reason}."
    assert owed.ended_at is not None
    lasted = format_duration(
        timedelta(seconds=round((owed.ended_at - owed.started_at).total_seconds()))
    )
    return "pricewatch recovered", f"Well again after {lasted} (since {since}: {owed.reason})."


class SelfWatchActivities:
    def __init__(self, pool: asyncpg.Pool, policy: AddressPolicy, watch: Watch | None) -> None:
        self.pool = pool
        self.policy = policy
        self.watch = watch

    @activity.defn(name=Activity.WATCH_SELF)
    async def watch_self(self) -> None:
        """One pass: settle the episode, then tell each channel what it is owed. A notice
        that could not go now leaves this attempt failed (retried), and the next pass
        tries it too."""
        if self.watch is None:
            return  # not configured on this worker
        await settle_episode(self.pool, await unwell(self.pool, self.watch))
        errors = []
        for url in self.watch.urls:
            if error := await self.tell(url):
                errors.append(error)
        if errors:
            raise expected_failure("; ".join(errors), TRANSIENT_DELIVERY_ERROR)

    async def tell(self, url: str) -> str | None:
        """Send what `url` is owed, in order; the first error stops this channel's turn."""
        channel = channel_id(url)
        for notice in await owed(self.pool, channel):
            work_id = f"selfwatch:{notice.episode}"
            taken = await self.pool.fetchval(
                """
                INSERT INTO deliveries AS d
                    (work_id, channel_id, notice, message_id, sending_until)
                VALUES ($1, $2, $3, $4, now() + $5::interval)
                ON CONFLICT (work_id, channel_id, notice) DO UPDATE
                   SET sending_until = excluded.sending_until
                 WHERE d.status = 'pending'
                   AND (d.sending_until IS NULL OR d.sending_until < now())
                RETURNING true
                """,
                work_id, channel, notice.notice,
                "msg_" + hashlib.sha256(f"{work_id}|{channel}|{notice.notice}".encode())
                .hexdigest()[:32],
                SENDING_LEASE,
            )  # fmt: skip
            if not taken:  # another pass is sending it, or it was settled meanwhile
                return None
            title, body = message(notice)
            seconds = SEND_DEADLINE.total_seconds()
            try:
                async with asyncio.timeout(seconds + 1):  # `send` keeps to `seconds` itself
                    outcome = await asyncio.to_thread(
                        services.send, url, title, body, self.policy, seconds
                    )
            except TimeoutError:
                outcome = services.Outcome(
                    sent=False, error="the service did not answer in time", transient=True
                )
            status = "sent" if outcome.sent else "pending" if outcome.transient else "failed"
            await self.pool.execute(
                """
                UPDATE deliveries
                   SET status = $4, attempt_count = attempt_count + 1, last_error = $5,
                       sent_at = CASE WHEN $4 = 'sent' THEN now() END, sending_until = NULL
                 WHERE work_id = $1 AND channel_id = $2 AND notice = $3 AND status <> 'sent'
                """,
                work_id, channel, notice.notice, status, outcome.error,
            )  # fmt: skip
            if not outcome.sent:
                LOG.warning("self-watch notice to %s not sent: %s", channel, outcome.error)
                return f"{channel}: {outcome.error}"
        return None
