"""Regressions found in review and by the chaos run: IPv6 forms that embed a private IPv4
address, a webhook to a blocked address, a queued check while deliveries drain before
continue-as-new, and a change recorded by a run that a reset left behind."""

import asyncio
import ipaddress
from datetime import timedelta

import asyncpg
import pytest
from temporalio.client import WorkflowUpdateStage
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from activities import store
from activities.checks import CheckActivities
from activities.notify import NotifyActivities, SmtpSettings
from fetchers.guard import AddressPolicy
from fetchers.http import new_client
from pricewatch.models import (
    Channel,
    ChannelKind,
    CheckInput,
    CheckKind,
    CheckResult,
    CheckStatus,
    TargetConfig,
)
from pricewatch.slots import work_id
from tests.conftest import MailSink, PageServer, Start, WebhookReceiver
from tests.helpers import add_target, anchor_of, deliveries, delivery, rows, running_worker, watched
from tests.waits import eventually, wait_for
from workers.worker import WorkerTuning
from workflows.monitor import MonitorTarget

SECOND = timedelta(seconds=1)


@pytest.mark.parametrize(
    "address",
    ["64:ff9b::a9fe:a9fe", "64:ff9b::a00:1", "64:ff9b:1::a00:1", "2002:a9fe:a9fe::1", "::7f00:1"],
)
def test_ipv6_forms_embedding_private_ipv4_are_refused(address: str) -> None:
    assert AddressPolicy().refusal(ipaddress.ip_address(address)) is not None


