"""`MonitorTarget`: one durable workflow per target that owns its schedule.

Loop: sleep until the next slot (a durable timer that signals and updates can interrupt),
run the check activity, move to the next slot on the grid. Deterministic: time is
`workflow.now()`, every side effect is an activity, and the wait shape (a
`wait_condition` with the slot delay as timeout) is fixed, since changing it would break
the replay of running histories.
"""

import asyncio
import contextlib
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows import calls

# Models are passed through so that the workflow and the converter share one class per
# model (a sandbox re-import would make pydantic reject its own instances). Everything here
# is free of I/O: activities are called by name, never imported.
with workflow.unsafe.imports_passed_through():
    from pricewatch.deliveries import DeliveryInput, Notice
    from pricewatch.models import (
        CheckInput,
        CheckKind,
        CheckResult,
        CheckStatus,
        MonitorState,
        MonitorStatus,
        RegisterTargetInput,
        RemoveTargetInput,
        RetryRequest,
        SyncTargetInput,
        TargetConfig,
        UnnotifiedQuery,
    )
    from pricewatch.names import (
        PAUSED_SEARCH_ATTRIBUTE,
        TARGET_SEARCH_ATTRIBUTE,
        UNHEALTHY_SEARCH_ATTRIBUTE,
        WORKFLOW_TYPE,
        Activity,
        Query,
        Signal,
        Update,
    )
    from pricewatch.policy import (
        INVALID_TARGET,
        LEGACY_RUN_CHECKS,
        RUN_CHECKS,
        TARGET_OUT_OF_SYNC,
    )
    from pricewatch.slots import (
        due_before_first_task,
        due_before_pause,
        first_slot,
        format_slot,
        format_time,
        latest_due_slot,
        next_slot,
        spread_anchor,
    )


# The five 1.1 patches are deprecated (1.11: `workflow.deprecate_patch`, new path only, the
# markers of runs that took it still accepted): every history in tests/histories/, 1.0's
# included, replays with the new path alone (docs/operations.md, "Patches").
# 1.1: a removal stops a check that is backing off between attempts, and notices still being
# retried, instead of waiting for their retries to end (the removal deletes their rows).
REMOVE_STOPS_CHECK = "remove-stops-check"
# 1.1: runs are RUN_CHECKS checks long; a run 1.0 started (it carries 300) continues as new
# once it has that many, and its successors carry the new length.
SHORT_RUNS = "short-runs"
# 1.1: a run due to continue as new while notices are still being delivered keeps checking
# instead of waiting for them (with short runs, a receiver in its retries would otherwise hold
# the schedule up for up to its retry budget, about 15 minutes).
NOTICES_DO_NOT_HOLD_CHECKS = "notices-do-not-hold-checks"
# 1.1: a resume that arrives before the run has registered (a pause and a resume in the first
# workflow task, e.g. re-applied after a reset to it) just lifts the pause: registration finds
# the slot. Before, the handler asked for a slot there was none of yet, and the workflow task
# failed on every attempt (found by the soak).
RESUME_BEFORE_REGISTRATION = "resume-before-registration"
# 1.1: in price mode a change is told only if a price rule fired (`CheckResult.notify`).
# Every result recorded before it says notify (the default), so it takes no other path there.
PRICE_RULES = "price-rules"
# 1.2: a reconfigure writes the new config into Postgres before the Update returns, also
# while the next slot's check is retrying (before, the mirror waited for the loop, which
# waits for the check: a retrying slot kept the old interval in the database for minutes, a
# second `apply` reconfigured again, and the slot's dead letter advanced on the old grid).
RECONFIGURE_MIRRORS_AT_ONCE = "reconfigure-mirrors-at-once"
# 1.2: a paused target says so in the search attribute PricewatchPaused (filterable in the
# UI, as PricewatchUnhealthy is).
PAUSED_SEARCH_ATTRIBUTE_SET = "paused-search-attribute"


