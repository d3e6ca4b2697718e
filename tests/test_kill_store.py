"""Precise tests for the store's claim and commit (activities/store.py, sql/queries.sql) that
`make mutants` showed missing: each kills mutants no other test noticed."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import asyncpg
import pytest

from activities import store
from pricewatch.models import CheckKind, CheckStatus, TargetConfig
from pricewatch.prices import Move, Price
from pricewatch.slots import work_id

T0 = datetime(2036, 8, 7, 8, 0, tzinfo=UTC)  # ahead of the database's clock
HOUR = timedelta(hours=1)
LEASE = timedelta(seconds=90)
CONFIG = TargetConfig(target_id="acme", url="https://example.com/pricing", interval_seconds=3600)
PRICES = [Price(name="Pro", amount=Decimal("13.00"), currency="EUR", regular=Decimal("15.00"))]
MOVES = [Move(name="Pro", old=Decimal("12.00"), new=Decimal("13.00"), currency="EUR",
              old_currency="EUR", rules=("drop",))]  # fmt: skip
# Every field set, each to a value of its own, so a field passed as another (or as nothing)
# shows.
FULL = store.Outcome(
    status=CheckStatus.CHANGED, result_hash="b" * 64, previous_hash="a" * 64, http_status=203,
    body_bytes=1234, etag='"v2"', last_modified="Fri, 04 Dec 2026 10:00:00 GMT",
    snapshot=b"the page text", excerpt="12 -> 13", rules="price:.amount",
    prices=PRICES, price_moves=MOVES, notify=False, skipped_values=["Team: no number"],
    screenshot=b"\x89PNG",
)  # fmt: skip


@pytest.fixture
async def target(pool: asyncpg.Pool) -> asyncpg.Pool:
    await store.sync_target(pool, CONFIG, next_slot=T0, enabled=True)
    return pool


async def claim(pool: asyncpg.Pool, execution_id: str, slot: datetime = T0) -> store.Claim:
    return await store.claim(
        pool, target_id="acme", work_id=work_id("acme", slot), execution_id=execution_id,
        lease=LEASE, on_schedule=True, slot=slot,
    )  # fmt: skip


async def test_every_field_of_an_outcome_is_stored_and_read_back_by_the_next_claim(
    target: asyncpg.Pool,
) -> None:
    first = await claim(target, "a")
    assert first.claimed and first.lease_left is None
    assert first.previous_skipped_values == [] and first.previous_prices is None
    assert first.claimed_at is not None
    assert abs(first.claimed_at - await target.fetchval("SELECT now()")) < timedelta(seconds=5)
    result = await store.commit(
        target, target_id="acme", execution_id="a", work_id=work_id("acme", T0), slot=T0,
        kind=CheckKind.SCHEDULED, outcome=FULL, advance=True,
    )  # fmt: skip
    assert result is not None
    assert (result.status, result.result_hash, result.previous_hash, result.notify) == (
        CheckStatus.CHANGED, "b" * 64, "a" * 64, False,
    )  # fmt: skip
    row = await target.fetchrow("SELECT * FROM source_checks")
    assert row is not None
    assert {k: row[k] for k in ("http_status", "body_bytes", "etag", "last_modified", "snapshot",
                                "excerpt", "rules", "skipped_values", "screenshot", "kind")} == {
        "http_status": 203, "body_bytes": 1234, "etag": '"v2"',
        "last_modified": "Fri, 04 Dec 2026 10:00:00 GMT", "snapshot": b"the page text",
        "excerpt": "12 -> 13", "rules": "price:.amount", "skipped_values": ["Team: no number"],
        "screenshot": b"\x89PNG", "kind": "scheduled",
    }  # fmt: skip
    assert json.loads(row["prices"]) == [p.as_json() for p in PRICES]
    assert json.loads(row["price_moves"]) == [m.as_json() for m in MOVES]

    following = await claim(target, "b", T0 + HOUR)
    assert following.claimed
    assert (following.previous_hash, following.previous_etag) == ("b" * 64, '"v2"')
    assert following.previous_last_modified == "Fri, 04 Dec 2026 10:00:00 GMT"
    assert (following.previous_snapshot, following.previous_rules) == (
        b"the page text", "price:.amount",
    )  # fmt: skip
    assert following.previous_prices == PRICES
    assert following.previous_skipped_values == ["Team: no number"]
    bare = following.without_previous()
    assert (bare.previous_hash, bare.previous_etag, bare.previous_last_modified,
            bare.previous_snapshot, bare.previous_prices, bare.previous_skipped_values) == (
        None, None, None, None, None, [],
    )  # fmt: skip
    assert (bare.previous_rules, bare.claimed, bare.next_slot) == ("price:.amount", True, T0 + HOUR)


async def test_a_failed_attempt_says_when_it_is_retried(target: asyncpg.Pool) -> None:
    await claim(target, "a")
    retrying = store.Outcome(
        status=CheckStatus.RETRYING, error_message="HTTP 503", next_attempt_in=timedelta(minutes=2)
    )
    result = await store.commit(
        target, target_id="acme", execution_id="a", work_id=work_id("acme", T0), slot=T0,
        kind=CheckKind.SCHEDULED, outcome=retrying, advance=False,
    )  # fmt: skip
    assert result is not None and result.error_message == "HTTP 503"
    assert result.next_attempt_at is not None
    wait = result.next_attempt_at - result.checked_at
    assert wait == timedelta(minutes=2)
    assert result.next_slot is None  # not advanced: no new slot to report


async def test_a_lease_held_by_another_attempt_says_how_long_it_has_left(
    target: asyncpg.Pool,
) -> None:
    assert (await claim(target, "holder")).claimed
    refused = await claim(target, "other")
    assert not refused.claimed
    assert refused.lease_left is not None
    assert LEASE - timedelta(seconds=10) < refused.lease_left <= LEASE
    left = await store.lease_left(target, "acme")
    assert left is not None and LEASE - timedelta(seconds=10) < left <= LEASE
    assert await store.extend_lease(
        target, target_id="acme", execution_id="holder", lease=timedelta(minutes=10)
    )
    left = await store.lease_left(target, "acme")
    assert left is not None and left > 5 * LEASE
    assert not await store.extend_lease(
        target, target_id="acme", execution_id="other", lease=timedelta(minutes=30)
    )
    left = await store.lease_left(target, "acme")
    assert left is not None and left <= timedelta(minutes=10)
    assert await store.release(target, target_id="acme", execution_id="holder")
    assert await store.lease_left(target, "acme") is None
    assert not await store.release(target, target_id="acme", execution_id="holder")


async def test_a_claim_of_a_target_that_does_not_exist(pool: asyncpg.Pool) -> None:
    missing = await claim(pool, "a")
    assert (missing.target_exists, missing.enabled, missing.next_slot, missing.claimed) == (
        False, None, None, False,
    )  # fmt: skip
    assert await store.lease_left(pool, "acme") is None


async def test_a_dead_letter_says_its_skip_cause_and_its_attempt_takes_the_lease_over(
    target: asyncpg.Pool,
) -> None:
    """record_failed: a lease an earlier attempt of the same run holds is no reason to wait;
    the slots the schedule passes say what held the slot back."""
    assert (await claim(target, "run/1/1")).claimed
    result = await store.record_failed(
        target, target_id="acme", work_id=work_id("acme", T0), slot=T0,
        kind=CheckKind.SCHEDULED, error_message="gave up", advance=True,
        temporal_now=T0 + 1.5 * HOUR, execution_id="run/2/1", skip_cause="the database was away",
    )  # fmt: skip
    assert result is not None
    assert (result.status, result.next_slot) == (CheckStatus.FAILED, T0 + 2 * HOUR)
    skipped = await target.fetchval(
        "SELECT error_message FROM source_checks WHERE status = 'skipped'"
    )
    assert skipped == (
        f"not checked: came due before {work_id('acme', T0)} gave up: the database was away"
    )
    assert await store.lease_left(target, "acme") is None


async def test_a_rerun_says_why_it_skips_and_where_the_schedule_stands(
    target: asyncpg.Pool,
) -> None:
    moved = await store.advance_past_final(
        target, target_id="acme", slot=T0, temporal_now=T0 + 1.5 * HOUR, skip_cause="paused"
    )
    assert moved == T0 + 2 * HOUR
    assert await target.fetchval("SELECT error_message FROM source_checks") == (
        "not checked: the schedule was behind: paused"
    )
    assert await store.advance_past_final(
        target, target_id="nobody", slot=T0, temporal_now=None
    ) is None  # fmt: skip


async def test_a_commit_says_the_skip_cause_on_the_slots_it_passes(target: asyncpg.Pool) -> None:
    await claim(target, "a")
    await store.commit(
        target, target_id="acme", execution_id="a", work_id=work_id("acme", T0), slot=T0,
        kind=CheckKind.SCHEDULED, outcome=FULL, advance=True, temporal_now=T0 + 1.5 * HOUR,
        skip_cause="a slow page",
    )  # fmt: skip
    assert (
        await target.fetchval("SELECT error_message FROM source_checks WHERE status = 'skipped'")
        == f"not checked: came due before {work_id('acme', T0)} was final: a slow page"
    )
