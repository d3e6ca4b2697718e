"""The workflow's calls to its activities, each with its timeout, retry policy and summary
(what the Temporal UI shows), and how their failures read. Workflow code: deterministic, no
I/O; activities are called by name (`pricewatch.names.Activity`)."""

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from pricewatch.deliveries import DeliveryFailureInput, DeliveryInput
    from pricewatch.models import (
        CheckInput,
        CheckResult,
        CheckStatus,
        RecordFailureInput,
        RegisterTargetInput,
        Registration,
        UnnotifiedQuery,
    )
    from pricewatch.names import Activity, render_queue
    from pricewatch.policy import (
        BOOKKEEPING_RETRY,
        BOOKKEEPING_TIMEOUT,
        CHECK_LEASE,
        CHECK_RETRY,
        DELIVERY_RETRY,
        DELIVERY_TIMEOUT,
        HEARTBEAT_TIMEOUT,
        LEASE_HELD,
        NOTICE_TRIED_FOR,
        RENDER_PICKUP_TIMEOUT,
        check_timeout,
    )
    from pricewatch.slots import format_time

# Registration needs the database (it holds the grid): while it is away past the bookkeeping
# retries, the workflow waits this long and asks again.
REGISTER_AGAIN_AFTER = timedelta(minutes=5)
# 1.3: a rendered check (`--render`) runs every attempt as a normal activity on the render task
# queue, where a browser is: never as a local activity in the workflow worker. Only targets
# with `render` take this path, and no history before 1.3 has one.
RENDERED_ON_ITS_QUEUE = "rendered-on-its-queue"
# 1.12: a notice is not given up after one round of attempts (8, about 15 min) unless the
# channel refused it for good: a round that ran out (transient answers, or attempts whose
# worker died or froze with them, which no channel answered) is followed by another, until
# NOTICE_TRIED_FOR from its first try. A soak under load recorded notices `failed` after a
# round of chaos on the receiver, and `activity StartToClose timeout` with 0 attempts after
# eight killed workers in a row.
NOTICES_RETRIED_FOR_HOURS = "notices-retried-for-hours"
# How a check fails: a normal activity's error arrives wrapped in an ActivityError, a local
# activity's as the activity's own error (or the timeout).
CHECK_FAILED = (ActivityError, ApplicationError, ActivityTimeout)


async def register(request: RegisterTargetInput) -> Registration:
    """Record the target's grid, or adopt the recorded one; waits for the database."""
    while True:
        try:
            registration: Registration = await workflow.execute_activity(
                Activity.REGISTER_TARGET,
                request,
                result_type=Registration,
                start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                retry_policy=BOOKKEEPING_RETRY,
                summary=f"register {request.config.target_id}",
            )
            return registration
        except ActivityError as err:
            workflow.logger.error("register failed: %s", reason(err))
            await workflow.sleep(REGISTER_AGAIN_AFTER)


class CheckStopped(Exception):
    """The target is being removed: its check stopped during a backoff, without a result."""


