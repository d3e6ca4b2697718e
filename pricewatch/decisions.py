"""What a check decides, as pure functions of what it read (no I/O, no clock).

The activities read rows, ask these, and write rows; `tests/test_decisions.py` covers them
with literal values and properties, as `tests/test_slots.py` covers the grid. Where the
schedule goes next is decided in SQL by the database's clock (`grid_after`), property-tested
against `pricewatch.slots`.
"""

import hashlib
import json
from datetime import datetime, timedelta

from temporalio.common import RetryPolicy

from pricewatch.models import CheckKind, CheckResult, CheckStatus, PriceSettings, RenderSettings

UNSETTLED = (CheckStatus.RETRYING, CheckStatus.FAILED)


def final_result(
    stored: CheckResult | None, next_slot: datetime | None, *, retrying: bool = False
) -> CheckResult | None:
    """The stored result if the slot needs no more work, else None (fetch it).

    A result is final. A failed or retrying row is final only for a scheduled slot the
    schedule has moved past (it gave up, or it was abandoned); a retry on demand re-runs
    it."""
    if stored is None:
        return None
    if stored.status not in UNSETTLED:
        return stored
    moved_on = next_slot is not None and next_slot > stored.slot
    if not retrying and stored.kind is CheckKind.SCHEDULED and moved_on:
        return stored
    return None


PRICE_READER = "reader-2"
"""How price mode reads a page. A new reader (1.3: the current price over the struck-out one,
stock) starts each price target from a new baseline, so a reading it corrects is not told as a
move."""


def rules_fingerprint(
    selector: str | None,
    ignore: str | None,
    json_pointer: str | None,
    price_mode: PriceSettings | None = None,
    render: RenderSettings | None = None,
) -> str:
    """What the hash depends on besides the page: the extraction rules, and in price mode
    the price rules too (new rules start from a new baseline, so they tell no stale move)."""
    rules = [selector, ignore, json_pointer]
    if price_mode is not None:
        rules += [price_mode.model_dump_json(), PRICE_READER]
    if render is not None:  # a rendered page is another text than the served one
        rules.append(render.model_dump_json())
    return hashlib.sha256(json.dumps(rules).encode()).hexdigest()[:16]


def comparable(previous_rules: str | None, rules: str) -> bool:
    """An observation made under other extraction rules cannot be compared with one made
    under these: the next check is a new baseline, not a change."""
    return previous_rules == rules


def compare(previous_hash: str | None, new_hash: str) -> CheckStatus:
    """The first good check is the baseline: it is `unchanged` and alerts nobody."""
    if previous_hash is None or previous_hash == new_hash:
        return CheckStatus.UNCHANGED
    return CheckStatus.CHANGED


def retry_delay(
    policy: RetryPolicy, attempt: int, retry_after: timedelta | None = None
) -> timedelta | None:
    """How long Temporal waits after failed attempt `attempt` (1-based) under `policy`, as it
    computes it: `Retry-After` if the error carried one, else the backoff, capped. None
    after the last attempt."""
    if 0 < policy.maximum_attempts <= attempt:
        return None
    if retry_after is not None:
        return retry_after
    # Temporal's default cap is 100 times the initial interval.
    cap = policy.maximum_interval or 100 * policy.initial_interval
    growth = policy.backoff_coefficient ** (attempt - 1)
    seconds = min(policy.initial_interval.total_seconds() * growth, cap.total_seconds())
    return timedelta(seconds=seconds)
