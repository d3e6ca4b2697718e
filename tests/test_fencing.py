"""Stale attempts are fenced out by the lease holder, with real Postgres and a real page
server. Each attempt is the real `check_slot` activity with its own execution id (the SDK's
ActivityEnvironment supplies the attempt's info), so the race is reproduced exactly."""

import asyncio
from datetime import timedelta

import asyncpg
import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities import checks, store
from activities.checks import CheckActivities
from pricewatch.models import CheckInput, CheckResult, CheckStatus, TargetConfig
from pricewatch.policy import LEASE_HELD
from tests.conftest import PageServer
from tests.helpers import SLOT, attempt, local_attempt


@pytest.fixture
async def check(pool: asyncpg.Pool, page_server: PageServer) -> CheckInput:
    """A target due at SLOT whose page currently says "price 10"."""
    page_server.set("/p", "price 10")
    config = TargetConfig(target_id="acme", url=page_server.url("/p"), interval_seconds=3600)
    await store.sync_target(pool, config, next_slot=SLOT, enabled=True)
    return CheckInput(target_id="acme", url=config.url, slot=SLOT)


async def test_a_zombie_attempt_writes_nothing_after_a_newer_attempt_committed(
    pool: asyncpg.Pool, http: httpx.AsyncClient, page_server: PageServer, check: CheckInput
) -> None:
    """Attempt 1 is stuck in a slow response until Temporal gives up on it and its lease
    lapses; attempt 2 claims and commits; then attempt 1's response arrives."""
    activities = CheckActivities(pool, http)
    hold = page_server.hold_next("/p")
    zombie = asyncio.create_task(attempt(1).run(activities.check_slot, check))
    await asyncio.wait_for(hold.arrived.wait(), timeout=10)
    await pool.execute("UPDATE monitor_targets SET lease_expires_at = now() - interval '1 s'")
    page_server.set("/p", "price 12")

    fresh: CheckResult = await attempt(2).run(activities.check_slot, check)
    hold.release.set()
    late: CheckResult = await zombie

    rows = await pool.fetch("SELECT * FROM source_checks WHERE work_id = $1", check.work_id)
    assert len(rows) == 1
    assert rows[0]["result_hash"] == fresh.result_hash  # the newer attempt's page
    assert rows[0]["attempt_count"] == 1
    assert late.already_recorded and late.result_hash == fresh.result_hash
    target = await pool.fetchrow("SELECT * FROM monitor_targets")
    assert target is not None
    assert target["lease_token"] is None and target["lease_expires_at"] is None
    assert target["next_slot"] > SLOT


async def test_a_long_fetch_heartbeats_and_extends_its_lease(
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    page_server: PageServer,
    check: CheckInput,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checks, "HEARTBEAT_EVERY", timedelta(seconds=0.1))
    heartbeats: list[object] = []
    hold = page_server.hold_next("/p")
    running = asyncio.create_task(
        attempt(1, heartbeats).run(CheckActivities(pool, http).check_slot, check)
    )
    await asyncio.wait_for(hold.arrived.wait(), timeout=10)
    first = await pool.fetchval("SELECT lease_expires_at FROM monitor_targets")
    await asyncio.sleep(0.5)
    later = await pool.fetchval("SELECT lease_expires_at FROM monitor_targets")
    hold.release.set()
    result = await running
    assert later > first, "the heartbeat must push the lease forward"
    assert len(heartbeats) >= 3
    assert result.status is CheckStatus.UNCHANGED


async def test_a_fetch_whose_lease_was_taken_over_stops_and_writes_nothing(
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    page_server: PageServer,
    check: CheckInput,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checks, "HEARTBEAT_EVERY", timedelta(seconds=0.1))
    hold = page_server.hold_next("/p")
    running = asyncio.create_task(attempt(1).run(CheckActivities(pool, http).check_slot, check))
    await asyncio.wait_for(hold.arrived.wait(), timeout=10)
    await pool.execute("UPDATE monitor_targets SET lease_token = 'someone-else'")
    with pytest.raises(ApplicationError) as stopped:
        await running
    hold.release.set()
    assert stopped.value.type == LEASE_HELD
    assert await pool.fetchval("SELECT count(*) FROM source_checks") == 0
    assert await pool.fetchval("SELECT lease_token FROM monitor_targets") == "someone-else"


async def test_a_local_first_attempt_run_again_after_a_crash_does_not_share_the_lease(
    pool: asyncpg.Pool, http: httpx.AsyncClient, page_server: PageServer, check: CheckInput
) -> None:
    """A local attempt is recorded only when it completes, so the worker that replays after
    a crash runs the same "attempt 1" again. It must not pass for the silent one: it finds
    the lease held and backs off; the first one, if it is only slow, still commits once."""
    activities = CheckActivities(pool, http)
    hold = page_server.hold_next("/p")
    silent = asyncio.create_task(local_attempt().run(activities.check_slot, check))
    await asyncio.wait_for(hold.arrived.wait(), timeout=10)
    with pytest.raises(ApplicationError) as refused:
        await local_attempt().run(activities.check_slot, check)
    assert refused.value.type == LEASE_HELD
    hold.release.set()
    committed: CheckResult = await silent
    assert committed.status is CheckStatus.UNCHANGED
    checked = "SELECT count(*) FROM source_checks WHERE status <> 'skipped'"
    assert await pool.fetchval(checked) == 1
