"""The grid is the identity, end to end: resets with Temporal's own CLI and workers whose
clocks are wrong (libfaketime) leave every slot at `anchor + k * interval` of the anchor the
first registration recorded, with one row per due slot and one notice per change."""

import asyncio
import json
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import libfaketime
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from client.temporal import DATA_CONVERTER, workflow_id
from tests.conftest import PageServer, WebhookReceiver
from tests.helpers import cli, worker_process
from tests.waits import eventually, wait_for
from workers.embedded import find_binary, free_port, start_temporal_dev_server, stop_process

pytestmark = pytest.mark.e2e

INTERVAL = timedelta(seconds=1)


@pytest.fixture(scope="module")
def temporal_address() -> Iterator[str]:
    """A dev server of our own with Temporal's default history limits, so a target's first
    run (the one that registers it) lives long enough to be reset with ten checks in it."""
    with tempfile.TemporaryDirectory(prefix="pricewatch-temporal-") as tmp:
        port = free_port()
        server = start_temporal_dev_server(Path(tmp) / "temporal.db", port=port, ui_port=None)
        try:
            yield f"127.0.0.1:{port}"
        finally:
            stop_process(server)


async def temporal(env: dict[str, str], *args: str) -> str:
    """Temporal's own CLI, as a user would run it against the same server."""
    process = await asyncio.create_subprocess_exec(
        find_binary("temporal"), *args, "--address", env["TEMPORAL_ADDRESS"],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def checks_of(pool: asyncpg.Pool, target_id: str) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM source_checks WHERE target_id = $1 "
            "AND status IN ('unchanged', 'changed')",
            target_id,
        )
    )


async def more_checks(pool: asyncpg.Pool, target_id: str, how_many: int) -> None:
    before = await checks_of(pool, target_id)
    await wait_for(
        pool,
        "SELECT count(*) - $2 FROM source_checks WHERE target_id = $1 "
        "AND status IN ('unchanged', 'changed')",
        target_id,
        before + how_many - 1,
    )


