"""The monitor watching itself (issue 48): with a real Postgres and a real local receiver
(Apprise's json://), an unwell deployment is told once per episode and its recovery once,
whatever repeats: the next evaluation, two workers evaluating at once, a channel that was
away."""

import asyncio
import dataclasses
from datetime import timedelta

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.checks import CheckActivities
from activities.notify import NotifyActivities
from activities.retention import Retention, RetentionActivities
from activities.selfwatch import SelfWatchActivities, Watch
from client.temporal import DATA_CONVERTER, ensure_selfwatch_schedule
from fetchers.http import new_client
from pricewatch.names import SELFWATCH_SCHEDULE_ID
from pricewatch.settings import Settings
from tests.conftest import LOOPBACK, Services
from tests.helpers import DEFAULT_TUNING, NO_SMTP
from workers.worker import Activities, build_worker


async def evaluate(pool: asyncpg.Pool, watch: Watch) -> None:
    await ActivityEnvironment().run(SelfWatchActivities(pool, LOOPBACK, watch).watch_self)


def told(services: Services) -> list[str]:
    return [body["title"] for kind, body in services.received if kind == "json"]


async def test_told_once_when_unwell_and_once_when_recovered(
    pool: asyncpg.Pool, services_app: Services
) -> None:
    watch = Watch((services_app.urls()["json"],), 0.9, 3, timedelta(hours=1))
    # A target every minute whose next slot is 10 minutes behind: 10 intervals unchecked.
    await pool.execute(
        "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) "
        "VALUES ('stuck', 'https://example.com/', 60, now() - interval '1 hour', "
        "        date_trunc('minute', now()) - interval '10 min')"
    )
    await evaluate(pool, watch)
    assert told(services_app) == ["pricewatch is unwell"]
    [(_, body)] = services_app.received
    assert "1 target unchecked for 3 intervals or more: stuck" in body["message"]

    # Still unwell at the next pass, and two workers evaluating at once: nothing more.
    await evaluate(pool, watch)
    await asyncio.gather(evaluate(pool, watch), evaluate(pool, watch))
    assert told(services_app) == ["pricewatch is unwell"]

    # Checked again: one recovery notice, then nothing at later (or repeated) passes.
    await pool.execute("UPDATE monitor_targets SET next_slot = now() + interval '1 min'")
    await asyncio.gather(evaluate(pool, watch), evaluate(pool, watch))
    await evaluate(pool, watch)
    assert told(services_app) == ["pricewatch is unwell", "pricewatch recovered"]
    assert "Well again after" in services_app.received[-1][1]["message"]
    episodes = await pool.fetch("SELECT * FROM selfwatch_episodes")
    assert len(episodes) == 1 and episodes[0]["ended_at"] is not None
    rows = await pool.fetch("SELECT notice, status, message_id FROM deliveries ORDER BY notice")
    assert [(r["notice"], r["status"]) for r in rows] == [("recovered", "sent"), ("unwell", "sent")]
    assert len({r["message_id"] for r in rows}) == 2

    # A new episode is told again, as its own.
    await pool.execute("UPDATE monitor_targets SET next_slot = now() - interval '10 min'")
    await evaluate(pool, watch)
    assert told(services_app)[-1] == "pricewatch is unwell"
    assert len(told(services_app)) == 3


async def test_a_channel_away_hears_the_notice_at_a_later_pass_once(
    pool: asyncpg.Pool, services_app: Services
) -> None:
    """The receiver answers 503 at first: the pass fails (Temporal retries it) and leaves
    the notice owed; the next pass tells it, once, and the recovery after it."""
    watch = Watch((services_app.urls()["json"],), 0.9, 3, timedelta(hours=1))
    await pool.execute(
        "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) "
        "VALUES ('stuck', 'https://example.com/', 60, now() - interval '1 hour', "
        "        now() - interval '10 min')"
    )
    services_app.answers["json"] = [503]
    with pytest.raises(ApplicationError):
        await evaluate(pool, watch)
    assert await pool.fetchval("SELECT status FROM deliveries") == "pending"
    await pool.execute("UPDATE monitor_targets SET next_slot = now() + interval '1 min'")
    await evaluate(pool, watch)  # recovered meanwhile: the start first, then the end
    await evaluate(pool, watch)
    assert told(services_app) == ["pricewatch is unwell"] * 2 + ["pricewatch recovered"]
    assert services_app.received[0][1] == services_app.received[1][1]  # the refused, then sent


