"""A reconfigure while the next slot is retrying, end to end (dev server, a real worker
process, the CLI's `apply`): the database has the new config at once, a second apply has
nothing to do, the slot in flight finishes with the config it started with, and its dead
letter moves the schedule on the new grid, anchored at that slot."""

from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import PageServer
from tests.helpers import cli, worker_process
from tests.waits import eventually

pytestmark = pytest.mark.e2e


RETRY_AFTER_SECONDS = 3
MAX_ATTEMPTS = 5  # about 12 s of retries: room for two `apply` runs in between


def targets_file(path: Path, url: str, every: str) -> Path:
    path.write_text(
        f"targets:\n  - {{id: midretry, url: '{url}', every: {every}, "
        f"max_attempts: {MAX_ATTEMPTS}}}\n"
    )
    return path


async def test_a_reconfigure_during_a_backoff_is_mirrored_at_once_and_keeps_the_next_slot(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, tmp_path: Path
) -> None:
    busy = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    page_server.queue("/busy", *[(503, "busy")] * 40, headers=busy)
    page_server.set("/ok", "<p>EUR 4.49</p>")
    targets = tmp_path / "targets.yaml"
    async with worker_process(env):
        code, _, err = await cli(
            env, "apply", str(targets_file(targets, page_server.url("/busy"), "2s"))
        )
        assert code == 0, err

        async def retrying() -> asyncpg.Record | None:
            return await pool.fetchrow(
                "SELECT work_id, scheduled_for FROM source_checks"
                " WHERE target_id = 'midretry' AND status = 'retrying'"
            )

        slot_row = await eventually(retrying, what="a retrying slot")
        assert slot_row is not None
        slot: datetime = slot_row["scheduled_for"]

        # A new interval and a new page while the slot backs off.
        targets_file(targets, page_server.url("/ok"), "5s")
        code, out, err = await cli(env, "apply", str(targets))
        assert code == 0, err
        assert "~ reconfigure midretry" in out, out
        mirror = await pool.fetchrow(
            "SELECT url, interval_seconds, anchor, next_slot FROM monitor_targets"
            " WHERE id = 'midretry'"
        )
        assert mirror is not None
        still = await pool.fetchval(
            "SELECT status FROM source_checks WHERE work_id = $1", slot_row["work_id"]
        )
        assert still == "retrying", "the apply must land while the slot is retrying"
        assert mirror["interval_seconds"] == 5 and mirror["url"].endswith("/ok"), dict(mirror)
        assert mirror["anchor"] == slot == mirror["next_slot"], (dict(mirror), slot)

        code, out, err = await cli(env, "apply", str(targets))
        assert code == 0, err
        assert out.strip().startswith("plan: nothing to do"), out

        async def given_up() -> bool:
            status = await pool.fetchval(
                "SELECT status FROM source_checks WHERE work_id = $1", slot_row["work_id"]
            )
            return bool(status == "failed")

        await eventually(given_up, within=60, what="the slot's dead letter")
        # The slot in flight finished with the config it started with: every attempt
        # asked the old page.
        assert page_server.hits["/busy"] == MAX_ATTEMPTS

        async def checked_on_the_new_page() -> bool:
            return page_server.hits["/ok"] > 0

        await eventually(checked_on_the_new_page, what="a check of the new page")

    rows = await pool.fetch(
        "SELECT scheduled_for, status FROM source_checks"
        " WHERE target_id = 'midretry' AND kind = 'scheduled' AND scheduled_for > $1"
        " ORDER BY scheduled_for",
        slot,
    )
    assert rows, "slots after the dead letter"
    for row in rows:
        # Every later slot, skipped or checked, is on the new grid anchored at the slot.
        assert (row["scheduled_for"] - slot) % timedelta(seconds=5) == timedelta(0), [
            (r["scheduled_for"] - slot, r["status"]) for r in rows
        ]
    gaps = [b["scheduled_for"] - a["scheduled_for"] for a, b in pairwise(rows)]
    assert all(gap == timedelta(seconds=5) for gap in gaps), gaps
