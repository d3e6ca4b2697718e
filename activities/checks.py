"""The activities: every side effect of monitoring a target.

`CheckActivities` owns the worker's one asyncpg pool and its fetcher (over the worker's one
httpx client, unless the worker hands in another way to fetch a page). A check may execute
several times for one slot (retries, crashes, resets, zombies); the lease and the
one-row-per-slot record in Postgres make every execution after the first a no-op.
"""

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import store
from activities.freezes import STALLS
from activities.metrics import count, observe_seconds
from activities.outages import POSTGRES
from activities.outcomes import outcome_of
from activities.tracing import span
from fetchers import Fetcher
from fetchers.http import FetchError, Page, fetch_page, request_of
from pricewatch.decisions import (
    UNSETTLED,
    comparable,
    final_result,
    retry_delay,
    rules_fingerprint,
    skip_cause,
)
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
    """Temporal's time for this attempt: when the server started it (a normal activity), or
    when the workflow asked for it (a local one, which the worker itself schedules). Never
    the worker's wall clock. Not the attempt's scheduled time either: that is a plan, not a
    reading of a clock. A retry is scheduled for its failure plus its backoff, and a server
    can hand it out before then (a stale matching task after a freeze, found by the chaos
    run: 7 s early); its commit then skipped slots that were not yet due."""
    info = activity.info()
    if info.is_local:
        return check.asked_at
    return max(filter(None, (check.asked_at, info.started_time)))


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


def this_execution_id() -> str:
    """One per attempt, unique across runs and resets: the lease holder. A local activity's
    attempt is recorded only when it completes, so after a crash the replaying worker runs
    the same "attempt" again: it gets a random suffix, unique per execution."""
    info = activity.info()
    attempt = f"{info.workflow_run_id}/{info.activity_id}/{info.attempt}"
    return f"{attempt}/local-{uuid.uuid4().hex[:12]}" if info.is_local else attempt


@contextlib.contextmanager
def refused_config_is_final() -> Iterator[None]:
    """The table refuses this config; asking again will not change its mind."""
    try:
        yield
    except (asyncpg.IntegrityConstraintViolationError, asyncpg.DataError) as err:
        raise ApplicationError(str(err), type=INVALID_TARGET, non_retryable=True) from err