@workflow.defn(name=WORKFLOW_TYPE)
class MonitorTarget:
    @workflow.init
    def __init__(self, state: MonitorState) -> None:
        # The one state a run owns and hands to the next through continue-as-new, as is.
        self.state = state
        # What lives only as long as this run.
        self._extra_results: dict[str, CheckResult] = {}
        self._deliveries: set[asyncio.Task[None]] = set()
        self._checks_this_run = 0
        self._checking: datetime | None = None  # the scheduled slot being checked
        self._removing = False  # a removal also stops a check backing off, and notices
        self._woken = False
        # One mirror write at a time, so the last one written carries the newest config.
        self._mirroring = asyncio.Lock()

    @workflow.run
    async def run(self, state: MonitorState) -> None:
        if (problem := self._config_problem(self.state.config)) is not None:
            # Bad input from a start outside the CLI: fail clearly before writing anything.
            raise ApplicationError(problem, type=INVALID_TARGET, non_retryable=True)
        if not self.state.registered:
            await self._register()
        while True:
            if self._removing:
                for delivery in self._deliveries:  # 1.1: notices of a target being removed stop
                    delivery.cancel()
                await asyncio.gather(*self._deliveries, return_exceptions=True)
                removed = await calls.bookkeep(
                    Activity.REMOVE_TARGET,
                    RemoveTargetInput(target_id=self.state.config.target_id),
                    f"remove {self.state.config.target_id}",
                )
                if not removed:
                    raise ApplicationError(
                        f"stopped watching {self.state.config.target_id}, but its rows could not "
                        "be deleted; run `pricewatch remove` again after adding it back",
                        non_retryable=True,
                    )
                return
            if self.state.mirror_stale:
                self.state.mirror_stale = False
                await self._sync()
                continue
            if self.state.pending_checks:
                await self._run_extra_check(self.state.pending_checks[0])
                continue
            ending = self._should_continue_as_new()
            if ending and self._deliveries:
                workflow.deprecate_patch(NOTICES_DO_NOT_HOLD_CHECKS)  # 1.0 waited for them
            # With notices still in flight (1.1) the run goes on checking instead: a receiver
            # that is down must not hold the schedule up. It continues as new at the first
            # wake-up after they have landed.
            if ending and not self._deliveries:
                # A handler still running waits for the loop (a queued check): serve it first.
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() or bool(self.state.pending_checks)
                )
                if self.state.pending_checks:
                    continue
                # The next run starts from this state, registered: it continues from
                # `next_slot`. `start_at` (the first slot a start asked for) is read only by
                # a registration; it is set to the next slot, a point of the grid as it is
                # now (after any reconfigure), so it stays a valid first slot.
                self.state.start_at = self.state.next_slot
                workflow.continue_as_new(self.state)
            if self.state.paused:
                since = self.state.paused_at
                self._describe(f"paused since {format_time(since)}" if since else "paused")
                self._woken = False
                await workflow.wait_condition(lambda: self._woken)
                continue
            slot = self._next_slot()
            delay = slot - workflow.now()
            if delay > timedelta(0):
                self._describe(f"sleeping until {format_slot(slot)}; {self.state.config.schedule}")
                self._woken = False
                with contextlib.suppress(TimeoutError):  # the slot came: time to check
                    await workflow.wait_condition(
                        lambda: self._woken,
                        timeout=delay,
                        timeout_summary=f"sleep until {format_slot(slot)}",
                    )
                continue
            await self._run_scheduled_check(slot)

    @workflow.signal(name=Signal.PAUSE)
    def pause(self) -> None:
        """Stop future slots; a check already running finishes."""
        if not self.state.paused:
            self.state.paused = True
            self.state.paused_at = workflow.now()
            self._mark_mirror_stale()
            self._show_paused()

    @workflow.signal(name=Signal.RESUME)
    def resume(self) -> None:
        """Continue on the grid: slots that went by while paused are not due. Slots that
        were overdue when the pause took effect (it can arrive late, e.g. while a worker
        was down) were due: they get skipped rows."""
        unregistered = self.state.paused and self.state.next_slot is None
        if unregistered:
            workflow.deprecate_patch(RESUME_BEFORE_REGISTRATION)
            self.state.paused, self.state.paused_at = False, None
            self._show_paused()
            return
        if self.state.paused:
            self.state.paused = False
            resumed = first_slot(self._next_slot(), self.state.config.grid, workflow.now())
            self.state.unrecorded_skips += due_before_pause(
                self._next_slot(), self.state.paused_at, resumed, self.state.config.grid,
                checking=self._checking,
            )  # fmt: skip
            self.state.next_slot, self.state.paused_at = resumed, None
            self._mark_mirror_stale()
            self._show_paused()

    @workflow.signal(name=Signal.REMOVE)
    def remove(self) -> None:
        workflow.deprecate_patch(REMOVE_STOPS_CHECK)
        self._removing = True
        self._woken = True

    @workflow.update(name=Update.RECONFIGURE)
    async def reconfigure(self, config: TargetConfig) -> MonitorStatus:
        """Change the config. The next slot stays; later slots use the new interval. A
        check already running (its attempts and their backoff) finishes with the config it
        started with. The database has the new config when the Update returns."""
        if config == self.state.config:
            return self.status()
        self.state.config = config
        if not self.state.registered or not workflow.patched(RECONFIGURE_MIRRORS_AT_ONCE):
            self._mark_mirror_stale()  # the loop mirrors it (after the check in flight)
            return self.status()
        async with self._mirroring:
            mirrored = await calls.bookkeep(
                Activity.RECONFIGURE_TARGET,
                self.state.config,
                f"reconfigure {self.state.config.target_id}",
            )
        if not mirrored:
            self._mark_mirror_stale()  # the database was away: the loop tries again
        return self.status()

    @reconfigure.validator
    def _validate_reconfigure(self, config: TargetConfig) -> None:
        if config.target_id != self.state.config.target_id:
            raise ValueError(
                f"this workflow monitors {self.state.config.target_id}, not {config.target_id}"
            )
        if (problem := self._config_problem(config)) is not None:
            raise ValueError(problem)

    @workflow.update(name=Update.CHECK_NOW)
    async def check_now(self) -> CheckResult:
        """An extra check with its own identity (a manual work id); the grid is untouched."""
        return await self._extra_check(
            CheckInput.of(self.state.config, workflow.now(), CheckKind.MANUAL)
        )

    @workflow.update(name=Update.RETRY_SLOT)
    async def retry_slot(self, request: RetryRequest) -> CheckResult:
        """Re-run one failed slot now, on its own row; a slot that succeeded meanwhile is
        returned as recorded, not fetched again. The schedule is untouched."""
        check = CheckInput.of(self.state.config, request.slot, request.kind, retry=True)
        return await self._extra_check(check)

    @retry_slot.validator
    def _validate_retry(self, request: RetryRequest) -> None:
        not_yet_due = self.state.next_slot is not None and request.slot >= self.state.next_slot
        if request.kind is CheckKind.SCHEDULED and not_yet_due:
            raise ValueError("only slots that already fell due can be retried")

    async def _extra_check(self, check: CheckInput) -> CheckResult:
        """Queue a check off the schedule for the main loop (which owns the lease) and wait."""
        if check.work_id not in self._extra_results and check not in self.state.pending_checks:
            self.state.pending_checks.append(check)
        self._woken = True
        await workflow.wait_condition(lambda: check.work_id in self._extra_results)
        return self._extra_results[check.work_id]

    @workflow.query(name=Query.STATUS)
    def status(self) -> MonitorStatus:
        return MonitorStatus(
            config=self.state.config,
            paused=self.state.paused,
            next_slot=self.state.next_slot,
            last_result=self.state.last_result,
            checks_completed=self.state.checks_completed,
            failure_streak=self.state.failure_streak,
            unhealthy=self._unhealthy,
            checking=self._checking,
        )

    async def _register(self) -> None:
        """First task of a run that has not registered: propose a grid (the input's
        `start_at`, else now spread by the target id), and take the one Postgres returns,
        which is the recorded grid and next slot if the target exists already (a reset
        to the first workflow task, a target started again)."""
        now = workflow.now()
        anchor = self.state.start_at or spread_anchor(self.state.config.target_id, now)
        if self.state.config.calendar is not None:  # 1.4: its first slot on the calendar
            before = anchor - timedelta.resolution
            anchor = next_slot(before, self.state.config.grid, before)
        proposed = latest_due_slot(anchor, self.state.config.grid, now)
        self.state.next_slot = proposed  # what `status` shows until Postgres answers
        request = RegisterTargetInput(
            config=self.state.config,
            anchor=anchor,
            next_slot=proposed,
            enabled=not self.state.paused,
            skipped=due_before_first_task(
                anchor, self.state.config.grid, workflow.info().workflow_start_time, proposed
            ),
        )
        workflow.upsert_search_attributes(
            [TARGET_SEARCH_ATTRIBUTE.value_set(self.state.config.target_id)]
        )
        if self.state.paused:
            self._show_paused()
        registration = await calls.register(request)
        self.state.next_slot = registration.next_slot
        for change in registration.unnotified:
            self._notify(change, None)
        self.state.registered = True

    async def _sync(self) -> bool:
        """Mirror config, slot and pause into Postgres; a paused target cannot be claimed.

        A failed sync is not retried in a loop: the next check finds the mirror out of
        sync and asks for another sync then."""
        async with self._mirroring:
            skipped = list(self.state.unrecorded_skips)
            synced = await calls.bookkeep(
                Activity.SYNC_TARGET,
                SyncTargetInput(
                    config=self.state.config,
                    next_slot=self._next_slot(),
                    enabled=not self.state.paused,
                    skipped=skipped,
                ),
                f"sync {self.state.config.target_id}",
            )
        if synced:  # only ever appended to: drop what was written
            del self.state.unrecorded_skips[: len(skipped)]
        if synced and skipped:
            await self._notify_changes_among(skipped)
        return synced

    async def _notify_changes_among(self, skipped: list[datetime]) -> None:
        """A reset can leave a change recorded (by the old run) in a slot this run now
        skips: tell the channels about any such change nobody told."""
        query = UnnotifiedQuery(
            target_id=self.state.config.target_id, first=min(skipped), last=max(skipped)
        )
        changes = await calls.unnotified_changes(query)
        for change in changes:
            self._notify(change, None)

    async def _run_scheduled_check(self, slot: datetime) -> None:
        check = CheckInput.of(self.state.config, slot)
        self._describe(f"checking {check.work_id}")
        self._checking = slot
        try:
            result = await self._check(check)
        except calls.CheckStopped:
            return  # the target is being removed
        finally:
            self._checking = None
        health_notice = self._count_failures(result)
        self._notify(result or calls.unrecorded(check), health_notice)
        if result is not None and result.unnotified:
            for change in result.unnotified:
                self._notify(change, None)
        advanced = result.next_slot if result is not None else None
        if advanced is None or advanced <= slot:
            advanced = next_slot(slot, self.state.config.grid, workflow.now())
        # A resume during the check may have moved the slot on: never back onto slots it
        # marked skipped.
        advanced = max(advanced, self._next_slot())
        self.state.next_slot = advanced
        self._checks_this_run += 1

    async def _run_extra_check(self, check: CheckInput) -> None:
        self._describe(f"checking {check.work_id}")
        try:
            result = await self._check(check) or calls.unrecorded(check)
        except calls.CheckStopped:
            result = calls.unrecorded(check, "stopped: the target is being removed")
        self.state.pending_checks.remove(check)
        self._notify(result, None)
        self._extra_results[check.work_id] = result
        self._checks_this_run += 1

    def _count_failures(self, result: CheckResult | None) -> Notice | None:
        """Track failed slots in a row; when the target turns (un)healthy, tell the UI and
        return the notice the channels get."""
        if result is not None and result.status is CheckStatus.SKIPPED:
            return None  # not a check: neither a failure nor a recovery
        was_unhealthy = self._unhealthy
        failed = result is None or result.status is CheckStatus.FAILED
        self.state.failure_streak = self.state.failure_streak + 1 if failed else 0
        if self._unhealthy == was_unhealthy:
            return None
        self.state.unhealthy_since = workflow.now() if self._unhealthy else None
        workflow.upsert_search_attributes([UNHEALTHY_SEARCH_ATTRIBUTE.value_set(self._unhealthy)])
        return Notice.FAILING if self._unhealthy else Notice.RECOVERED

    def _notify(self, result: CheckResult, health_notice: Notice | None) -> None:
        """Tell every channel, in the background: the schedule never waits for a slow
        receiver. A change is told once per channel; so is each health transition."""
        changed = result.status is CheckStatus.CHANGED
        if changed and not result.notify:
            workflow.deprecate_patch(PRICE_RULES)  # 1.0 told every change
        told = changed and result.notify
        notices = [Notice.CHANGED] if told else []
        if health_notice is not None:
            notices.append(health_notice)
        for notice in notices:
            for channel in self.state.config.channels:
                delivery = DeliveryInput(
                    notice=notice,
                    channel_id=channel.channel_id,
                    target_id=self.state.config.target_id,
                    url=self.state.config.url,
                    result=result,
                    failure_streak=self.state.failure_streak,
                )
                task = asyncio.create_task(calls.deliver(delivery))
                self._deliveries.add(task)
                task.add_done_callback(self._deliveries.discard)

    @property
    def _unhealthy(self) -> bool:
        return self.state.failure_streak >= self.state.config.unhealthy_after

    async def _check(self, check: CheckInput) -> CheckResult | None:
        """Run the check; if it gives up, dead-letter the slot. None only if even that failed."""
        max_attempts = self.state.config.max_attempts
        try:
            try:
                result = await calls.check_slot(
                    check, max_attempts, self._checks_stopped, self._describe
                )
            except calls.CHECK_FAILED as err:
                if calls.error_type(err) != TARGET_OUT_OF_SYNC or not await self._sync():
                    raise
                result = await calls.check_slot(
                    check, max_attempts, self._checks_stopped, self._describe
                )
        except calls.CHECK_FAILED as err:
            if (recorded := await calls.record_failed(check, err)) is None:
                return None
            result = recorded
        if result.status is not CheckStatus.SKIPPED:
            self.state.last_result = result
            self.state.checks_completed += 1
        return result

    def _checks_stopped(self) -> bool:
        return self._removing

    def _describe(self, doing: str) -> None:
        """What the target is doing, as the Temporal UI shows it (the workflow's current
        details: not recorded in history, so free to change)."""
        if self._unhealthy:
            since = self.state.unhealthy_since
            doing += f"; unhealthy since {format_time(since)}" if since else "; unhealthy"
            streak = self.state.failure_streak
            doing += f" ({streak} failed slot{'' if streak == 1 else 's'} in a row)"
        workflow.set_current_details(doing)

    def _show_paused(self) -> None:
        """Mirror the pause in the PricewatchPaused search attribute (from 1.2 on)."""
        if workflow.patched(PAUSED_SEARCH_ATTRIBUTE_SET):
            workflow.upsert_search_attributes(
                [PAUSED_SEARCH_ATTRIBUTE.value_set(self.state.paused)]
            )

    def _config_problem(self, config: TargetConfig) -> str | None:
        if config.interval_seconds < self.state.min_interval_seconds:
            return (
                f"interval {config.interval_seconds}s is below this target's minimum of "
                f"{self.state.min_interval_seconds}s"
            )
        return None

    def _next_slot(self) -> datetime:
        assert self.state.next_slot is not None, "the next slot is set at registration"
        return self.state.next_slot

    def _mark_mirror_stale(self) -> None:
        self.state.mirror_stale = True
        self._woken = True

    def _should_continue_as_new(self) -> bool:
        legacy = self.state.max_checks_per_run == LEGACY_RUN_CHECKS
        if legacy and self._checks_this_run >= RUN_CHECKS:
            workflow.deprecate_patch(SHORT_RUNS)
            self.state.max_checks_per_run = RUN_CHECKS
        return (
            workflow.info().is_continue_as_new_suggested()
            or self._checks_this_run >= self.state.max_checks_per_run
        )
