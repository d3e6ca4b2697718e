"""A calendar target through the real CLI, worker and dev server (issue 31): `add --cron`,
`list` and `status` say the schedule as written, a check lands on the calendar, a
reconfigure to `--every` and on to `--at/--on` keeps the pending slot, `export` writes the
calendar back, and options that do not go together get one line and exit 2."""

import asyncio
import itertools
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import asyncpg
import pytest
from aiohttp import web

from tests.chaos.stack import serve
from tests.conftest import PageServer
from tests.helpers import cli, remove_all, worker_process
from tests.waits import eventually, wait_for


async def test_a_calendar_target_from_add_to_export(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer
) -> None:
    page_server.set("/cal", "price 10")
    url = page_server.url("/cal")
    async with worker_process(env):
        code, out, err = await cli(
            env, "add", "e2e-cal", url, "--cron", "* * * * *", "--tz", "Asia/Kolkata"
        )
        assert code == 0, err
        assert f"added e2e-cal: {url} * * * * * Asia/Kolkata" in out
        code, listed, _ = await cli(env, "list")
        row = next(line for line in listed.splitlines() if line.startswith("e2e-cal"))
        assert "* * * * * Asia/Kolkata" in row
        code, status, _ = await cli(env, "status", "e2e-cal")
        assert "schedule:   * * * * * Asia/Kolkata" in status
        # Reconfigured while its first slot is pending (it does not wait for a minute to pass
        # first): the slot stays, is checked on the minute, and the 5 s grid goes on from it.
        # Should the first slot come due before the reconfigure lands, the next one stays.
        code, out, err = await cli(env, "add", "e2e-cal", url, "--every", "5s")
        assert code == 0 and f"reconfigured e2e-cal: {url} every 5s" in out, err

        async def five_second_run() -> tuple[list[datetime], int]:
            """The slots, and where their last unbroken run of 5 s steps starts."""
            slots = [r[0] for r in await pool.fetch("SELECT scheduled_for FROM source_checks")]
            slots.sort()
            start = len(slots) - 1
            while start > 0 and (slots[start] - slots[start - 1]).total_seconds() == 5:
                start -= 1
            return slots, start

        async def run_of_four() -> tuple[list[datetime], int] | None:
            slots, start = await five_second_run()
            return (slots, start) if len(slots) - start >= 4 else None

        found = await eventually(run_of_four, within=120, what="the pending slot, then 5 s")
        assert found is not None
        slots, start = found
        assert all(s.second == 0 and s.microsecond == 0 for s in slots[: start + 1]), (
            "the pending slot stayed (on the minute), as did any checked before it",
            slots,
        )

        at = ["--at", "08:00", "--on", "mon-fri", "--tz", "Europe/Berlin", "--jitter", "10m"]
        reconfigured = datetime.now(UTC)
        code, out, err = await cli(env, "add", "e2e-cal", url, *at)
        assert code == 0, err
        assert "reconfigured e2e-cal" in out and "weekdays 08:00 Europe/Berlin + jitter 10m" in out
        mirrored = await pool.fetchrow(
            "SELECT time_zone, calendar_times, jitter_seconds FROM monitor_targets"
        )
        assert mirrored is not None
        assert tuple(mirrored) == ("Europe/Berlin", [480], 600)

        async def on_the_calendar() -> datetime | None:
            slot: datetime = await pool.fetchval("SELECT next_slot FROM monitor_targets")
            local = slot.astimezone(ZoneInfo("Europe/Berlin"))
            in_window = local.weekday() < 5 and (local.hour, local.minute // 10) == (8, 0)
            return slot if in_window else None  # 08:00 + up to 10 min of jitter

        ahead = await eventually(on_the_calendar, within=30, what="the next slot at 08:00")
        # Not before the reconfigure; it may be due by now: run on a weekday between 08:00
        # and 08:10 Berlin time, today's jittered slot can be the one it finds.
        assert ahead is not None and ahead >= reconfigured
        code, exported, _ = await cli(env, "export")
        assert "at:\n  - 08:00" in exported, exported
        assert "'on': mon-fri" in exported and "tz: Europe/Berlin" in exported
        assert "jitter: 10m" in exported and "every:" not in exported.split("e2e-cal")[1]
        assert (await cli(env, "remove", "e2e-cal"))[0] == 0


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--cron", "0 8 * * 1-5", "--every", "1h"], "two schedules"),
        (["--cron", "0 8 * * 1-5", "--at", "08:00"], "two calendars"),
        (["--on", "mon-fri"], "--on needs --at"),
        (["--tz", "Europe/Berlin"], "--tz needs --cron or --at"),
        (["--cron", "0 8 * * 1-5", "--tz", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
        (["--cron", "0 8 L * *"], "L"),
        (["--cron", "*/5 * * * *", "--jitter", "10m"], "jitter 10m must be shorter"),
        (["--at", "25:00"], "25:00"),
    ],
)
async def test_calendar_options_that_do_not_go_together_get_one_line(
    env: dict[str, str], options: list[str], says: str
) -> None:
    code, out, err = await cli(env, "add", "e2e-bad", "http://127.0.0.1:9/", *options)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (code, err)
    assert out == ""


async def test_apply_spreads_the_pages_of_one_shop_apart(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, tmp_path: Path
) -> None:
    """Twenty pages of one host every 24h: the plan says when each first comes due, and
    their slots are at least PRICEWATCH_SITE_GAP (here 3 s) apart, where `apply` without
    spreading would start them all within the same second."""
    pages = [f"  - {{id: shop-{n}, url: '{page_server.url(f'/p{n}')}', every: 24h}}"
             for n in range(20)]  # fmt: skip
    targets = tmp_path / "targets.yaml"
    targets.write_text("targets:\n" + "\n".join(pages) + "\n")
    spread = {**env, "PRICEWATCH_SITE_GAP": "3s"}
    async with worker_process(env):
        code, out, err = await cli(spread, "apply", str(targets))
        assert code == 0, err
        assert "+ add shop-0 (every 1d, first check now)" in out
        assert "+ add shop-19 (every 1d, first check in 5" in out, out  # 57 s
        await wait_for(pool, "SELECT (count(*) = 20)::int FROM monitor_targets")
        slots = sorted(r[0] for r in await pool.fetch("SELECT anchor FROM monitor_targets"))
        assert min(b - a for a, b in itertools.pairwise(slots)).total_seconds() >= 3
        await remove_all(env, tmp_path, 20)


async def test_apply_places_the_calendar_pages_of_one_shop_apart(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, tmp_path: Path
) -> None:
    """Twelve pages of one host daily at 08:00 Berlin: the plan says when each first comes
    due, the workflows and the database put their slots PRICEWATCH_SITE_GAP (3 s) apart, and
    the same file again, or the export, changes nothing."""
    pages = [f"  - {{id: cal-{n}, url: '{page_server.url(f'/c{n}')}', at: ['08:00'], "
             "tz: Europe/Berlin}" for n in range(12)]  # fmt: skip
    targets = tmp_path / "targets.yaml"
    targets.write_text("targets:\n" + "\n".join(pages) + "\n")
    spread = {**env, "PRICEWATCH_SITE_GAP": "3s"}
    async with worker_process(env):
        code, out, err = await cli(spread, "apply", str(targets))
        assert code == 0, err
        firsts = re.findall(r"\+ add cal-\d+ \(daily 08:00 Europe/Berlin(?: \+(\d+)s)?, "
                            r"first check (\S+)\)", out)  # fmt: skip
        assert len(firsts) == 12, out
        offsets = sorted(int(o or 0) for o, _ in firsts)
        assert offsets == [3 * n for n in range(12)], out
        await wait_for(pool, "SELECT (count(*) = 12)::int FROM monitor_targets")
        mirrored = await pool.fetch("SELECT calendar_offset, next_slot FROM monitor_targets")
        assert sorted(r["calendar_offset"] for r in mirrored) == offsets
        slots = sorted(r["next_slot"] for r in mirrored)
        assert [(s - slots[0]).total_seconds() for s in slots] == offsets
        assert slots[0].astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M:%S") == "08:00:00"
        code, out, err = await cli(spread, "apply", str(targets))
        assert code == 0 and "nothing to do" in out, (out, err)
        code, exported, _ = await cli(env, "export")
        again = tmp_path / "exported.yaml"
        again.write_text(exported)
        code, out, err = await cli(spread, "apply", str(again))
        assert code == 0 and "nothing to do" in out, (out, err)
        # One page moves to 09:00 and a new one joins it there: placed together, 3 s apart.
        moved = [p.replace("08:00", "09:00") for p in pages[:1]]
        joined = [f"  - {{id: cal-12, url: '{page_server.url('/c12')}', at: ['09:00'], "
                  "tz: Europe/Berlin}"]  # fmt: skip
        targets.write_text("targets:\n" + "\n".join(moved + pages[1:] + joined) + "\n")
        code, out, err = await cli(spread, "apply", str(targets))
        assert code == 0 and "~ reconfigure cal-0" in out and "+ add cal-12" in out, (out, err)
        await wait_for(pool, "SELECT (count(*) = 13)::int FROM monitor_targets")
        nine = await pool.fetch(
            "SELECT calendar_offset FROM monitor_targets WHERE calendar_times = '{540}'"
        )
        assert sorted(r[0] for r in nine) == [0, 3], out
        await remove_all(env, tmp_path, 13)


@pytest.mark.long
async def test_a_worker_killed_mid_check_of_a_calendar_slot_costs_no_slot(
    env: dict[str, str], pool: asyncpg.Pool
) -> None:
    """SIGKILL of the worker while a calendar slot's check waits on a slow page: another
    worker records that slot, once, on the calendar (the same claim, lease and one-row commit
    as an interval grid's)."""
    hits: list[float] = []

    async def slow_once(request: web.Request) -> web.Response:
        hits.append(time.monotonic())
        if len(hits) == 1:
            await asyncio.sleep(20)  # the worker is killed meanwhile
        return web.Response(text="price 10")

    async with serve([web.get("/slow", slow_once)]) as url:
        async with worker_process(env) as doomed:
            code, _, err = await cli(env, "add", "cal-kill", f"{url}/slow", "--cron", "* * * * *")
            assert code == 0, err

            async def fetching() -> bool:
                return bool(hits)

            await eventually(fetching, within=75, what="the slot's check fetching")
            doomed.kill()
            await doomed.wait()
        async with worker_process(env):
            await eventually(
                lambda: pool.fetchval(
                    "SELECT count(*) FROM source_checks WHERE status = 'unchanged'"
                ),
                within=150, what="the slot's row",
            )  # fmt: skip
            rows = await pool.fetch(
                "SELECT scheduled_for, count(*) AS n FROM source_checks "
                "WHERE status <> 'skipped' GROUP BY scheduled_for"
            )
            assert len(hits) >= 2, "the second worker fetched the slot again"
            assert all(r["n"] == 1 for r in rows), rows
            assert all(r["scheduled_for"].second == 0 for r in rows), "on the calendar"
            assert (await cli(env, "remove", "cal-kill"))[0] == 0