class CheckActivities:
    def __init__(
        self,
        pool: asyncpg.Pool,
        http: httpx.AsyncClient,
        snapshots_kept: int = 50,
        fetcher: Fetcher | None = None,
    ) -> None:
        self.pool = pool
        self.http = http
        self.snapshots_kept = snapshots_kept
        self.fetcher = fetcher or functools.partial(fetch_page, http)

    def fetching_with(self, fetcher: Fetcher) -> "CheckActivities":
        """The same activities on the same pool, fetching another way (a browser)."""
        return CheckActivities(self.pool, self.http, self.snapshots_kept, fetcher)

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
        """Claim, decide, fetch, commit: the row and the schedule together, once per slot
        however often this runs. `Report` tells what became of this attempt."""
        execution_id = this_execution_id()
        report = Report(check, execution_id)
        claim = await self._claim(check, execution_id)

        if stored := final_result(claim.existing, claim.next_slot, retrying=check.retry):
            report.already_recorded(stored)
            return await self._already_recorded(check, stored)
        if not claim.claimed:
            raise report.refused(self._claim_refused(check, claim))
        report.claimed()
        rules = rules_fingerprint(
            check.selector, check.ignore, check.json_pointer, check.price_mode, check.render
        )
        if not comparable(claim.previous_rules, rules):
            claim = claim.without_previous()

        failure: FetchError | None = None
        committed = False
        try:
            try:
                with report.fetching():
                    page = await self._fetch(check, execution_id, claim)
                    outcome = await outcome_of(claim, page, rules, check.price_mode)
            except FetchError as err:
                if err.transient and (stalled := report.stalled()):
                    raise report.stalled_out(stalled) from err
                failure, outcome = err, failed_attempt(err)
            except (asyncio.CancelledError, ApplicationError):
                report.given_up_if_stalled()
                raise

            cause = skip_cause_of(check, claim, report)
            result = await self._commit(check, execution_id, outcome, cause)
            committed = result is not None
            if failure is not None:
                report.attempt_failed(failure, outcome.next_attempt_in)
                raise fetch_failed(failure) from failure
            if result is None:
                report.given_up_if_stalled()
                return await self._lost_lease(check, report)
            return report.recorded(result, outcome)
        finally:
            if not committed:
                await self._release(check.target_id, execution_id)

    async def _release(self, target_id: str, execution_id: str) -> None:
        """Free the lease of an attempt that gave up or was cancelled, for the next one.
        Best effort: with Postgres away this fails too, and the attempt's own failure is the
        one to report; the next attempt of the run takes the lease over (`supersedes`)."""
        try:
            await store.release(self.pool, target_id=target_id, execution_id=execution_id)
        except Exception as err:  # whatever it was, the lease is left to lapse
            CHECK_LOG.debug("%s: lease left to lapse (%r)", target_id, err)

    async def _claim(self, check: CheckInput, execution_id: str) -> store.Claim:
        """Take the target's lease and read what the check compares with. A target the
        database lacks or holds paused disagrees with the workflow (row deleted, restored
        database, a lost sync): the workflow re-syncs and tries again."""
        with span("claim", work_id=check.work_id):
            claim = await store.claim(
                self.pool,
                target_id=check.target_id,
                work_id=check.work_id,
                execution_id=execution_id,
                lease=CHECK_LEASE,
                on_schedule=check.on_schedule,
                slot=check.slot,
            )
        if not claim.target_exists or (check.on_schedule and not claim.enabled):
            raise expected_failure(
                f"target {check.target_id} is missing or paused in the database",
                TARGET_OUT_OF_SYNC,
                non_retryable=True,
            )
        return claim

    async def _fetch(self, check: CheckInput, execution_id: str, claim: store.Claim) -> Page:
        """Fetch with `self.fetcher`, heartbeating to Temporal and extending the lease while
        it runs.

        If Temporal has given up on this attempt, the SDK cancels it at the next heartbeat;
        if the lease was taken over meanwhile, the fetch stops at once: its result could
        not be committed anyway.
        """
        request = request_of(
            check, claim.previous_etag, claim.previous_last_modified, claim.previous_hash
        )
        with span("fetch", url=check.url):
            fetch = asyncio.create_task(self.fetcher(request))
            try:
                while True:
                    done, _ = await asyncio.wait({fetch}, timeout=HEARTBEAT_EVERY.total_seconds())
                    if done:
                        return fetch.result()
                    if not activity.info().is_local:  # a local one has no heartbeat timeout
                        activity.heartbeat()
                    if not await store.extend_lease(
                        self.pool,
                        target_id=check.target_id,
                        execution_id=execution_id,
                        lease=CHECK_LEASE,
                    ):
                        raise expected_failure(
                            f"lost the lease on {check.target_id} while fetching", LEASE_HELD
                        )
            finally:
                if not fetch.done():
                    fetch.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await fetch
                elif not fetch.cancelled():
                    # Taken, so never "Task exception was never retrieved": when this attempt
                    # is cancelled as the fetch fails (a thawed worker), nobody else reads it.
                    fetch.exception()

    async def _commit(
        self, check: CheckInput, execution_id: str, outcome: store.Outcome, skip_cause: str
    ) -> CheckResult | None:
        """Record the attempt on the slot's one row; None if the lease was lost or the slot
        was final already. Only a result advances the schedule: a failed attempt's row waits
        for the workflow to give the slot up (`record_failed_slot`)."""
        with span("commit", status=outcome.status.value):
            return await store.commit(
                self.pool,
                target_id=check.target_id,
                execution_id=execution_id,
                work_id=check.work_id,
                slot=check.slot,
                kind=check.kind,
                outcome=outcome,
                advance=check.on_schedule and outcome.status not in UNSETTLED,
                temporal_now=temporal_now(check),
                snapshots_kept=self.snapshots_kept,
                skip_cause=skip_cause,
            )

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
            execution_id=this_execution_id(),
            skip_cause=gave_up_cause(check),
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

    async def _lost_lease(self, check: CheckInput, report: "Report") -> CheckResult:
        """The commit matched nothing: either another attempt finished the slot, or our
        lease was taken over. The first is success; the second must not pass silently."""
        stored = await store.stored_check(self.pool, check.work_id)
        if stored is not None and stored.status not in UNSETTLED:
            report.not_committed("another attempt recorded the slot first")
            return await self._already_recorded(check, stored)
        message = f"lost the lease on {check.target_id} before committing {check.work_id}"
        report.not_committed(message)
        raise expected_failure(message, LEASE_HELD)

    async def _already_recorded(self, check: CheckInput, stored: CheckResult) -> CheckResult:
        """The stored result, where the schedule stands (moved on, with skipped rows, if the
        database still points at this slot), and any change the workflow will now skip over
        without having told anyone (see `CheckResult.unnotified`)."""
        if not check.on_schedule:
            return stored.model_copy(update={"already_recorded": True, "next_slot": None})
        now = temporal_now(check)
        next_slot = await store.advance_past_final(
            self.pool, target_id=check.target_id, slot=check.slot, temporal_now=now,
            skip_cause=behind_cause(check.slot),
        )  # fmt: skip
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


