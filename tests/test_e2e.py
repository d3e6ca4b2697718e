"""End to end: the Temporal dev server, real `pricewatch worker` processes, real Postgres,
a real page server on 127.0.0.1, and the CLI as a user runs it."""

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from temporalio.client import Client, ScheduleActionStartWorkflow
from temporalio.worker import Replayer

from activities.notify import SmtpSettings
from client import plans
from client.inputs import Unknown
from client.manifest import Entry, ManifestError
from client.plans import Action
from client.pricewatch import Pricewatch
from client.temporal import DATA_CONVERTER, workflow_id
from pricewatch import views
from pricewatch.names import RETENTION_SCHEDULE_ID, RETENTION_WORKFLOW_TYPE
from pricewatch.settings import Settings
from tests.chaos.proxy import Proxy, postgres_upstream, through
from tests.conftest import MailSink, PageServer, WebhookReceiver
from tests.helpers import PRICEWATCH, cli, read_until, remove_all, worker_process
from tests.waits import eventually, wait_for
from workers.embedded import free_port
from workflows.monitor import MonitorTarget

pytestmark = pytest.mark.e2e

INTERVAL_SECONDS = 2


async def quiet_slots_checked(pool: asyncpg.Pool, target_id: str) -> None:
    """Wait until two slots were checked unchanged after the target's newest change: a
    notice a quiet slot wrongly sent has had its chance (what a fixed sleep stood for)."""
    await wait_for(
        pool,
        "SELECT count(*) - 1 FROM source_checks WHERE target_id = $1 AND status = 'unchanged'"
        " AND checked_at > (SELECT max(checked_at) FROM source_checks"
        "                    WHERE target_id = $1 AND status = 'changed')",
        target_id,
    )


async def test_checks_run_a_change_is_recorded_once_and_the_cli_shows_it(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, temporal_address: str
) -> None:
    page_server.set("/pricing", "<p>EUR 4.49</p>")
    async with worker_process(env):
        code, out, err = await cli(
            env,
            "add",
            "e2e-pricing",
            page_server.url("/pricing"),
            "--every",
            f"{INTERVAL_SECONDS}s",
        )
        assert code == 0, err
        assert "added e2e-pricing" in out
        code, out, _ = await cli(
            env,
            "add",
            "e2e-pricing",
            page_server.url("/pricing"),
            "--every",
            f"{INTERVAL_SECONDS}s",
        )
        assert code == 0 and "nothing changed" in out
        await wait_for(
            pool, "SELECT count(*) - 2 FROM source_checks WHERE target_id = 'e2e-pricing'"
        )
        page_server.set("/pricing", "<p>EUR 5.49</p>")
        await wait_for(
            pool,
            "SELECT count(*) FROM source_checks WHERE status = 'changed'",
        )
        await wait_for(
            pool,
            "SELECT count(*) FROM source_checks WHERE status = 'unchanged' "
            "AND previous_hash = result_hash AND checked_at > "
            "(SELECT checked_at FROM source_checks WHERE status = 'changed')",
        )
        code, out, _ = await cli(env, "history", "e2e-pricing")
        assert code == 0
        assert out.count(" changed ") == 1, out
        code, out, _ = await cli(env, "status", "e2e-pricing")
        assert code == 0 and "active" in out and "e2e-pricing:" in out
        code, out, _ = await cli(env, "list")
        assert code == 0 and "e2e-pricing" in out

        code, out, err = await cli(env, "check-now", "e2e-pricing")
        assert code == 0, err
        assert "e2e-pricing:manual:" in out and "unchanged" in out

        assert (await cli(env, "pause", "e2e-pricing"))[0] == 0
        # Paused in the mirror and no check in flight (one that began before the pause
        # finishes): from here on, no row may appear.
        await wait_for(
            pool,
            "SELECT count(*) FROM monitor_targets WHERE id = 'e2e-pricing' AND NOT enabled"
            " AND lease_token IS NULL",
        )
        paused_count = await pool.fetchval("SELECT count(*) FROM source_checks")
        # The scenario, not a wait: slots pass while paused; none may add a row, however
        # many passed.
        await asyncio.sleep(3 * INTERVAL_SECONDS)
        assert await pool.fetchval("SELECT count(*) FROM source_checks") == paused_count
        code, out, _ = await cli(env, "status", "e2e-pricing")
        assert "paused" in out
        assert (await cli(env, "resume", "e2e-pricing"))[0] == 0
        await wait_for(pool, "SELECT count(*) - $1 FROM source_checks", paused_count)

        client = await Client.connect(temporal_address, data_converter=DATA_CONVERTER)
        handle = client.get_workflow_handle(workflow_id("e2e-pricing"))
        history = await handle.fetch_history()

        code, out, err = await cli(env, "remove", "e2e-pricing")
        assert code == 0, err
    records = await pool.fetch("SELECT * FROM source_checks")
    assert records == [], "remove deletes the target and its checks"
    # The history this run recorded replays deterministically against today's code.
    await Replayer(workflows=[MonitorTarget], data_converter=DATA_CONVERTER).replay_workflow(
        history
    )


