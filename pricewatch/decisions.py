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


PRICE_READER = "reader-4"
"""How price mode reads a page. A new reader (1.3: the current price over the struck-out one,
stock; 1.12: the period of each price, part of the listing; 1.13: `hour`, a period) starts
each price target from a new baseline, so a reading it corrects is not told as a move."""


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


# Below this, a delay is the ordinary cost of a check (a wake-up, a fetch), not a cause.
NOTABLE_DELAY = timedelta(seconds=1)


def skip_cause(
    *,
    late: timedelta,
    took: timedelta = timedelta(0),
    attempts: int | None = 1,
    frozen: timedelta = timedelta(0),
    database_away: timedelta = timedelta(0),
) -> str:
    """What held a slot's check back so that later slots came due before it was final, as
    the skipped rows say it: from facts the check measured, never a guess. `late`: how long
    after its slot the final attempt began (the database's clock at its claim); `took`: how
    long that attempt ran; `attempts`: how many the slot needed; `frozen` and
    `database_away`: how long this worker did not run, and Postgres was unreachable, since
    the slot (0: not that this worker saw). `attempts` None: they all failed, `late` after
    the slot. "cause unknown" if nothing stands out."""
    causes = []
    if attempts is None:
        causes.append(f"its attempts failed until {_duration(late)} after the slot")
    elif attempts > 1:
        causes.append(f"its check needed {attempts} attempts, the last began "
                      f"{_duration(late)} after the slot")  # fmt: skip
    elif late >= NOTABLE_DELAY:
        explained = max(frozen, database_away) >= NOTABLE_DELAY  # then that is why
        woke = "" if explained else " (the workflow woke late)"
        causes.append(f"its check began {_duration(late)} after the slot{woke}")
    if took >= NOTABLE_DELAY:
        causes.append(f"its fetch took {_duration(took)}")
    if frozen >= NOTABLE_DELAY:
        causes.append(f"this worker was frozen for {_duration(frozen)}")
    if database_away >= NOTABLE_DELAY:
        causes.append(f"Postgres was unreachable for {_duration(database_away)}")
    return "; ".join(causes) or "cause unknown"


def _duration(value: timedelta) -> str:
    """`52 s`, `3 min 5 s`: a delay in plain words, whole seconds."""
    seconds = max(0, round(value.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