# A transient fetch failure of an attempt whose worker stalled meanwhile (frozen, or its
# loop stuck): the worker's doing, not the page's; retried at once, no row written.
WORKER_STALLED = "WorkerStalled"

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


def held_back_since(since: float) -> tuple[timedelta, timedelta]:
    """How long, since `since` (monotonic: the slot), this worker was frozen and Postgres
    unreachable, as far as this worker saw."""
    return (
        timedelta(seconds=STALLS.stalled_since(since, frozen=True)),
        timedelta(seconds=POSTGRES.away_since(since)),
    )


def monotonic_at(moment: datetime, now: datetime | None = None) -> float:
    """`moment` on the monotonic clock, by `now` (the worker's wall clock if not given)."""
    return time.monotonic() - ((now or datetime.now(UTC)) - moment).total_seconds()


def skip_cause_of(check: CheckInput, claim: store.Claim, report: "Report") -> str:
    """What held this slot back, for the skipped rows its commit may write: how late the
    attempt's claim came (the database's clock), how long it ran, how many attempts the slot
    took, and any freeze or outage since the slot."""
    late = claim.claimed_at - check.slot if claim.claimed_at else timedelta(0)
    frozen, database_away = held_back_since(report.started - late.total_seconds())
    return skip_cause(
        late=late,
        took=timedelta(seconds=time.monotonic() - report.started),
        attempts=max(
            (claim.existing.attempt_count + 1) if claim.existing else 1, attempt_number(check)
        ),
        frozen=frozen,
        database_away=database_away,
    )


def attempt_number(check: CheckInput) -> int:
    """Which attempt of its slot this is, by Temporal: a normal activity's attempts follow
    the local first one, except a rendered check's, which are all normal (workflows/calls.py)."""
    info = activity.info()
    return info.attempt + (0 if info.is_local or check.render is not None else 1)


def gave_up_cause(check: CheckInput) -> str:
    """What held a dead-lettered slot back: its attempts, until Temporal's time now."""
    now = temporal_now(check)
    late = now - check.slot if now else timedelta(0)
    frozen, database_away = held_back_since(monotonic_at(check.slot, now))
    return skip_cause(late=late, attempts=None, frozen=frozen, database_away=database_away)


def behind_cause(slot: datetime) -> str:
    """What held back a schedule a re-run finds behind: only a freeze or outage it knows of."""
    frozen, database_away = held_back_since(monotonic_at(slot))
    return skip_cause(late=timedelta(0), frozen=frozen, database_away=database_away)


def failed_attempt(err: FetchError) -> store.Outcome:
    """A failed attempt kept on the slot's one row (attempt_count + 1): `retrying`, with when
    the next attempt comes, or `failed` if none will."""
    delay = next_attempt_in(err)
    status = CheckStatus.FAILED if delay is None else CheckStatus.RETRYING
    return store.Outcome(status=status, error_message=str(err), next_attempt_in=delay)


def fetch_failed(err: FetchError) -> ApplicationError:
    """What Temporal hears of a failed fetch: retried by its policy only if it may help."""
    return expected_failure(
        str(err),
        TRANSIENT_FETCH_ERROR if err.transient else PERMANENT_FETCH_ERROR,
        non_retryable=not err.transient,
        next_retry_delay=err.retry_after,
    )