async def test_a_worker_started_while_its_dependencies_are_away_waits_for_them(
    env: dict[str, str], database_url: str, temporal_address: str
) -> None:
    """Temporal black-holed and Postgres resetting every connection: the worker says what it
    waits for and starts polling once both are back, instead of exiting (the soak saw workers
    die at start-up this way, a hundred times in 24 minutes). Each fault lasts until the
    worker said it waits for that one: timed faults passed before a slow start saw them."""
    host, _, port = temporal_address.rpartition(":")
    frontend, database = (
        Proxy("temporal", (host, int(port))),
        Proxy("postgres", postgres_upstream(database_url)),
    )
    await frontend.start()
    await database.start()
    faults = {
        b"waiting for Temporal": asyncio.create_task(frontend.fault("blackhole", 600)),
        b"waiting for Postgres": asyncio.create_task(database.fault("reset", 600)),
    }
    env = {**env, "TEMPORAL_ADDRESS": frontend.address,
           "PRICEWATCH_DATABASE_URL": through(database_url, database)}  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        PRICEWATCH, "worker", env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None

    def dependency_back(line: bytes) -> None:
        for said, fault in faults.items():
            if said in line:
                fault.cancel()

    seen: list[bytes] = []
    try:
        await read_until(process, b"polling", seen, within=150, each=dependency_back)
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=40)
        for fault in faults.values():
            fault.cancel()
        await frontend.stop()
        await database.stop()
    text = b"".join(seen).decode()
    assert "waiting for Temporal" in text and "waiting for Postgres" in text, text
    assert process.returncode == 0


