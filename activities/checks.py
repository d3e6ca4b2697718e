"""The activities: every side effect of monitoring a target.

`CheckActivities` owns the worker's one asyncpg pool and one httpx client. A check may
execute several times for one slot (retries, crashes, resets, zombies); the lease and the
one-row-per-slot record in Postgres make every execution after the first a no-op.
"""

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta

import asyncpg
import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import store
from activities.fetch import FetchError, Page, Request, fetch_page
from activities.metrics import count, observe_seconds
from activities.normalise import Extraction
from activities.outcomes import outcome_of
from activities.tracing import span
from pricewatch.decisions import comparable, final_result, retry_delay, rules_fingerprint
from pricewatch.durations import format_duration
from pricewatch.models import (
    CheckInput,
    CheckKind,
    CheckResult,
    CheckStatus,
    RecordFailureInput,
    RegisterTargetInput,
    Registration,
    RemoveTargetInput,
    SyncTargetInput,
    TargetConfig,
    UnnotifiedQuery,
)
from pricewatch.names import Activity
from pricewatch.policy import (
    CHECK_LEASE,
    CHECK_RETRY,
    INVALID_TARGET,
    LEASE_HELD,
    PERMANENT_FETCH_ERROR,
    SLOT_NOT_DUE,
    TARGET_OUT_OF_SYNC,
    TRANSIENT_FETCH_ERROR,
    expected_failure,
)
from pricewatch.prices import move_line

# One line per check attempt: its target, what became of it and how long it took. What
# `pricewatch dev` prints; in JSON logs with `outcome` and `elapsed_ms` fields.
CHECK_LOG = logging.getLogger("pricewatch.checks")

# A fetch heartbeats (and extends its lease) this often (see HEARTBEAT_TIMEOUT).
HEARTBEAT_EVERY = timedelta(seconds=5)

EPSILON = timedelta(microseconds=1)  # turns the store's open interval into a closed one


def temporal_now(check: CheckInput) -> datetime | None:
    """Temporal's time for this attempt: when the server scheduled it (a normal activity),
    or when the workflow asked for it (a local one, which the worker itself schedules).
    Never the worker's wall clock."""
    info = activity.info()
    if info.is_local:
        return check.asked_at
    return max(filter(None, (check.asked_at, info.current_attempt_scheduled_time)))


def next_attempt_in(err: FetchError) -> timedelta | None:
    """How long until Temporal runs this check again, by the retry policy it runs under;
    None if it will not (a permanent error, or the last attempt). A local first attempt is
    retried by the workflow under CHECK_RETRY (unless the target allows one attempt only:
    then its row reads `retrying` for the moment until the workflow records it failed)."""
    info = activity.info()
    policy = CHECK_RETRY if info.is_local else info.retry_policy
    if not err.transient or policy is None:
        return None
    return retry_delay(policy, info.attempt, err.retry_after)


def execution_id() -> str:
    """One per attempt, unique across runs and resets: the lease token. A local activity's
    attempt is recorded only when it completes, so after a crash the replaying worker runs
    the same "attempt" again: it gets a random suffix, unique per execution."""
    info = activity.info()
    token = f"{info.workflow_run_id}/{info.activity_id}/{info.attempt}"
    return f"{token}/local-{uuid.uuid4().hex[:12]}" if info.is_local else token


@contextlib.contextmanager
def refused_config_is_final() -> Iterator[None]:
    """The table refuses this config; asking again will not change its mind."""
    try:
        yield
    except (asyncpg.IntegrityConstraintViolationError, asyncpg.DataError) as err:
        raise ApplicationError(str(err), type=INVALID_TARGET, non_retryable=True) from err


