"""Which clock decides which slots a late check passes. Time comes from Temporal or
Postgres, never the worker: a commit moves the schedule past the later of the database's
`now()` and Temporal's time for the attempt, and writes a skipped row for each slot between.
Temporal's time must be a reading of Temporal's clock (when the server started the attempt),
not a plan: an attempt's scheduled time is its failure plus its backoff, and a server can
hand a retry out before then (the chaos run saw one 7 s early after a Temporal freeze);
taken as "now", it skipped slots that had not come due by any clock. Real Postgres, a real
page server and the real check activity (its attempt's info from the SDK's
ActivityEnvironment)."""

import dataclasses
import uuid
from datetime import datetime, timedelta

import asyncpg
import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.testing import ActivityEnvironment

from activities import store
from activities.checks import CheckActivities
from pricewatch.models import CheckInput, CheckResult, TargetConfig
from tests.conftest import PageServer

examples = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


async def due_target(
    pool: asyncpg.Pool, pages: PageServer, seconds: int, behind: int
) -> CheckInput:
    """A new target every `seconds`, whose due slot passed `behind` whole intervals (and
    part of one) ago by the database's clock: its check is that late."""
    target_id = f"clock-{uuid.uuid4().hex[:10]}"
    pages.set(f"/{target_id}", "price 10")
    config = TargetConfig(target_id=target_id, url=pages.url(f"/{target_id}"),
                          interval_seconds=seconds)  # fmt: skip
    now: datetime = await pool.fetchval("SELECT now()")
    slot = now.replace(microsecond=0) - behind * config.interval - timedelta(seconds=0.5)
    await store.sync_target(pool, config, next_slot=slot, enabled=True)
    return CheckInput.of(config, slot)


def retry_attempt(scheduled: datetime, started: datetime) -> ActivityEnvironment:
    """A retry (a normal activity's second attempt) as the server hands it out."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, workflow_run_id="run-1", activity_id="1", attempt=2,
        current_attempt_scheduled_time=scheduled, started_time=started,
    )  # fmt: skip
    return env


@examples
@given(
    seconds=st.integers(min_value=1, max_value=30),
    behind=st.integers(min_value=0, max_value=3),
    early=st.floats(min_value=1, max_value=120),
)
async def test_a_retry_handed_out_before_its_scheduled_time_skips_no_slot_not_yet_due(
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    page_server: PageServer,
    seconds: int,
    behind: int,
    early: float,
) -> None:
    check = await due_target(pool, page_server, seconds, behind)
    started: datetime = await pool.fetchval("SELECT now()")  # Temporal's clock: the same
    env = retry_attempt(scheduled=started + timedelta(seconds=early), started=started)
    result: CheckResult = await env.run(CheckActivities(pool, http).check_slot, check)
    after: datetime = await pool.fetchval("SELECT now()")

    future = await pool.fetch(
        "SELECT work_id, scheduled_for - checked_at AS ahead FROM source_checks"
        " WHERE target_id = $1 AND status = 'skipped' AND scheduled_for > checked_at",
        check.target_id,
    )
    assert not future, [(r["work_id"], r["ahead"]) for r in future]
    # The schedule moved to the first grid point after the database's clock, no further.
    assert result.next_slot is not None
    assert started < result.next_slot <= after + timedelta(seconds=seconds)
    skipped = await pool.fetchval(
        "SELECT count(*) FROM source_checks WHERE target_id = $1 AND status = 'skipped'",
        check.target_id,
    )
    assert skipped == (result.next_slot - check.slot) // timedelta(seconds=seconds) - 1


async def test_temporal_time_ahead_of_the_database_still_moves_the_schedule_past_it(
    pool: asyncpg.Pool, http: httpx.AsyncClient, page_server: PageServer
) -> None:
    """The other side of the rule: when Temporal's clock itself is ahead (the time-skipping
    test server jumps hours), the schedule moves past Temporal's time, or the workflow,
    which sleeps by that clock, would find every slot between the two clocks due at once."""
    check = await due_target(pool, page_server, seconds=10, behind=0)
    ahead = check.slot + timedelta(seconds=45)
    result: CheckResult = await retry_attempt(scheduled=ahead, started=ahead).run(
        CheckActivities(pool, http).check_slot, check
    )
    assert result.next_slot == check.slot + timedelta(seconds=50)
    skipped = await pool.fetch(
        "SELECT scheduled_for FROM source_checks WHERE target_id = $1 AND status = 'skipped'"
        " ORDER BY scheduled_for",
        check.target_id,
    )
    assert [r["scheduled_for"] - check.slot for r in skipped] == [
        timedelta(seconds=s) for s in (10, 20, 30, 40)
    ]