async def test_a_worker_for_a_namespace_that_does_not_exist_exits_with_one_line(
    env: dict[str, str],
) -> None:
    """Waiting out an unreachable Temporal must not wait out a misspelt namespace."""
    process = await asyncio.create_subprocess_exec(
        PRICEWATCH, "worker", env={**env, "TEMPORAL_NAMESPACE": "no-such-namespace"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    lines = err.decode().strip().splitlines()
    assert process.returncode == 1, (out, err)
    assert lines[-1].startswith("pricewatch: Temporal: ") and "no-such-namespace" in lines[-1]
    assert "waiting for" not in err.decode()


async def test_the_python_client_drives_a_target_like_the_cli(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, temporal_address: str
) -> None:
    """`client.pricewatch.Pricewatch` is the CLI's only way in, and any program's."""
    page_server.set("/client", "<p>EUR 1</p>")
    settings = Settings(
        database_url=env["PRICEWATCH_DATABASE_URL"], task_queue=env["PRICEWATCH_TASK_QUEUE"],
        min_interval=timedelta(seconds=2), allow_networks="127.0.0.1/32",
    )  # fmt: skip
    temporal = await Client.connect(temporal_address, data_converter=DATA_CONVERTER)
    entry = Entry(id="e2e-client", url=page_server.url("/client"), every="2s")
    async with worker_process(env), Pricewatch(settings, temporal) as client:

        async def put(entry: Entry) -> list[Action]:
            return [step.action for step in await plans.put(client, entry)]

        assert await put(entry) == [Action.ADD]
        assert await put(entry) == [Action.UNCHANGED]  # seen at once: not a second start
        slower = entry.model_copy(update={"every": timedelta(seconds=3)})
        assert await put(slower) == [Action.RECONFIGURE]
        assert await put(slower.model_copy(update={"paused": True})) == [Action.PAUSE]
        assert await put(slower) == [Action.RESUME]
        with pytest.raises(ManifestError, match="below the minimum"):
            await put(entry.model_copy(update={"every": timedelta(seconds=1)}))
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE target_id = 'e2e-client'")
        assert (await client.status("e2e-client")).config == slower.config()
        manual = await client.check_now("e2e-client")
        assert manual.work_id.startswith("e2e-client:manual:")
        assert not (await client.status_view("e2e-client")).status.paused  # kept a second
        await client.pause("e2e-client")
        assert (await client.status("e2e-client")).paused
        assert (await client.status_view("e2e-client")).status.paused  # read anew at once
        await client.resume("e2e-client")
        history = await client.history("e2e-client", limit=50)
        assert history and all(r.work_id.startswith("e2e-client:") for r in history)
        await client.remove("e2e-client")
        with pytest.raises(Unknown, match=r"'e2e-client' \(its workflow is no longer running\)"):
            await client.status("e2e-client")
        with pytest.raises(Unknown, match=r"^unknown target 'never-added'$"):
            await client.status("never-added")


async def test_killed_worker_resumes_on_the_grid_without_a_burst(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer
) -> None:
    """SIGKILL the only worker for several intervals: the late slot is checked once,
    then the grid continues after now; missed slots are skipped, none recorded twice."""
    page_server.set("/outage", "<p>steady</p>")
    async with worker_process(env) as worker:
        code, _, err = await cli(
            env, "add", "e2e-outage", page_server.url("/outage"), "--every", f"{INTERVAL_SECONDS}s"
        )
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) - 1 FROM source_checks")
        worker.kill()
        await worker.wait()
    # The scenario, not a wait: slots pass with no worker (the assertions need one skipped
    # row, not an exact count).
    await asyncio.sleep(4 * INTERVAL_SECONDS)
    async with worker_process(env):
        back_at = await pool.fetchval("SELECT now()")
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE checked_at > $1", back_at)
        # The grid goes on after now: two slots later than the restart checked.
        await wait_for(
            pool,
            "SELECT count(*) - 1 FROM source_checks WHERE scheduled_for > $1"
            " AND status <> 'skipped'",
            back_at,
        )
        records = await pool.fetch("SELECT * FROM source_checks ORDER BY scheduled_for")
        assert (await cli(env, "remove", "e2e-outage"))[0] == 0
    slots = [r["scheduled_for"] for r in records]
    interval = timedelta(seconds=INTERVAL_SECONDS)
    assert len(set(slots)) == len(slots), "a slot was recorded twice"
    assert all((slot - slots[0]) % interval == timedelta(0) for slot in slots), "grid shifted"
    late = [
        r
        for r in records
        if r["checked_at"] > back_at and r["scheduled_for"] < back_at and r["status"] != "skipped"
    ]
    assert len(late) <= 1, f"missed slots were replayed as a burst: {late}"
    grid_points = (slots[-1] - slots[0]) // interval + 1
    assert len(slots) == grid_points, "every due slot has a row"
    assert any(r["status"] == "skipped" for r in records), "the outage's slots are skipped rows"


async def test_failures_are_classified_dead_lettered_listed_and_retried(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, temporal_address: str
) -> None:
    """503 (Retry-After: 1) then 200 is one row with two attempts; a 404 slot fails after
    one attempt, shows in `failures`, flags the target unhealthy, and `retry` completes it."""
    page_server.queue("/flaky", (503, "busy"), headers={"Retry-After": "1"})
    page_server.set("/flaky", "<p>EUR 9</p>")
    page_server.set("/gone", "nope", status=404)
    # A start in the past: one check right away, the next one tomorrow.
    every = ["--every", "24h", "--start-at", "2020-01-01T00:00:00Z"]
    async with worker_process(env):
        assert (await cli(env, "add", "e2e-flaky", page_server.url("/flaky"), *every))[0] == 0
        code, _, err = await cli(
            env, "add", "e2e-gone", page_server.url("/gone"), *every, "--unhealthy-after", "1"
        )
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE status = 'unchanged'")
        await wait_for(pool, "SELECT count(*) FROM monitor_targets WHERE failure_streak > 0")

        flaky = await pool.fetchrow("SELECT * FROM source_checks WHERE target_id = 'e2e-flaky'")
        assert flaky is not None
        assert (flaky["status"], flaky["attempt_count"]) == ("unchanged", 2)
        gone = await pool.fetchrow("SELECT * FROM source_checks WHERE target_id = 'e2e-gone'")
        assert gone is not None
        assert (gone["status"], gone["attempt_count"]) == ("failed", 1)
        assert "404" in gone["error_message"]
        assert page_server.hits["/gone"] == 1, "a permanent error must not be retried"

        code, out, _ = await cli(env, "failures")
        assert code == 0 and gone["work_id"] in out and "404" in out
        code, out, _ = await cli(env, "list")
        assert "unhealthy" in out.split("e2e-gone")[1].splitlines()[0]
        client = await Client.connect(temporal_address, data_converter=DATA_CONVERTER)

        async def flagged() -> list[str]:
            return [w.id async for w in client.list_workflows("PricewatchUnhealthy = true")]

        found = await eventually(flagged, within=30, every=0.5, what="an unhealthy workflow")
        assert found == [workflow_id("e2e-gone")]

        page_server.set("/gone", "back again")
        code, out, err = await cli(env, "retry", gone["work_id"])
        assert code == 0, err
        assert "unchanged" in out and "attempts=2" in out
        code, out, _ = await cli(env, "retry", gone["work_id"])
        assert code == 0 and page_server.hits["/gone"] == 2, "a good slot is not fetched again"
        code, _, err = await cli(env, "retry", "e2e-gone:1999-01-01T00:00:00Z")
        assert code == 2 and "unknown work id" in err
        for target in ("e2e-flaky", "e2e-gone"):
            assert (await cli(env, "remove", target))[0] == 0


async def test_a_slot_in_backoff_reads_retrying_until_it_gives_up(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer
) -> None:
    """While the slot waits for its next attempt, every CLI view says `retrying` (attempts,
    last error, when it tries again) and `failed` nowhere; after the last attempt it is
    `failed`, a dead letter in `failures`."""
    page_server.queue("/busy", (503, "busy"), (503, "busy"), headers={"Retry-After": "25"})
    every = ["--every", "24h", "--start-at", "2020-01-01T00:00:00Z", "--max-attempts", "2"]
    async with worker_process(env):
        code, _, err = await cli(env, "add", "e2e-busy", page_server.url("/busy"), *every)
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE status = 'retrying'")
        views = {
            "history": ("history", "e2e-busy"),
            "status": ("status", "e2e-busy"),
            "list": ("list",),
            "failures": ("failures",),
        }
        # All four at once, well inside the 25 s backoff even on a loaded machine.
        answers = await asyncio.gather(*(cli(env, *args) for args in views.values()))
        shown = {name: answer[1] for name, answer in zip(views, answers, strict=True)}
        for name, out in shown.items():
            assert "retrying" in out and "failed" not in out, f"{name}: {out}"
        row = next(line for line in shown["history"].splitlines() if "retrying" in line)
        assert "503" in row and row.split()[4] != "-", "the row says when it tries again"
        assert "now:" in shown["status"] and "attempts=1" in shown["status"]

        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE status = 'failed'")
        code, out, _ = await cli(env, "failures")
        row = next(line for line in out.splitlines() if line.startswith("e2e-busy:"))
        assert code == 0 and row.split()[1:3] == ["failed", "2"], row
        assert "retrying" not in out and "next attempt" not in out
        code, out, _ = await cli(env, "history", "e2e-busy")
        assert " failed " in out and "retrying" not in out
        assert (await cli(env, "remove", "e2e-busy"))[0] == 0


async def test_remove_during_a_backoff_says_what_it_stops_and_does_not_wait(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer
) -> None:
    """A check backing off for 30 s does not hold a removal up: `remove` says which check it
    stops and returns within seconds; the page is not asked again."""
    page_server.set("/down", "down", status=503)
    every = ["--every", "24h", "--start-at", "2020-01-01T00:00:00Z"]
    async with worker_process(env):
        code, _, err = await cli(env, "add", "e2e-down", page_server.url("/down"), *every)
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE status = 'retrying'")
        code, out, _ = await cli(env, "status", "e2e-down")
        assert "checking:" in out
        started = time.monotonic()
        code, out, err = await cli(env, "remove", "e2e-down")
        elapsed = time.monotonic() - started
        assert code == 0, err
        assert "stopping the check of e2e-down:" in out and "removed e2e-down" in out
        assert elapsed < 15, f"remove took {elapsed:.0f} s: it waited out the backoff"
    assert page_server.hits["/down"] == 1
    assert await pool.fetchval("SELECT count(*) FROM monitor_targets") == 0


async def test_a_receiver_that_keeps_failing_does_not_hold_the_schedule_up(
    env: dict[str, str],
    pool: asyncpg.Pool,
    page_server: PageServer,
    webhook_receiver: WebhookReceiver,
) -> None:
    """Every check a change, every notice answered 503 (retried for minutes): the run is due
    to continue as new after 5 checks, and instead of waiting for its notices it goes on
    checking every slot."""
    page_server.queue("/flap", *[(200, f"<p>EUR {n}</p>") for n in range(60)])
    webhook_receiver.answers = [503] * 1000
    async with worker_process(env):
        code, _, err = await cli(
            env, "add", "e2e-flap", page_server.url("/flap"), "--every", "1s",
            "--webhook", webhook_receiver.url,
        )  # fmt: skip
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) - 14 FROM source_checks WHERE status = 'changed'")
        rows = await pool.fetch(
            "SELECT status FROM source_checks WHERE target_id = 'e2e-flap' ORDER BY scheduled_for"
        )
        pending = await pool.fetchval("SELECT count(*) FROM deliveries WHERE status <> 'sent'")
        assert (await cli(env, "remove", "e2e-flap"))[0] == 0
    assert [r["status"] for r in rows].count("skipped") <= 1, [r["status"] for r in rows]
    assert pending > 0, "the notices were still being retried while the checks went on"


