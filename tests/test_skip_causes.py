"""A skipped slot names what held it back (issue 48), decided where the skip is: the commit
that passes slots writes, on each skipped row, how late the final attempt began (the
database's clock at its claim), how long it ran, how many attempts the slot needed, and a
freeze or an outage this worker saw since the slot; "cause unknown" where none stands out.
The rule is `pricewatch.decisions.skip_cause`; the rows come from real Postgres."""

import time
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from activities import checks, freezes, outages, store
from activities.checks import CheckActivities
from pricewatch.decisions import NOTABLE_DELAY, skip_cause
from pricewatch.models import CheckInput, RecordFailureInput, TargetConfig
from tests.conftest import PageServer
from tests.helpers import attempt, local_attempt

DELAYS = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=2))


@given(late=DELAYS, took=DELAYS, attempts=st.none() | st.integers(1, 20), frozen=DELAYS,
       away=DELAYS)  # fmt: skip
def test_a_cause_is_each_notable_fact_or_cause_unknown(
    late: timedelta, took: timedelta, attempts: int | None, frozen: timedelta, away: timedelta
) -> None:
    said = skip_cause(late=late, took=took, attempts=attempts, frozen=frozen, database_away=away)
    facts = {
        "attempts": attempts is None or attempts > 1,
        "after the slot": attempts is None or attempts > 1 or late >= NOTABLE_DELAY,
        "its fetch took": took >= NOTABLE_DELAY,
        "this worker was frozen for": frozen >= NOTABLE_DELAY,
        "Postgres was unreachable for": away >= NOTABLE_DELAY,
    }
    for words, known in facts.items():
        assert (words in said) is known, (words, said)
    assert (said == "cause unknown") is not any(facts.values())
    assert "\n" not in said and said.strip() == said


def test_the_words_read_plainly() -> None:
    assert skip_cause(late=timedelta(seconds=52)) == (
        "its check began 52 s after the slot (the workflow woke late)"
    )
    assert skip_cause(
        late=timedelta(seconds=185), took=timedelta(seconds=3), attempts=3,
        database_away=timedelta(seconds=20),
    ) == (
        "its check needed 3 attempts, the last began 3 min 5 s after the slot; "
        "its fetch took 3 s; Postgres was unreachable for 20 s"
    )  # fmt: skip
    assert skip_cause(late=timedelta(milliseconds=300)) == "cause unknown"


# An hourly target whose slot came a little over two hours ago: its commit passes two slots.
AGO = timedelta(hours=2, minutes=1)


@pytest.fixture
async def late_check(pool: asyncpg.Pool, page_server: PageServer) -> CheckInput:
    page_server.set("/p", "price 10")
    config = TargetConfig(target_id="acme", url=page_server.url("/p"), interval_seconds=3600)
    slot = (datetime.now(UTC) - AGO).replace(microsecond=0)
    await store.sync_target(pool, config, next_slot=slot, enabled=True)
    await pool.execute("UPDATE monitor_targets SET anchor = $1", slot)
    return CheckInput(target_id="acme", url=config.url, slot=slot)


async def skipped(pool: asyncpg.Pool) -> list[str]:
    rows = await pool.fetch(
        "SELECT error_message FROM source_checks WHERE status = 'skipped' ORDER BY scheduled_for"
    )
    return [row["error_message"] for row in rows]


async def test_a_late_check_says_how_late_on_the_slots_it_passed(
    pool: asyncpg.Pool, http: httpx.AsyncClient, late_check: CheckInput
) -> None:
    await local_attempt().run(CheckActivities(pool, http).check_slot, late_check)
    reasons = await skipped(pool)
    assert len(reasons) == 2, reasons
    for reason in reasons:
        assert reason.startswith(f"not checked: came due before {late_check.work_id} was final: ")
        assert "its check began 2 min" not in reason  # hours, not minutes
        assert "after the slot (the workflow woke late)" in reason, reason
        assert "121 min" in reason, reason  # 2 h 1 min, by the database's clock


async def test_retries_a_freeze_and_an_outage_are_named(
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    late_check: CheckInput,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two failed attempts on the slot's row (this is the third), a 40 s freeze and a 20 s
    Postgres outage that this worker saw since the slot: each is on the skipped rows."""
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at, "
        "status, attempt_count, error_message) "
        "VALUES ($1, 'acme', $2, 'scheduled', now(), 'retrying', 2, 'HTTP 503')",
        late_check.work_id, late_check.slot,
    )  # fmt: skip
    stalls = freezes.Stalls()
    now = time.monotonic()
    stalls.beat(now=now - 100, cpu=time.process_time())
    stalls.beat(now=now - 60, cpu=time.process_time())
    stalls.stop()
    postgres = outages.Dependency("Postgres")
    postgres.outages.append((now - 50, now - 30))
    monkeypatch.setattr(checks, "STALLS", stalls)
    monkeypatch.setattr(checks, "POSTGRES", postgres)

    await attempt(1).run(CheckActivities(pool, http).check_slot, late_check)
    reasons = await skipped(pool)
    assert len(reasons) == 2, reasons
    assert "its check needed 3 attempts, the last began 121 min" in reasons[0], reasons
    assert "this worker was frozen for 40 s" in reasons[0], reasons
    assert "Postgres was unreachable for 20 s" in reasons[0], reasons


async def test_a_dead_letter_says_how_long_its_attempts_failed(
    pool: asyncpg.Pool, http: httpx.AsyncClient, late_check: CheckInput
) -> None:
    failure = RecordFailureInput(
        check=late_check.model_copy(update={"asked_at": datetime.now(UTC)}),
        error_message="HTTP 503",
    )
    await attempt(1).run(CheckActivities(pool, http).record_failed_slot, failure)
    reasons = await skipped(pool)
    assert len(reasons) == 2, reasons
    assert reasons[0].startswith(
        f"not checked: came due before {late_check.work_id} gave up: "
        "its attempts failed until 121 min"
    ), reasons


async def test_a_retry_after_an_outage_counts_the_attempt_the_outage_kept_off_the_row(
    pool: asyncpg.Pool, http: httpx.AsyncClient, late_check: CheckInput
) -> None:
    """The local first attempt failed on Postgres and wrote nothing: the retry (the normal
    activity's first attempt) is the slot's second, whatever the row says."""
    await attempt(1).run(CheckActivities(pool, http).check_slot, late_check)
    reasons = await skipped(pool)
    assert "its check needed 2 attempts, the last began 121 min" in reasons[0], reasons
    assert "woke late" not in reasons[0], reasons