async def check_slot(
    check: CheckInput,
    max_attempts: int,
    stopped: Callable[[], bool],
    describe: Callable[[str], None] = lambda _: None,
) -> CheckResult:
    """The first attempt runs as a local activity in the workflow task the slot's timer
    woke (6 history events per check); if it fails and may be retried, the rest run as a
    normal activity after the same backoff, with heartbeats and the retry policy's remaining
    attempts. Raises one of CHECK_FAILED when the check gives up, and CheckStopped if
    `stopped()` turns true meanwhile (a removal does not wait out the retries). `describe`
    is told where the retries stand (the Temporal UI's current details)."""
    retry = dataclasses.replace(CHECK_RETRY, maximum_attempts=max_attempts)
    summary = f"{'retry' if check.retry else 'check'} {check.work_id}"
    # Longer than the fetch's deadline plus the SQL: for a target with its own timeout (1.1),
    # up to 150 s. A check without one (every history recorded before) gets exactly
    # CHECK_TIMEOUT, as before, so nothing changes for replay (and timeouts are not part of
    # what replay compares anyway).
    timeout = check_timeout(check.timeout_seconds)
    if check.render is not None and workflow.patched(RENDERED_ON_ITS_QUEUE):
        describe(
            f"rendering {check.work_id} on task queue {render_queue(workflow.info().task_queue)}"
        )
        return await _attempts(check, retry, timeout, summary, stopped, rendered=True)
    result: CheckResult
    try:
        result = await workflow.execute_local_activity(
            Activity.CHECK_SLOT,
            asked_now(check),
            result_type=CheckResult,
            start_to_close_timeout=timeout,
            retry_policy=RetryPolicy(maximum_attempts=1),
            summary=summary,
        )
        return result
    except CHECK_FAILED as err:
        backoff = first_retry_delay(err)
        if backoff is None or retry.maximum_attempts == 1:
            raise
        describe(
            f"retrying {check.work_id}: attempt 1 of {max_attempts} failed ({reason(err)}); "
            f"attempt 2 not before {format_time(workflow.now() + backoff)}"
        )
    # The same timer `workflow.sleep` would start, but a removal ends it.
    with contextlib.suppress(TimeoutError):
        await workflow.wait_condition(
            stopped, timeout=backoff, timeout_summary=f"back off {check.work_id}"
        )
    if stopped():
        raise CheckStopped
    retry = dataclasses.replace(
        retry,
        initial_interval=retry.initial_interval * retry.backoff_coefficient,
        maximum_attempts=retry.maximum_attempts - 1,
    )
    describe(
        f"retrying {check.work_id}: attempts 2-{max_attempts} of {max_attempts} run in one "
        "activity (its pending attempt and next retry show below)"
    )
    return await _attempts(check, retry, timeout, summary, stopped)


async def _attempts(
    check: CheckInput,
    retry: RetryPolicy,
    start_to_close: timedelta,
    summary: str,
    stopped: Callable[[], bool],
    rendered: bool = False,
) -> CheckResult:
    """The check's attempts as one normal activity (heartbeats, the retry policy), on the
    render task queue for a rendered check; CheckStopped if `stopped()` turns true."""
    attempts = workflow.start_activity(
        Activity.CHECK_SLOT,
        asked_now(check),
        result_type=CheckResult,
        task_queue=render_queue(workflow.info().task_queue) if rendered else None,
        schedule_to_start_timeout=RENDER_PICKUP_TIMEOUT if rendered else None,
        start_to_close_timeout=start_to_close,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=retry,
        summary=summary,
    )
    await workflow.wait_condition(lambda: attempts.done() or stopped())
    if not attempts.done():
        attempts.cancel()  # a backoff between attempts ends now; a fetch at its next beat
        with contextlib.suppress(ActivityError, asyncio.CancelledError):
            await attempts
        raise CheckStopped
    result: CheckResult = await attempts
    return result


async def record_failed(check: CheckInput, error: FailureError) -> CheckResult | None:
    """Dead-letter a slot whose check gave up; None if even that failed (Postgres gone)."""
    # Info: the check's own line already said why (a dead letter is an outcome, not a fault).
    workflow.logger.info("check %s gave up: %s", check.work_id, reason(error))
    try:
        result: CheckResult = await workflow.execute_activity(
            Activity.RECORD_FAILED_SLOT,
            RecordFailureInput(check=asked_now(check), error_message=reason(error)),
            result_type=CheckResult,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
            summary=f"record failed {check.work_id}",
        )
        return result
    except ActivityError as err:
        workflow.logger.error("could not record %s as failed: %s", check.work_id, reason(err))
        return None


async def unnotified_changes(query: UnnotifiedQuery) -> list[CheckResult]:
    try:
        changes: list[CheckResult] = await workflow.execute_activity(
            Activity.UNNOTIFIED_CHANGES,
            query,
            result_type=list[CheckResult],
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
            summary=f"unnotified changes {query.target_id}",
        )
        return changes
    except ActivityError as err:
        workflow.logger.error("could not look for unnotified changes: %s", reason(err))
        return []