class Report:
    """What one attempt of a check tells: its one line (see CHECK_LOG), its counters and
    its lateness. The steps of `check_slot` hand it what became of the attempt, so none of
    them logs or counts."""

    def __init__(self, check: CheckInput, execution_id: str) -> None:
        self.check = check
        self.execution_id = execution_id
        self.started = time.monotonic()
        self.given_up = False
        """The worker stalled and the attempt was given up for it (see `given_up_if_stalled`)."""

    def already_recorded(self, stored: CheckResult) -> None:
        self._count_check(stored, "already_recorded")
        self._tell("already recorded, not fetched again")

    def refused(self, refusal: ApplicationError) -> ApplicationError:
        count("pricewatch_lease_conflicts", "claims refused: leased or not due")
        self._tell(f"not checked: {refusal.message}")
        return refusal

    def claimed(self) -> None:
        """How late the first attempt of a scheduled check started (by the worker's clock)."""
        info = activity.info()
        if self.check.on_schedule and info.attempt == 1:
            lateness = (info.started_time - self.check.slot).total_seconds()
            observe_seconds("pricewatch_lateness", "attempt start minus due slot", lateness)

    @contextlib.contextmanager
    def fetching(self) -> Iterator[None]:
        """The latency of a fetch that produced an outcome."""
        started = time.monotonic()
        yield
        observe_seconds("pricewatch_fetch", "fetch latency", time.monotonic() - started)

    def attempt_failed(self, err: FetchError, delay: timedelta | None) -> None:
        kind = "transient" if err.transient else "permanent"
        count("pricewatch_fetch_failures", "failed fetch attempts", kind=kind)
        then = "slot failed" if delay is None else f"next attempt in {format_duration(delay)}"
        self._tell(f"{err} ({kind}), {then}")

    def recorded(self, result: CheckResult, outcome: store.Outcome) -> CheckResult:
        self._count_check(result, "recorded")
        self._tell(described(result, outcome))
        return result

    def not_committed(self, why: str) -> None:
        self._tell(f"not committed: {why}", quiet=self.given_up)

    def stalled(self) -> float:
        """How long this worker did not run since the attempt began (0: it ran all along)."""
        return STALLS.stalled_since(self.started)

    def stalled_out(self, seconds: float) -> ApplicationError:
        """The fetch failed (its deadline ran out, a connection dropped) while this worker
        was not running: not the page's failure. Counted in the freeze's summary line."""
        self.given_up_if_stalled()
        message = f"not checked: this worker was stalled for {seconds:.0f} s during the fetch"
        self._tell(message, quiet=True)
        return expected_failure(message, WORKER_STALLED, next_retry_delay=LEASE_RETRY_MARGIN)

    def given_up_if_stalled(self) -> None:
        """A cancelled attempt or a lost lease after a stall: the worker's freeze took the
        check from it. Its lines go to debug; the freeze's summary names the target."""
        if not self.given_up and self.stalled():
            self.given_up = True
            STALLS.gave_up(self.check.target_id)

    def _count_check(self, result: CheckResult, outcome: str) -> None:
        count("pricewatch_checks", "checks by outcome", kind=self.check.kind.value,
              status=result.status.value, outcome=outcome)  # fmt: skip

    def _tell(self, outcome: str, quiet: bool = False) -> None:
        check = self.check
        elapsed_ms = round((time.monotonic() - self.started) * 1000)
        manual = " (manual)" if check.kind is CheckKind.MANUAL else ""
        ids = {"target_id": check.target_id, "work_id": check.work_id,
               "execution_id": self.execution_id}  # fmt: skip
        CHECK_LOG.log(
            logging.DEBUG if quiet else logging.INFO,
            "%s%s %s %d ms", check.target_id, manual, outcome, elapsed_ms,
            extra={**ids, "outcome": outcome, "elapsed_ms": elapsed_ms},
        )  # fmt: skip


def described(result: CheckResult, outcome: store.Outcome) -> str:
    """`changed`, or in price mode `changed: Pro: 19.90 -> 24.90 EUR (+5.00, +25.13%)
    [price-change]` (`(no rule matched)` where none did), and the values it skipped."""
    line = result.status.value
    if outcome.price_moves:
        moves = ", ".join(move_line(move.as_json()) for move in outcome.price_moves)
        line += f": {moves}" + ("" if result.notify else " (no rule matched)")
    if outcome.skipped_values:
        line += f"; skipped {len(outcome.skipped_values)}: {'; '.join(outcome.skipped_values)}"
    return line