async def test_a_webhook_to_a_blocked_address_fails_permanently_and_is_recorded(
    pool: asyncpg.Pool, webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:  # fmt: skip
    config = await add_target(pool, webhook_receiver)
    async with new_client(AddressPolicy()) as strict:  # loopback NOT allowed: refused pre-connect
        notify = NotifyActivities(pool, strict, smtp_server[1])
        notice = delivery(config, ChannelKind.WEBHOOK)
        with pytest.raises(ApplicationError) as err:
            await ActivityEnvironment().run(notify.deliver_notice, notice)
    assert err.value.non_retryable
    [row] = await deliveries(pool)
    assert row["status"] == "failed"


async def test_check_now_while_deliveries_drain_before_continue_as_new(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, smtp_server: tuple[MailSink, SmtpSettings],
    start: Start, task_queue: str,
) -> None:  # fmt: skip
    _, smtp = smtp_server
    env = time_skipping_env
    config = watched(
        page_server, [Channel(kind=ChannelKind.WEBHOOK, destination=webhook_receiver.url)]
    )
    webhook_receiver.answers = [503] * 100
    async with running_worker(env.client, task_queue, pool, smtp):
        handle = await start(config, start_at=await anchor_of(env), max_checks_per_run=1)
        await env.sleep(timedelta(hours=1, minutes=30))  # baseline, then CAN
        page_server.set(f"/{config.target_id}", "price 12")
        await env.sleep(timedelta(minutes=32))  # change; webhook retrying; CAN waits
        update = await handle.start_update(
            "check_now", result_type=CheckResult, wait_for_stage=WorkflowUpdateStage.ACCEPTED
        )
        await env.sleep(timedelta(hours=3))
        before = len(await rows(pool, config.target_id))
        assert before >= 5, f"schedule stalled: only {before} rows"
        result = await asyncio.wait_for(update.result(), timeout=20)
        assert result.work_id


async def test_a_change_the_reset_run_never_told_is_handed_to_the_new_run(
    pool: asyncpg.Pool, webhook_receiver: WebhookReceiver
) -> None:
    """Found by the chaos run: a reset to before slot 1's check; the old run had recorded
    slot 2 as changed but died before notifying. The new run re-checks slot 1 (already
    recorded) and jumps to slot 3: the result names slot 2 so the new run tells the
    channels. Once every channel has settled, it is not named again."""
    hour = timedelta(hours=1)
    # Ahead of the database's clock, so each commit moves the schedule exactly one slot on.
    first = (await pool.fetchval("SELECT now()")).replace(microsecond=0) + hour
    config = TargetConfig(
        target_id="acme", url="https://example.com/p", interval_seconds=3600,
        channels=[Channel(kind=ChannelKind.WEBHOOK, destination=webhook_receiver.url)],
    )  # fmt: skip
    await store.sync_target(pool, config, next_slot=first, enabled=True)
    for k, status in enumerate([CheckStatus.UNCHANGED, CheckStatus.CHANGED]):
        slot = first + k * hour
        claim = await store.claim(
            pool, target_id="acme", work_id=work_id("acme", slot), execution_id=f"t{k}",
            lease=timedelta(seconds=45), on_schedule=True, slot=slot,
        )  # fmt: skip
        assert claim.claimed
        outcome = store.Outcome(status=status, result_hash=f"h{k}", previous_hash="h")
        await store.commit(
            pool, target_id="acme", execution_id=f"t{k}", work_id=work_id("acme", slot), slot=slot,
            kind=CheckKind.SCHEDULED, outcome=outcome, advance=True,
        )  # fmt: skip
    check = CheckInput(target_id="acme", url=config.url, slot=first)
    async with new_client(AddressPolicy()) as http:
        checks = CheckActivities(pool, http)
        again: CheckResult = await ActivityEnvironment().run(checks.check_slot, check)
        assert again.already_recorded and again.next_slot == first + 2 * hour
        assert [c.work_id for c in again.unnotified] == [work_id("acme", first + hour)]

        await pool.execute(
            "INSERT INTO deliveries (work_id, channel_id, notice, target_id, message_id, status,"
            " sent_at) VALUES ($1, $2, 'changed', 'acme', 'm', 'sent', now())",
            work_id("acme", first + hour), config.channels[0].channel_id,
        )  # fmt: skip
        settled: CheckResult = await ActivityEnvironment().run(checks.check_slot, check)
        assert settled.unnotified == []


async def test_a_rerun_of_a_final_slot_moves_a_schedule_left_behind_and_records_skips(
    pool: asyncpg.Pool,
) -> None:
    """Found by the chaos run: a resume during a long check synced the schedule back to a
    slot that was already final; the re-run returned "already recorded" and the workflow
    jumped ahead, leaving the slots in between without rows and the database behind."""
    hour = timedelta(hours=1)
    slot = (await pool.fetchval("SELECT now()")).replace(microsecond=0) - 3 * hour - hour / 2
    config = TargetConfig(target_id="acme", url="https://example.com/p", interval_seconds=3600)
    await store.sync_target(pool, config, next_slot=slot, enabled=True)
    await store.sync_target(pool, config, next_slot=slot, enabled=True, skipped=[slot])
    check = CheckInput(target_id="acme", url=config.url, slot=slot)
    async with new_client(AddressPolicy()) as http:
        result: CheckResult = await ActivityEnvironment().run(
            CheckActivities(pool, http).check_slot, check
        )
    assert result.already_recorded and result.next_slot == slot + 4 * hour
    assert await pool.fetchval("SELECT next_slot FROM monitor_targets") == slot + 4 * hour
    statuses = await pool.fetch("SELECT scheduled_for, status FROM source_checks ORDER BY 1")
    assert [(r["scheduled_for"], r["status"]) for r in statuses] == [
        (slot + k * hour, "skipped") for k in range(4)
    ]


async def told_of(receiver: WebhookReceiver, work_id: str) -> list[dict[str, object]]:
    return [payload for _, payload in receiver.received if payload["work_id"] == work_id]


async def test_a_change_in_a_slot_a_resume_skips_is_still_told(
    time_skipping_env: WorkflowEnvironment, pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, start: Start, task_queue: str,
) -> None:  # fmt: skip
    """Found by the chaos run: a reset took a workflow back to before a slot whose check
    (in the old run) later recorded a change; the signals the reset re-applied paused and
    resumed it, and the resume skipped that slot. The change is still told, once."""
    client = time_skipping_env.client
    target_id = "reset-away"
    page_server.set(f"/{target_id}", "price 10")
    config = TargetConfig(
        target_id=target_id, url=page_server.url(f"/{target_id}"), interval_seconds=2,
        channels=[Channel(kind=ChannelKind.WEBHOOK, destination=webhook_receiver.url)],
    )  # fmt: skip
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + 3 * SECOND
    async with running_worker(
        client, task_queue, pool, tuning=WorkerTuning(max_cached_workflows=0, sandboxed=True)
    ):
        handle = await start(config, start_at=anchor, min_interval_seconds=1)
        assert (await handle.query(MonitorTarget.status)).next_slot == anchor
        # Registered: the row the old run's check needs.
        await wait_for(pool, "SELECT count(*) FROM monitor_targets")
    changed = work_id(target_id, anchor)  # what the run the reset left behind recorded
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status,"
        " result_hash, previous_hash) VALUES ($1, $2, $3, now(), 'changed', 'new', 'old')",
        changed, target_id, anchor,
    )  # fmt: skip
    # The scenario, not a wait: the slot falls due (3 s after the anchor was taken) with no
    # worker running; any time beyond that changes nothing.
    await asyncio.sleep(5)
    await handle.signal(MonitorTarget.pause)
    await handle.signal(MonitorTarget.resume)
    later_checked = (
        "SELECT count(*) FROM source_checks WHERE target_id = $1 AND scheduled_for > $2"
        " AND status IN ('unchanged', 'changed')"
    )
    async with running_worker(client, task_queue, pool):
        # Told, and the run went on past the resume to check a later slot: a second notice
        # of the skipped slot would have come by then.
        await eventually(lambda: told_of(webhook_receiver, changed), what=f"a notice of {changed}")
        await wait_for(pool, later_checked, target_id, anchor)
    told = await told_of(webhook_receiver, changed)
    assert [p["type"] for p in told] == ["page.changed"]