async def test_low_on_time_rate_is_unwell(pool: asyncpg.Pool, services_app: Services) -> None:
    """Half the window's slots recorded late: below a 90% threshold, once there are as many
    settled slots as the rate needs to be judged."""
    watch = Watch((services_app.urls()["json"],), 0.9, 3, timedelta(hours=1), min_slots=5)
    await pool.execute(
        "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) "
        "VALUES ('slow', 'https://example.com/', 600, now() - interval '1 hour', "
        "        now() + interval '5 min')"
    )
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status, "
        "                           result_hash) "
        "SELECT 'slow:' || n, 'slow', now() - make_interval(mins => 10 * n), "
        "       now() - make_interval(mins => 10 * n) + make_interval(secs => 200 * (n % 2)), "
        "       'unchanged', 'h' FROM generate_series(1, 4) n"
    )
    await evaluate(pool, watch)
    assert services_app.received == []  # 4 slots: too few to judge
    await evaluate(pool, dataclasses.replace(watch, min_slots=4))
    [(_, body)] = services_app.received
    assert "50% of 4 slots on time in the last 1h (below 90%)" in body["message"]


def test_off_unless_channels_are_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRICEWATCH_SELFWATCH_NOTIFY", raising=False)
    assert Watch.of(Settings()) is None
    monkeypatch.setenv("PRICEWATCH_SELFWATCH_NOTIFY", "json://127.0.0.1:9/a, json://127.0.0.1:9/b")
    watch = Watch.of(Settings())
    assert watch is not None and watch.urls == ("json://127.0.0.1:9/a", "json://127.0.0.1:9/b")
    monkeypatch.setenv("PRICEWATCH_SELFWATCH_NOTIFY", "nosuch://secret-token")
    with pytest.raises(ValueError, match=r"^PRICEWATCH_SELFWATCH_NOTIFY: ") as caught:
        Watch.of(Settings())
    assert "secret-token" not in str(caught.value)


async def test_the_schedule_runs_a_pass_on_a_worker(
    temporal_address: str, pool: asyncpg.Pool, services_app: Services, task_queue: str
) -> None:
    """A real dev server: the worker's Schedule starts WatchSelf, whose pass tells."""
    watch = Watch((services_app.urls()["json"],), 0.9, 3, timedelta(hours=1))
    await pool.execute(
        "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) "
        "VALUES ('stuck', 'https://example.com/', 60, now() - interval '1 hour', "
        "        now() - interval '10 min')"
    )
    client = await Client.connect(temporal_address, data_converter=DATA_CONVERTER)
    async with new_client(LOOPBACK) as http:
        activities = Activities(
            CheckActivities(pool, http),
            NotifyActivities(pool, http, NO_SMTP, LOOPBACK),
            RetentionActivities(pool, Retention()),
            SelfWatchActivities(pool, LOOPBACK, watch),
        )
        async with build_worker(client, task_queue, activities, DEFAULT_TUNING):
            await ensure_selfwatch_schedule(client, task_queue, timedelta(seconds=10))
            handle = client.get_schedule_handle(SELFWATCH_SCHEDULE_ID)
            try:
                await handle.trigger()
                async with asyncio.timeout(30):
                    while not services_app.received:
                        await services_app.arrived.wait()
            finally:
                await handle.delete()
    assert told(services_app) == ["pricewatch is unwell"]