class CheckActivities:
    def __init__(
        self, pool: asyncpg.Pool, http: httpx.AsyncClient, snapshots_kept: int = 50
    ) -> None:
        self.pool = pool
        self.http = http
        self.snapshots_kept = snapshots_kept

    @activity.defn(name=Activity.SYNC_TARGET)
    async def sync_target(self, sync: SyncTargetInput) -> None:
        """Mirror the workflow's config and schedule into `monitor_targets`."""
        with refused_config_is_final():
            await store.sync_target(
                self.pool,
                sync.config,
                next_slot=sync.next_slot,
                enabled=sync.enabled,
                skipped=sync.skipped,
            )

    @activity.defn(name=Activity.RECONFIGURE_TARGET)
    async def reconfigure_target(self, config: TargetConfig) -> None:
        """Mirror a reconfigured config at once, even while a check holds the lease."""
        with refused_config_is_final():
            await store.reconfigure_target(self.pool, config)

    @activity.defn(name=Activity.REGISTER_TARGET)
    async def register_target(self, registration: RegisterTargetInput) -> Registration:
        """Record the target's grid at its first registration; adopt it at every later one."""
        with refused_config_is_final():
            return await store.register_target(
                self.pool,
                registration.config,
                anchor=registration.anchor,
                next_slot=registration.next_slot,
                enabled=registration.enabled,
                skipped=registration.skipped,
            )

    @activity.defn(name=Activity.CHECK_SLOT)
    async def check_slot(self, check: CheckInput) -> CheckResult:
        """Claim, skip if done, fetch, hash, then commit the row and the schedule together."""
        token = execution_id()
        started = time.monotonic()
        with span("claim", work_id=check.work_id):
            claim = await store.claim(
                self.pool,
                target_id=check.target_id,
                work_id=check.work_id,
                token=token,
                lease=CHECK_LEASE,
                on_schedule=check.on_schedule,
                slot=check.slot,
            )
        if not claim.target_exists or (check.on_schedule and not claim.enabled):
            # The mirror disagrees with the workflow (row deleted, restored database, a
            # lost sync): the workflow re-syncs and tries again.
            raise expected_failure(
                f"target {check.target_id} is missing or paused in the database",
                TARGET_OUT_OF_SYNC,
                non_retryable=True,
            )
        if stored := final_result(claim.existing, claim.next_slot, retrying=check.retry):
            tell(check, token, "already recorded, not fetched again", started)
            count("pricewatch_checks", "checks by outcome", kind=check.kind.value,
                  status=stored.status.value, outcome="already_recorded")  # fmt: skip
            return await self._already_recorded(check, stored)
        if not claim.claimed:
            count("pricewatch_lease_conflicts", "claims refused: leased or not due")
            refusal = self._claim_refused(check, claim)
            tell(check, token, f"not checked: {refusal.message}", started)
            raise refusal
        if check.on_schedule and activity.info().attempt == 1:
            lateness = (activity.info().started_time - check.slot).total_seconds()
            observe_seconds("pricewatch_lateness", "attempt start minus due slot", lateness)

        rules = rules_fingerprint(check.selector, check.ignore, check.json_pointer, check.prices)
        if not comparable(claim.previous_rules, rules):
            claim = claim.without_previous()
        committed = False
        try:
            fetch_started = time.monotonic()
            try:
                with span("fetch", url=check.url):
                    page = await self._fetch_holding_lease(check, token, claim)
                outcome = await outcome_of(claim, page, rules, check.prices)
            except FetchError as err:
                kind = "transient" if err.transient else "permanent"
                count("pricewatch_fetch_failures", "failed fetch attempts", kind=kind)
                delay = next_attempt_in(err)
                committed = await self._record_attempt_failure(check, token, err, delay)
                then = (
                    "slot failed" if delay is None else f"next attempt in {format_duration(delay)}"
                )
                tell(check, token, f"{err} ({kind}), {then}", started)
                raise expected_failure(
                    str(err),
                    TRANSIENT_FETCH_ERROR if err.transient else PERMANENT_FETCH_ERROR,
                    non_retryable=not err.transient,
                    next_retry_delay=err.retry_after,
                ) from err
            observe_seconds("pricewatch_fetch", "fetch latency", time.monotonic() - fetch_started)
            with span("commit", status=outcome.status.value):
                result = await store.commit(
                    self.pool,
                    target_id=check.target_id,
                    token=token,
                    work_id=check.work_id,
                    slot=check.slot,
                    kind=check.kind,
                    outcome=outcome,
                    advance=check.on_schedule,
                    temporal_now=temporal_now(check),
                    snapshots_kept=self.snapshots_kept,
                )
            committed = result is not None
            if result is None:
                return await self._lost_lease(check, token, started)
            count("pricewatch_checks", "checks by outcome", kind=check.kind.value,
                  status=result.status.value, outcome="recorded")  # fmt: skip
            tell(check, token, described(result, outcome), started)
            return result
        finally:
            if not committed:
                await store.release(self.pool, target_id=check.target_id, token=token)

    async def _fetch_holding_lease(self, check: CheckInput, token: str, claim: store.Claim) -> Page:
        """Fetch, heartbeating to Temporal and extending the lease while the fetch runs.

        If Temporal has given up on this attempt, the SDK cancels it at the next heartbeat;
        if the lease was taken over meanwhile, the fetch stops at once: its result could
        not be committed anyway.
        """
        request = Request(
            url=check.url,
            extraction=Extraction(
                selector=check.selector,
                ignore=check.ignore,
                json_pointer=check.json_pointer,
                prices=check.prices,
            ),
            user_agent=check.user_agent,
            etag=claim.previous_etag,
            last_modified=claim.previous_last_modified,
            timeout=timedelta(seconds=check.timeout_seconds) if check.timeout_seconds else None,
        )
        fetch = asyncio.create_task(fetch_page(self.http, request))
        try:
            while True:
                done, _ = await asyncio.wait({fetch}, timeout=HEARTBEAT_EVERY.total_seconds())
                if done:
                    return fetch.result()
                if not activity.info().is_local:  # a local one has no heartbeat timeout
                    activity.heartbeat()
                if not await store.extend_lease(
                    self.pool, target_id=check.target_id, token=token, lease=CHECK_LEASE
                ):
                    raise expected_failure(
                        f"lost the lease on {check.target_id} while fetching", LEASE_HELD
                    )
        finally:
            if not fetch.done():
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fetch

    @activity.defn(name=Activity.RECORD_FAILED_SLOT)
    async def record_failed_slot(self, failure: RecordFailureInput) -> CheckResult:
        """Dead-letter a slot whose check gave up: one failed row, then the schedule moves on."""
        check = failure.check
        result = await store.record_failed(
            self.pool,
            target_id=check.target_id,
            work_id=check.work_id,
            slot=check.slot,
            kind=check.kind,
            error_message=failure.error_message,
            advance=check.on_schedule,
            temporal_now=temporal_now(check),
        )
        if result is not None:
            count("pricewatch_dead_letters", "slots recorded failed after giving up")
            return result
        stored = await store.stored_check(self.pool, check.work_id)
        if stored is not None and stored.status not in (CheckStatus.RETRYING, CheckStatus.FAILED):
            return await self._already_recorded(check, stored)
        if not await store.target_exists(self.pool, check.target_id):
            raise expected_failure(
                f"target {check.target_id} is not in the database",
                TARGET_OUT_OF_SYNC,
                non_retryable=True,
            )
        raise expected_failure(
            f"target {check.target_id} is leased by a running attempt; will try again",
            LEASE_HELD,
            next_retry_delay=after_lease(await store.lease_left(self.pool, check.target_id)),
        )

    @activity.defn(name=Activity.UNNOTIFIED_CHANGES)
    async def unnotified_changes(self, query: UnnotifiedQuery) -> list[CheckResult]:
        """Changes among slots a resume skipped that were recorded by a run that is gone (a
        reset) and never told: the workflow tells the channels now."""
        return await store.unnotified_changes(
            self.pool,
            query.target_id,
            query.first - EPSILON,
            query.last + EPSILON,
        )

    @activity.defn(name=Activity.REMOVE_TARGET)
    async def remove_target(self, remove: RemoveTargetInput) -> None:
        await store.delete_target(self.pool, remove.target_id)

    async def _record_attempt_failure(
        self, check: CheckInput, token: str, err: FetchError, delay: timedelta | None
    ) -> bool:
        """Keep the attempt on the slot's one row (attempt_count + 1), as `retrying` with when
        the next attempt (`delay`) comes, or `failed` if none will; never advance here. The
        workflow decides when the slot is given up (`record_failed_slot`)."""
        status = CheckStatus.FAILED if delay is None else CheckStatus.RETRYING
        recorded = await store.commit(
            self.pool,
            target_id=check.target_id,
            token=token,
            work_id=check.work_id,
            slot=check.slot,
            kind=check.kind,
            outcome=store.Outcome(status=status, error_message=str(err), next_attempt_in=delay),
            advance=False,
        )
        return recorded is not None

    async def _lost_lease(self, check: CheckInput, token: str, started: float) -> CheckResult:
        """The commit matched nothing: either another attempt finished the slot, or our
        lease was taken over. The first is success; the second must not pass silently."""
        stored = await store.stored_check(self.pool, check.work_id)
        if stored is not None and stored.status not in (CheckStatus.RETRYING, CheckStatus.FAILED):
            tell(check, token, "not committed: another attempt recorded the slot first", started)
            return await self._already_recorded(check, stored)
        message = f"lost the lease on {check.target_id} before committing {check.work_id}"
        tell(check, token, f"not committed: {message}", started)
        raise expected_failure(message, LEASE_HELD)

    async def _already_recorded(self, check: CheckInput, stored: CheckResult) -> CheckResult:
        """The stored result, where the schedule stands (moved on, with skipped rows, if the
        database still points at this slot), and any change the workflow will now skip over
        without having told anyone (see `CheckResult.unnotified`)."""
        if not check.on_schedule:
            return stored.model_copy(update={"already_recorded": True, "next_slot": None})
        next_slot = await store.advance_past_final(
            self.pool, target_id=check.target_id, slot=check.slot, temporal_now=temporal_now(check)
        )
        unnotified = []
        if next_slot is not None and next_slot > check.slot:
            unnotified = await store.unnotified_changes(
                self.pool, check.target_id, check.slot, next_slot
            )
        return stored.model_copy(
            update={"already_recorded": True, "next_slot": next_slot, "unnotified": unnotified}
        )

    def _claim_refused(self, check: CheckInput, claim: store.Claim) -> ApplicationError:
        if check.on_schedule and claim.next_slot and claim.next_slot > check.slot:
            return expected_failure(
                f"{check.work_id} is no longer due: the schedule is at "
                f"{claim.next_slot.isoformat()}",
                SLOT_NOT_DUE,
                non_retryable=True,
            )
        left = claim.lease_left
        ends = f" (its lease ends in {format_duration(left)})" if left is not None else ""
        return expected_failure(
            f"target {check.target_id} is leased by another attempt{ends}",
            LEASE_HELD,
            next_retry_delay=after_lease(left),
        )