async def test_a_change_reaches_each_channel_once_through_real_processes(
    env: dict[str, str],
    pool: asyncpg.Pool,
    page_server: PageServer,
    webhook_receiver: WebhookReceiver,
    smtp_server: tuple[MailSink, SmtpSettings],
) -> None:
    sink, smtp = smtp_server
    env = {**env, "PRICEWATCH_SMTP_HOST": smtp.host, "PRICEWATCH_SMTP_PORT": str(smtp.port)}
    page_server.set("/notify", "<p>EUR 4</p>")
    async with worker_process(env):
        code, _, err = await cli(
            env, "add", "e2e-notify", page_server.url("/notify"), "--every", f"{INTERVAL_SECONDS}s",
            "--webhook", webhook_receiver.url, "--email", "ops@example.com",
        )  # fmt: skip
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) - 1 FROM source_checks")
        page_server.set("/notify", "<p>EUR 5</p>")
        await wait_for(pool, "SELECT count(*) - 1 FROM deliveries WHERE status = 'sent'")
        await quiet_slots_checked(pool, "e2e-notify")  # later unchanged slots tell nobody

        code, out, _ = await cli(env, "channels", "e2e-notify")
        secret = await pool.fetchval("SELECT secret FROM channels WHERE kind = 'webhook'")
        assert code == 0 and webhook_receiver.url in out and "ops@example.com" in out
        assert secret not in out, "`channels` masks secrets"
        code, out, _ = await cli(env, "channels", "e2e-notify", "--reveal")
        assert secret in out
        code, out, _ = await cli(env, "deliveries", "e2e-notify")
        assert code == 0 and out.count(" sent ") == 2
        await every_json_output_parses(env, "e2e-notify", secret)
        assert (await cli(env, "remove", "e2e-notify"))[0] == 0
    assert len(webhook_receiver.received) == 1  # its signature was verified on arrival
    assert len(sink.messages) == 1
    views.PAYLOADS["notice"].validate_python(webhook_receiver.received[0][1])