async def assert_on_the_grid(pool: asyncpg.Pool, target_id: str) -> asyncpg.Record:
    """Every row on the recorded grid, one per slot, none missing from the first to the
    last; no skipped row later than the database's clock when it was written."""
    target = await pool.fetchrow("SELECT * FROM monitor_targets WHERE id = $1", target_id)
    assert target is not None
    rows = await pool.fetch(
        "SELECT * FROM source_checks WHERE target_id = $1 AND kind = 'scheduled' "
        "ORDER BY scheduled_for",
        target_id,
    )
    anchor, interval = target["anchor"], timedelta(seconds=target["interval_seconds"])
    slots = [r["scheduled_for"] for r in rows]
    off_grid = [s for s in slots if (s - anchor) % interval]
    assert not off_grid, f"{target_id}: slots off the grid of {anchor}: {off_grid[:3]}"
    expected = [slots[0] + k * interval for k in range((slots[-1] - slots[0]) // interval + 1)]
    assert slots == expected, f"{target_id}: a due slot has no row, or a slot has two"
    skipped = [r for r in rows if r["status"] == "skipped"]
    future = [r["work_id"] for r in skipped if r["scheduled_for"] > r["checked_at"]]
    assert not future, f"skipped rows for slots not yet due: {future[:3]}"
    assert target["next_slot"] <= await pool.fetchval("SELECT now()") + 2 * interval
    return target


async def reset_three_ways(
    env: dict[str, str], client: Client, pool: asyncpg.Pool, target_id: str
) -> None:
    """To the first workflow task of the run that registered the target, to the last
    workflow task, and to a workflow task in the middle of the current run; each reset run
    checks two slots before the next reset."""
    handle = client.get_workflow_handle(workflow_id(target_id))
    await temporal(
        env, "workflow", "reset", "--workflow-id", handle.id, "--type", "FirstWorkflowTask",
        "--reason", "test: reset to the first workflow task",
    )  # fmt: skip
    await more_checks(pool, target_id, 2)
    await temporal(
        env, "workflow", "reset", "--workflow-id", handle.id, "--type", "LastWorkflowTask",
        "--reason", "test: reset to the last workflow task",
    )  # fmt: skip
    await more_checks(pool, target_id, 2)

    async def current_run() -> tuple[str, list[int]] | None:
        """The current run and its completed workflow tasks, once it has one. That run's
        own history: with short runs the workflow may continue as new meanwhile, and its
        new run is shorter than the event id chosen here."""
        run_id = (await handle.describe()).run_id
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        completed = [
            e.event_id
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        ]
        return (run_id, completed) if completed else None

    found = await eventually(current_run, what="a completed task in the current run")
    assert found is not None
    run_id, completed = found
    middle = completed[len(completed) // 2]
    await temporal(
        env, "workflow", "reset", "--workflow-id", handle.id, "--run-id", run_id,
        "--event-id", str(middle),
        "--reason", "test: reset to an event in the middle",
    )  # fmt: skip


@pytest.mark.long
async def test_resets_to_the_first_last_and_a_middle_task_keep_the_grid(
    env: dict[str, str],
    pool: asyncpg.Pool,
    page_server: PageServer,
    webhook_receiver: WebhookReceiver,
) -> None:
    """One target added with `pricewatch add`, one started with `temporal workflow start`
    and no `start_at` (the first registration decides its anchor). Each runs ten checks, is
    reset three ways while its page keeps changing, and runs on: the grid never moves, no
    slot is checked twice, none is lost, and each change is told once."""
    client = await Client.connect(env["TEMPORAL_ADDRESS"], data_converter=DATA_CONVERTER)
    targets = ("grid-cli", "grid-temporal")
    for target_id in targets:
        page_server.set(f"/{target_id}", "<p>EUR 1</p>")
    async with worker_process(env):
        code, _, err = await cli(
            env, "add", "grid-cli", page_server.url("/grid-cli"), "--every", "1s",
            "--webhook", webhook_receiver.url,
        )  # fmt: skip
        assert code == 0, err
        config = {
            "target_id": "grid-temporal",
            "url": page_server.url("/grid-temporal"),
            "interval_seconds": 1,
            "channels": [{"kind": "webhook", "destination": webhook_receiver.url}],
        }
        await temporal(
            env, "workflow", "start", "--type", "MonitorTarget",
            "--task-queue", env["PRICEWATCH_TASK_QUEUE"],
            "--workflow-id", workflow_id("grid-temporal"), "--id-conflict-policy", "UseExisting",
            "--input", json.dumps({"config": config, "min_interval_seconds": 1}),
        )  # fmt: skip
        for target_id in targets:
            await more_checks(pool, target_id, 10)
        anchors = {t: (await assert_on_the_grid(pool, t))["anchor"] for t in targets}

        for n, target_id in enumerate(targets):
            page_server.set(f"/{target_id}", f"<p>EUR {n + 2}</p>")
            await reset_three_ways(env, client, pool, target_id)
            page_server.set(f"/{target_id}", f"<p>EUR {n + 3}</p>")
            await more_checks(pool, target_id, 4)
        # Paused, with no check in flight: a fetch under way would be a hit without its row.
        for target_id in targets:
            assert (await cli(env, "pause", target_id))[0] == 0

        async def settled() -> bool:
            held = "SELECT count(*) FROM monitor_targets WHERE lease_token IS NOT NULL"
            return int(await pool.fetchval(held)) == 0

        await eventually(settled, what="no check in flight")
        for target_id in targets:
            assert (await assert_on_the_grid(pool, target_id))["anchor"] == anchors[target_id]
            fetched = await checks_of(pool, target_id)
            assert page_server.hits[f"/{target_id}"] == fetched, "a slot was checked twice"
        changed_rows = "SELECT count(*) FROM source_checks WHERE status = 'changed'"

        async def all_told() -> bool:  # the last notices landed (or one too many)
            return len(webhook_receiver.received) >= int(await pool.fetchval(changed_rows))

        await eventually(all_told, what="a notice per change")
        changed = await pool.fetch("SELECT work_id FROM source_checks WHERE status = 'changed'")
        for target_id in targets:
            assert (await cli(env, "remove", target_id))[0] == 0
    assert len(changed) >= 2 * len(targets)
    told = [str(payload["work_id"]) for _, payload in webhook_receiver.received]
    assert sorted(told) == sorted(r["work_id"] for r in changed), "a change told twice or never"


@pytest.mark.long
@pytest.mark.parametrize("skew", ["+10m", "-10m"])
async def test_a_worker_with_a_wrong_clock_neither_skips_nor_invents_slots(
    skew: str,
    env: dict[str, str],
    pool: asyncpg.Pool,
    page_server: PageServer,
    webhook_receiver: WebhookReceiver,
) -> None:
    """The only worker runs with its clock ten minutes ahead or behind (libfaketime). One
    check is held past three slots: the slots it overran are skipped rows (no burst of late
    checks), none is in the future, and the schedule stays on the grid near the real now.
    Its webhook carries a timestamp the receiver accepts (within Standard Webhooks' five
    minutes of the receiver's clock)."""
    _, preload = libfaketime.get_reload_information()
    skewed = {**env, **preload, "FAKETIME": skew}
    page_server.set("/skewed", "<p>EUR 1</p>")
    async with worker_process(skewed):
        code, _, err = await cli(
            env, "add", "skewed", page_server.url("/skewed"), "--every", "1s",
            "--webhook", webhook_receiver.url,
        )  # fmt: skip
        assert code == 0, err
        await more_checks(pool, "skewed", 2)
        page_server.set("/skewed", "<p>EUR 2</p>")
        await wait_for(pool, "SELECT count(*) FROM deliveries WHERE status = 'sent'")
        assert len(webhook_receiver.received) == 1, "the receiver refused the first send"
        hold = page_server.hold_next("/skewed")
        await asyncio.wait_for(hold.arrived.wait(), timeout=10)
        # The scenario, not a wait: the held check overruns three slots (the assertions need
        # a skipped row, not an exact count).
        await asyncio.sleep(3.5 * INTERVAL.total_seconds())
        hold.release.set()
        await more_checks(pool, "skewed", 4)
        await assert_on_the_grid(pool, "skewed")
        rows = await pool.fetch("SELECT * FROM source_checks ORDER BY scheduled_for")
        assert (await cli(env, "remove", "skewed"))[0] == 0
    late = [
        r["work_id"]
        for r in rows
        if r["status"] != "skipped" and r["checked_at"] - r["scheduled_for"] > 1.5 * INTERVAL
    ]
    assert len(late) <= 1, f"missed slots were checked late in a burst: {late}"
    assert any(r["status"] == "skipped" for r in rows), "the held check's overrun is skipped"