# A claim refused by a live lease is tried again when the lease expires (by the database's
# clock, which the claim read), this much later: the commit or release of an attempt that
# is still alive lands first, and a worker's timer firing early by a few ms finds it lapsed.
LEASE_RETRY_MARGIN = timedelta(seconds=1)


def after_lease(left: timedelta | None) -> timedelta | None:
    """When to try again after a refusal by a live lease with `left` to run: just after it
    expires, never sooner than the margin nor later than a whole lease (an attempt that is
    alive keeps extending it; the next refusal says again). None: the retry policy's own
    backoff (the lease lapsed in between)."""
    if left is None:
        return None
    return min(max(left, timedelta(0)), CHECK_LEASE) + LEASE_RETRY_MARGIN


def described(result: CheckResult, outcome: store.Outcome) -> str:
    """`changed`, or in price mode `changed: Pro: 19.90 -> 24.90 EUR (+5.00, +25.13%)
    [price-change]` (`(no rule matched)` where none did)."""
    if not outcome.price_moves:
        return result.status.value
    moves = ", ".join(move_line(move.as_json()) for move in outcome.price_moves)
    return f"{result.status.value}: {moves}" + ("" if result.notify else " (no rule matched)")


def tell(check: CheckInput, token: str, outcome: str, started: float) -> None:
    """The check's one line (see CHECK_LOG)."""
    elapsed_ms = round((time.monotonic() - started) * 1000)
    manual = " (manual)" if check.kind is CheckKind.MANUAL else ""
    CHECK_LOG.info(
        "%s%s %s %d ms", check.target_id, manual, outcome, elapsed_ms,
        extra={**_ids(check, token), "outcome": outcome, "elapsed_ms": elapsed_ms},
    )  # fmt: skip


def _ids(check: CheckInput, token: str) -> dict[str, str]:
    """The ids every log line of a check carries (see the JSON log format)."""
    return {"target_id": check.target_id, "work_id": check.work_id, "execution_id": token}