def plan_table(basic: str, pro: str) -> str:
    return (
        f"<table><tr class=plan><th>Basic</th><td>EUR {basic}</td></tr>"
        f"<tr class=plan><th>Pro</th><td>EUR {pro}</td></tr></table>"
    )


async def test_each_price_move_a_rule_matches_is_one_signed_price_notice(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer,
    webhook_receiver: WebhookReceiver, temporal_address: str, tmp_path: Path,
) -> None:  # fmt: skip
    """Three moves; the one under --min-change-percent is recorded but told to nobody."""
    page_server.set("/plans", plan_table("10.00", "20.00"))
    changes = "SELECT count(*) - $1 FROM source_checks WHERE status = 'changed'"
    async with worker_process(env):
        code, _, err = await cli(
            env, "add", "e2e-plans", page_server.url("/plans"), "--every", f"{INTERVAL_SECONDS}s",
            "--price-selector", "tr.plan", "--price-name", "th", "--min-change-percent", "5",
            "--webhook", webhook_receiver.url,
        )  # fmt: skip
        assert code == 0, err
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE prices IS NOT NULL")
        for moved, (basic, pro) in enumerate(
            [("10.00", "21.00"), ("10.00", "21.10"), ("9.00", "21.10")]
        ):
            page_server.set("/plans", plan_table(basic, pro))
            await wait_for(pool, changes, moved)
        await wait_for(pool, "SELECT count(*) - 1 FROM deliveries WHERE status = 'sent'")
        await quiet_slots_checked(pool, "e2e-plans")  # nothing more is told
        code, out, err = await cli(env, "prices", "e2e-plans", "--plot", str(tmp_path / "p.png"))
        assert code == 0, err
        assert (
            "Basic" in out and "Pro" in out and "EUR 21.10" in out.replace("21.10 EUR", "EUR 21.10")
        )
        assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")
        code, out, _ = await cli(env, "prices", "e2e-plans", "--json")
        rows: list[views.PricesRow] = views.OUTPUTS["prices"].validate_json(out)  # type: ignore[assignment]
        assert [str(p.amount) for p in rows[-1].prices] == ["9.00", "21.10"]
        code, out, _ = await cli(env, "list")
        assert "Basic 9.00 EUR" in out and "(+1 more)" in out
        code, out, _ = await cli(env, "status", "e2e-plans")
        assert "prices:     selector tr.plan (names: th), tell price-change by 5% or more" in out
        history = await Client.connect(temporal_address, data_converter=DATA_CONVERTER)
        recorded = await history.get_workflow_handle(workflow_id("e2e-plans")).fetch_history()
        assert (await cli(env, "remove", "e2e-plans"))[0] == 0
    told: list[dict[str, Any]] = [payload for _, payload in webhook_receiver.received]
    assert [p["type"] for p in told] == ["price.changed", "price.changed"]
    assert [[(m["name"], m["old"], m["new"], m["rules"]) for m in p["prices"]] for p in told] == [
        [("Pro", "20.00", "21.00", ["price-change", "change >= 5%"])],
        [("Basic", "10.00", "9.00", ["price-change", "change >= 5%"])],
    ]
    await Replayer(workflows=[MonitorTarget], data_converter=DATA_CONVERTER).replay_workflow(
        recorded
    )


