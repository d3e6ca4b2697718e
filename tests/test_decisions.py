"""What a check decides, with literal values and properties (see `pricewatch.decisions`)."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from temporalio.common import RetryPolicy

from pricewatch.decisions import comparable, compare, final_result, retry_delay, rules_fingerprint
from pricewatch.models import CheckKind, CheckResult, CheckStatus
from pricewatch.policy import CHECK_RETRY

T0 = datetime(2026, 8, 7, 8, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
hashes = st.text(alphabet="0123456789abcdef", min_size=1, max_size=4)


def stored(status: CheckStatus, kind: CheckKind = CheckKind.SCHEDULED) -> CheckResult:
    observed = status in (CheckStatus.UNCHANGED, CheckStatus.CHANGED)
    return CheckResult(
        work_id="acme:x", slot=T0, kind=kind, status=status, checked_at=T0,
        attempt_count=1, result_hash="h" if observed else None,
    )  # fmt: skip


@given(
    status=st.sampled_from(CheckStatus),
    kind=st.sampled_from(CheckKind),
    next_slot=st.sampled_from([None, T0 - HOUR, T0, T0 + HOUR]),
    retrying=st.booleans(),
)
def test_what_is_final(
    status: CheckStatus, kind: CheckKind, next_slot: datetime | None, retrying: bool
) -> None:
    """A result is always final; a failed or retrying slot only once a schedule that moved
    past it gave it up, and never for a retry on demand."""
    row = stored(status, kind)
    settled = status not in (CheckStatus.RETRYING, CheckStatus.FAILED)
    given_up = kind is CheckKind.SCHEDULED and next_slot is not None and next_slot > T0
    expected = row if settled or (given_up and not retrying) else None
    assert final_result(row, next_slot, retrying=retrying) == expected


def test_nothing_stored_is_never_final() -> None:
    assert final_result(None, T0 + HOUR) is None


@given(previous=st.none() | hashes, new=hashes)
def test_the_baseline_and_an_equal_hash_are_unchanged_anything_else_changed(
    previous: str | None, new: str
) -> None:
    changed = previous is not None and previous != new
    assert compare(previous, new) is (CheckStatus.CHANGED if changed else CheckStatus.UNCHANGED)


def test_other_extraction_rules_start_a_new_baseline() -> None:
    rules = rules_fingerprint("#price", None, None)
    assert rules == rules_fingerprint("#price", None, None)
    assert comparable(rules, rules)
    assert not comparable(rules_fingerprint(".price", None, None), rules)
    assert not comparable(None, rules)  # rows from before rules were recorded


def test_retry_delays_follow_the_check_policy() -> None:
    """30 s, doubling, capped at 15 min; Retry-After wins; none after the last attempt."""
    many = RetryPolicy(
        initial_interval=CHECK_RETRY.initial_interval,
        backoff_coefficient=CHECK_RETRY.backoff_coefficient,
        maximum_interval=CHECK_RETRY.maximum_interval,
        maximum_attempts=10,
    )
    delays = [retry_delay(many, attempt) for attempt in range(1, 11)]
    minutes = [d.total_seconds() / 60 if d else None for d in delays]
    assert minutes == [0.5, 1, 2, 4, 8, 15, 15, 15, 15, None]
    assert retry_delay(many, 2, timedelta(seconds=7)) == timedelta(seconds=7)
    assert retry_delay(CHECK_RETRY, CHECK_RETRY.maximum_attempts) is None


@given(attempt=st.integers(1, 50), seconds=st.integers(1, 600), cap=st.integers(1, 3600))
def test_retry_delays_never_shrink_and_never_pass_the_cap(
    attempt: int, seconds: int, cap: int
) -> None:
    policy = RetryPolicy(
        initial_interval=timedelta(seconds=seconds),
        maximum_interval=timedelta(seconds=max(cap, seconds)),
        maximum_attempts=0,  # unlimited
    )
    now, later = retry_delay(policy, attempt), retry_delay(policy, attempt + 1)
    assert now is not None and later is not None
    assert now <= later <= timedelta(seconds=max(cap, seconds))