async def deliver(delivery: DeliveryInput) -> None:
    """One notice to one channel; its failure is recorded and never touches the check or
    the other channels."""
    summary = f"notify {delivery.channel_id} {delivery.notice.value} {delivery.result.work_id}"
    first_try = workflow.now()
    while True:
        try:
            await workflow.execute_activity(
                Activity.DELIVER_NOTICE,
                delivery,
                start_to_close_timeout=DELIVERY_TIMEOUT,
                retry_policy=DELIVERY_RETRY,
                summary=summary,
            )
            return
        except ActivityError as err:
            ran_out = err.retry_state in (RetryState.MAXIMUM_ATTEMPTS_REACHED, RetryState.TIMEOUT)
            if not (
                ran_out
                and workflow.now() - first_try < NOTICE_TRIED_FOR
                and workflow.patched(NOTICES_RETRIED_FOR_HOURS)
            ):
                failure = err
                break
            workflow.logger.info(
                "%s: a round of attempts ran out (%s); another round", summary, reason(err)
            )
    workflow.logger.warning("%s gave up: %s", summary, reason(failure))
    await bookkeep(
        Activity.RECORD_DELIVERY_FAILED,
        DeliveryFailureInput(delivery=delivery, error_message=reason(failure)),
        f"record failed {summary}",
    )


async def bookkeep(activity: Activity, arg: Any, summary: str) -> bool:
    """Run a bookkeeping activity; report failure instead of failing the workflow."""
    try:
        await workflow.execute_activity(
            activity,
            arg,
            start_to_close_timeout=BOOKKEEPING_TIMEOUT,
            retry_policy=BOOKKEEPING_RETRY,
            summary=summary,
        )
    except ActivityError as err:
        workflow.logger.error("%s failed: %s", summary, reason(err))
        return False
    return True


def unrecorded(
    check: CheckInput, why: str = "could not be recorded: the database was unreachable"
) -> CheckResult:
    """A failed result for a check that could not even be dead-lettered (Postgres gone past
    every retry), or was stopped: still reported to the caller and counted for health."""
    return CheckResult(
        work_id=check.work_id,
        slot=check.slot,
        kind=check.kind,
        status=CheckStatus.FAILED,
        checked_at=workflow.now(),
        attempt_count=1,
        error_message=why,
    )


def asked_now(check: CheckInput) -> CheckInput:
    """The check as asked for now: it carries Temporal's time to the activity."""
    return check.model_copy(update={"asked_at": workflow.now()})


def first_retry_delay(err: FailureError) -> timedelta | None:
    """How long the check's retry policy would wait after this first attempt; None if it
    would not retry."""
    failure = cause(err)
    if isinstance(failure, ApplicationError):
        if failure.non_retryable or failure.type in (CHECK_RETRY.non_retryable_error_types or ()):
            return None
        if failure.next_retry_delay is not None:
            return failure.next_retry_delay
        if failure.type == LEASE_HELD:
            # An attempt that died mid-check (the replay runs the first attempt again)
            # holds the lease until it lapses: retrying sooner would only burn an attempt.
            return max(CHECK_RETRY.initial_interval, CHECK_LEASE)
    return CHECK_RETRY.initial_interval


def cause(err: FailureError) -> BaseException | None:
    """The activity's own error (see CHECK_FAILED)."""
    return err.cause if isinstance(err, ActivityError) else err


def error_type(err: FailureError) -> str | None:
    failure = cause(err)
    return failure.type if isinstance(failure, ApplicationError) else None


def reason(err: FailureError) -> str:
    """What actually went wrong (the HTTP status, the timeout), not the activity wrapper:
    its message alone, without the error type (`str()` of an ApplicationError begins with
    `PermanentFetchError: `), so a dead letter reads as its attempts' rows did."""
    failure = cause(err) or err
    if isinstance(failure, FailureError) and failure.message:
        return failure.message
    return str(failure)