async def every_json_output_parses(env: dict[str, str], target_id: str, secret: str) -> None:
    """Each `--json` output is valid JSON of its documented shape (docs/schemas/)."""
    outputs: dict[str, Any] = {}
    for command in views.OUTPUTS.keys() - {"prices", "try", "health"}:  # (each has its own test)
        args = [command] if command in ("list", "config", "failures") else [command, target_id]
        if command == "history":  # a loaded machine's slow CLI can pass 20 slots since the change
            args += ["--limit", "10000"]
        code, out, err = await cli(env, *args, "--json")
        assert code == 0, (command, err)
        outputs[command] = views.OUTPUTS[command].validate_json(out)
    assert [t.id for t in outputs["list"]] == [target_id]
    assert outputs["status"].status.config.target_id == target_id
    assert outputs["status"].history_url.endswith(f"/workflows/pricewatch-{target_id}")
    assert any(c.status.value == "changed" for c in outputs["history"])
    assert outputs["failures"] == []
    assert {c.kind for c in outputs["channels"]} == {"webhook", "email"}
    assert secret not in json.dumps([c.model_dump() for c in outputs["channels"]])
    assert [d.status for d in outputs["deliveries"]] == ["sent", "sent"]
    assert "EUR 4" in outputs["diff"].diff and "EUR 5" in outputs["diff"].diff
    assert outputs["config"].settings["task_queue"] == env["PRICEWATCH_TASK_QUEUE"]


async def http_get(address: str, path: str) -> tuple[int, str]:
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        response = await client.get(f"http://{address}{path}")
    return response.status_code, response.text


