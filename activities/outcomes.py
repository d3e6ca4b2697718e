"""What one fetch found, ready to commit: the status against the last observation, and for
a new state (the baseline, a change) a compressed snapshot and an excerpt of the change."""

import asyncio

from activities import store
from fetchers.http import INLINE_WORK_BYTES, FetchError, Page
from pricewatch import prices
from pricewatch.decisions import compare
from pricewatch.models import CheckStatus, PriceSettings
from readers import snapshots

MAX_SKIPPED_VALUES = 20  # a listing page of 500 "Call for price" rows names the first 20


async def outcome_of(
    claim: store.Claim, page: Page, rules: str, price_mode: PriceSettings | None = None
) -> store.Outcome:
    """`outcome`, in a thread only when it has real work: a big page, or a change (the
    excerpt diffs the previous snapshot, which can be much bigger than the page)."""
    status = compare(claim.previous_hash, page.sha256) if page.sha256 else None
    if page.size <= INLINE_WORK_BYTES and status is not CheckStatus.CHANGED:
        return outcome(claim, page, rules, status, price_mode)
    return await asyncio.to_thread(outcome, claim, page, rules, status, price_mode)


def outcome(
    claim: store.Claim,
    page: Page,
    rules: str,
    status: CheckStatus | None,
    price_mode: PriceSettings | None = None,
) -> store.Outcome:
    """A 304 is the page as it was; a new state (the baseline, a change) keeps a snapshot
    and, for a change, an excerpt of what changed. In price mode every row keeps the prices
    seen, and a change says which moves the rules tell (none: the channels hear nothing)."""
    if page.not_modified:
        if claim.previous_hash is None:
            raise FetchError("HTTP 304 to a request that named no version", transient=False)
        return store.Outcome(
            status=CheckStatus.UNCHANGED,
            result_hash=claim.previous_hash,
            previous_hash=claim.previous_hash,
            http_status=304,
            body_bytes=0,
            etag=page.etag or claim.previous_etag,
            last_modified=page.last_modified or claim.previous_last_modified,
            rules=rules,
            prices=claim.previous_prices,
            skipped_values=claim.previous_skipped_values,  # as it was, too
        )
    assert page.sha256 is not None and page.text is not None and status is not None
    new_state = status is CheckStatus.CHANGED or claim.previous_hash is None
    change = None
    if status is CheckStatus.CHANGED and claim.previous_snapshot is not None:
        change = snapshots.excerpt(snapshots.decompress(claim.previous_snapshot), page.text)
    moves = None
    if status is CheckStatus.CHANGED and price_mode is not None and page.prices is not None:
        moves = prices.moves(claim.previous_prices or [], page.prices, price_mode)
    return store.Outcome(
        status=status,
        result_hash=page.sha256,
        previous_hash=claim.previous_hash,
        http_status=page.status_code,
        body_bytes=page.size,
        etag=page.etag,
        last_modified=page.last_modified,
        snapshot=snapshots.compress(page.text) if new_state else None,
        excerpt=change,
        rules=rules,
        prices=page.prices,
        price_moves=moves,
        notify=moves is None or prices.tells(moves),
        skipped_values=page.skipped[:MAX_SKIPPED_VALUES],
        screenshot=page.screenshot if new_state else None,
    )