@asynccontextmanager
async def observed_worker(
    env: dict[str, str], outputs: list[bytes]
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str, str]]:
    """A worker serving metrics and health on ports free when picked: another process can
    take one before the worker binds it (a fresh clone's run under load lost this test so),
    and then it tries two more."""
    for attempt in range(3):
        metrics, health = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        ports = {"PRICEWATCH_METRICS_ADDRESS": metrics, "PRICEWATCH_HEALTH_ADDRESS": health}
        stack = AsyncExitStack()
        try:
            process = await stack.enter_async_context(worker_process({**env, **ports}, outputs))
        except AssertionError as err:
            await stack.aclose()
            if "address already in use" in str(err) and attempt < 2:
                continue
            raise
        async with stack:
            yield process, metrics, health
        return


async def test_three_workers_share_the_work_and_each_slot_is_recorded_once(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, tmp_path: Path
) -> None:
    """Several workers on one server and one Postgres: the work spreads, every slot is
    one row; the first worker also serves metrics and health, and SIGTERM exits 0."""
    outputs: list[bytes] = []
    async with (
        observed_worker(env, outputs) as (first, metrics, health),
        worker_process(env, outputs),
        worker_process(env, outputs),
    ):
        for n in range(6):
            page_server.set(f"/shared-{n}", f"<p>{n}</p>")
            code, _, err = await cli(
                env, "add", f"e2e-shared-{n}", page_server.url(f"/shared-{n}"),
                "--every", f"{INTERVAL_SECONDS}s",
            )  # fmt: skip
            assert code == 0, err
        await wait_for(pool, "SELECT count(*) - 40 FROM source_checks")
        assert await http_get(health, "/livez") == (200, "OK")
        assert await http_get(health, "/readyz") == (200, "OK")
        status, exposition = await http_get(metrics, "/metrics")
        assert status == 200
        assert "pricewatch_checks" in exposition and "temporal_" in exposition
        assert 'pricewatch_gc_pause_seconds_count{generation="0"' in exposition
        # Bounded labels only: the per-target story is the ledger's and the UI's.
        checks = [line for line in exposition.splitlines() if line.startswith("pricewatch_checks")]
        assert checks and not any("target_id" in line for line in checks)
        assert any('kind="scheduled"' in line and 'outcome="recorded"' in line for line in checks)
        slots = await pool.fetch("SELECT target_id, scheduled_for FROM source_checks")
        await remove_all(env, tmp_path, 6)
    assert first.returncode == 0, "SIGTERM must end the worker cleanly"
    assert len(slots) >= 40
    assert len({(r["target_id"], r["scheduled_for"]) for r in slots}) == len(slots)
    recorded = [output.count(b'"logger": "pricewatch.checks"') for output in outputs]
    assert len(recorded) == 3 and all(n > 0 for n in recorded), recorded


async def test_retention_runs_from_the_workers_schedule_and_the_cli(
    env: dict[str, str], pool: asyncpg.Pool, temporal_address: str
) -> None:
    """The worker creates the hourly Schedule on its task queue; a triggered action prunes
    through the `PruneChecks` workflow; `prune --dry-run` said beforehand what would go."""
    await pool.execute(
        "INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot) "
        "VALUES ('old-pricing', 'https://example.com/', 3600, now(), now() + interval '1 hour')"
    )
    await pool.execute(
        "INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status, "
        "result_hash) SELECT 'old-pricing:' || n, 'old-pricing', now() - make_interval(days => n),"
        " now() - make_interval(days => n), 'unchanged', 'h' FROM generate_series(1, 120) n"
    )
    code, out, err = await cli(env, "prune", "--dry-run")
    assert code == 0, err
    assert "would delete 31 check rows" in out and "unchanged" in out
    assert await pool.fetchval("SELECT count(*) FROM source_checks") == 120

    client = await Client.connect(temporal_address, data_converter=DATA_CONVERTER)
    async with worker_process(env):
        schedule = client.get_schedule_handle(RETENTION_SCHEDULE_ID)
        action = (await schedule.describe()).schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        assert action.task_queue == env["PRICEWATCH_TASK_QUEUE"]
        await schedule.trigger()
        await wait_for(pool, "SELECT (count(*) = 89)::int FROM source_checks")
        runs = [
            w async for w in client.list_workflows(f"WorkflowType = '{RETENTION_WORKFLOW_TYPE}'")
        ]
        assert runs
    code, out, err = await cli(env, "prune")
    assert code == 0, err
    assert out.startswith("deleted 0 check rows")


async def test_apply_a_targets_file_plan_prune_dry_run_and_export_round_trip(
    env: dict[str, str], pool: asyncpg.Pool, page_server: PageServer, tmp_path: Path
) -> None:
    """`apply` validates every entry before it starts anything, applies a plan, and is then
    idempotent; a changed file reconfigures, pauses and (with --prune) removes, its dry run
    changes nothing; `export` writes a file that applies as a no-op."""
    for name in ("a", "b", "c"):
        page_server.set(f"/{name}", f"<p>{name}</p>")
    url = page_server.url
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n"
        f"  - {{id: apply-a, url: '{url('/a')}', every: 1h}}\n"
        f"  - {{id: apply-b, url: '{url('/b')}', every: 1h, paused: true}}\n"
        f"  - {{id: apply-c, url: '{url('/c')}', every: 1h, emails: [ops@example.com]}}\n"
        "  - {id: apply-d, url: 'http://10.0.0.1/private', every: 1h}\n"
    )
    client = await Client.connect(env["TEMPORAL_ADDRESS"], data_converter=DATA_CONVERTER)

    async def running() -> set[str]:
        query = f"WorkflowType = 'MonitorTarget' AND TaskQueue = '{env['PRICEWATCH_TASK_QUEUE']}'"
        return {w.id async for w in client.list_workflows(query) if w.status == 1}

    code, out, err = await cli(env, "apply", str(targets))
    assert code == 2 and f"{targets}:5: apply-d:" in err and "10.0.0.1" in err
    assert await running() == set(), "a bad entry changes nothing"

    targets.write_text("\n".join(targets.read_text().splitlines()[:-1]) + "\n")
    async with worker_process(env):
        code, out, err = await cli(env, "apply", str(targets))
        assert code == 0, err
        assert "+ add apply-a" in out and "plan: 3 to add, 0 unchanged" in out
        await wait_for(pool, "SELECT (count(*) = 3)::int FROM monitor_targets")
        code, out, _ = await cli(env, "apply", str(targets))
        assert out.strip() == "plan: nothing to do (3 unchanged)"
        code, out, _ = await cli(env, "status", "apply-b")
        assert "state:      paused" in out

        targets.write_text(
            "targets:\n"
            f"  - {{id: apply-a, url: '{url('/a')}', every: 2h, paused: true}}\n"
            f"  - {{id: apply-b, url: '{url('/b')}', every: 1h}}\n"
        )
        code, out, _ = await cli(env, "apply", str(targets), "--prune", "--dry-run")
        assert code == 0
        assert "~ reconfigure apply-a (every: 1h -> 2h)" in out
        assert "= pause apply-a" in out and "> resume apply-b" in out and "- remove apply-c" in out
        assert "plan: 1 to reconfigure, 1 to pause, 1 to resume, 1 to remove, 0 unchanged" in out
        assert {f"pricewatch-apply-{n}" for n in "abc"} == await running(), "a dry run"
        code, out, err = await cli(env, "apply", str(targets), "--prune")
        assert code == 0, err
        assert "applied 4 changes" in out
        kept = {"pricewatch-apply-a", "pricewatch-apply-b"}

        async def pruned() -> bool:  # visibility lists a run a moment after it changes
            return await running() == kept

        await eventually(pruned, within=10, what="apply-c gone, apply-a and apply-b running")
        await wait_for(
            pool, "SELECT count(*) FROM monitor_targets WHERE id = 'apply-a' AND NOT enabled"
        )
        code, out, _ = await cli(env, "apply", str(targets), "--prune")
        assert out.strip() == "plan: nothing to do (2 unchanged)"

        code, exported, _ = await cli(env, "export")
        assert code == 0 and "every: 2h" in exported and "paused: true" in exported
        again = tmp_path / "exported.yaml"
        again.write_text(exported)
        code, out, _ = await cli(env, "apply", str(again), "--prune")
        assert out.strip() == "plan: nothing to do (2 unchanged)"
        for target_id in ("apply-a", "apply-b"):
            assert (await cli(env, "remove", target_id))[0] == 0
