"""A dependency outage reads as an outage: `pricewatch dev` prints one line when Postgres
becomes unreachable and one when it is back (no tracebacks, no raw terminal escapes), and a
check refused by a dead attempt's lease is tried again when that lease expires, not after
the generic backoff (docs/failures.md, "What the console says during an outage")."""

import asyncio
import json
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
from aiohttp import web
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities import store
from activities.checks import LEASE_RETRY_MARGIN, CheckActivities
from activities.outages import Dependency
from pricewatch.models import CheckInput, RecordFailureInput, TargetConfig
from pricewatch.policy import LEASE_HELD
from tests.chaos.proxy import Proxy, postgres_upstream, through
from tests.chaos.stack import serve
from tests.conftest import PageServer
from tests.helpers import PRICEWATCH, attempt, local_attempt, python_output
from workers.embedded import free_port
from workers.observability import JsonFormatter
from workflows.calls import first_retry_delay

TARGETS = 8
HOLE_SECONDS = 25
# Claims that landed as the hole opened: their attempts are dead, their leases stay live.
DEAD_LEASES = 3
# How long after the dead lease's expiry its target may resume: the retry's margin, one
# claim, one fetch, one commit, on a busy two-core machine.
RESUME_WITHIN = timedelta(seconds=8)


@asynccontextmanager
async def dev_console(env: dict[str, str], console: list[str]) -> AsyncIterator[None]:
    """`pricewatch dev` (no demo) until the block ends, then Ctrl-C; its whole output, read
    as it comes (a pipe: not a terminal), goes to `console`."""
    ports = [f"--{name}-port={free_port()}" for name in ("temporal", "ui", "demo", "dashboard")]
    process = await asyncio.create_subprocess_exec(
        PRICEWATCH, "dev", *ports, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    stdout = process.stdout

    async def read() -> None:
        while line := await stdout.readline():
            console.append(line.decode(errors="replace").rstrip("\n"))

    reader = asyncio.create_task(read())
    try:
        async with asyncio.timeout(90):
            while not any("worker:    running" in line for line in console):
                assert not reader.done(), "pricewatch dev exited early:\n" + "\n".join(console)
                await asyncio.sleep(0.2)
        yield
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        try:
            async with asyncio.timeout(60):
                await process.wait()
                await reader
        except TimeoutError:
            process.kill()
            await process.wait()
            raise
    assert process.returncode == 0, "\n".join(console[-40:])


async def add_targets(env: dict[str, str], page_url: str) -> None:
    async def add(n: int) -> None:
        cli = await asyncio.create_subprocess_exec(
            PRICEWATCH, "add", f"out-{n}", page_url, "--every", "2s", env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await cli.communicate()
        assert cli.returncode == 0, err

    await asyncio.gather(*(add(n) for n in range(TARGETS)))


async def until(conn: asyncpg.Connection, query: str, seconds: float, *args: object) -> None:
    for _ in range(int(seconds * 2)):
        if await conn.fetchval(query, *args):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"not within {seconds} s: {query}")


@pytest.mark.long
@pytest.mark.e2e
async def test_a_postgres_outage_under_pricewatch_dev(database_url: str, tmp_path: Path) -> None:
    """20 targets in the issue, 8 here; the hole 25 s instead of 40 (the checks have failed
    many times over by then). Three claims landed as the hole opened: their leases are
    planted directly (the worker cannot reach Postgres to take them), as a claim whose
    answer the hole swallowed leaves them."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<p>EUR 4.49</p>", content_type="text/html")

    proxy = Proxy("postgres", postgres_upstream(database_url))
    await proxy.start()
    direct = await asyncpg.connect(database_url)
    console: list[str] = []
    env = {**os.environ, "PRICEWATCH_DATA_DIR": str(tmp_path),
           "PRICEWATCH_DATABASE_URL": through(database_url, proxy),
           "PRICEWATCH_MIN_INTERVAL": "1s",
           "PRICEWATCH_ALLOW_NETWORKS": "127.0.0.1/32"}  # fmt: skip
    hole: asyncio.Task[int] | None = None
    try:
        async with serve([web.get("/page", page)]) as base, dev_console(env, console):
            env["TEMPORAL_ADDRESS"] = next(
                line.split()[1] for line in console if line.startswith("temporal:")
            )
            await add_targets(env, f"{base}/page")
            await until(
                direct,
                "SELECT count(DISTINCT target_id) = $1 FROM source_checks "
                "WHERE status IN ('unchanged', 'changed')",
                60, TARGETS,
            )  # fmt: skip
            before = len(console)
            hole = asyncio.create_task(proxy.fault("blackhole", HOLE_SECONDS))
            await asyncio.sleep(0.5)
            leased = await direct.fetch(
                "UPDATE monitor_targets SET lease_token = 'dead-attempt', "
                "lease_expires_at = now() + interval '45 s' "
                "WHERE id IN (SELECT id FROM monitor_targets ORDER BY id LIMIT $1) "
                "RETURNING id, lease_expires_at",
                DEAD_LEASES,
            )
            await hole
            healed = await direct.fetchval("SELECT now()")
            # Every target resumes; the dead leases' targets within RESUME_WITHIN of expiry.
            expiry = {row["id"]: row["lease_expires_at"] for row in leased}
            latest = max(expiry.values()) + RESUME_WITHIN
            wait = (latest - healed).total_seconds() + 2
            resumed: dict[str, datetime] = {}
            for _ in range(int(wait * 2)):
                rows = await direct.fetch(
                    "SELECT target_id, min(checked_at) FROM source_checks "
                    "WHERE status IN ('unchanged', 'changed') AND checked_at > $1 "
                    "GROUP BY target_id",
                    healed,
                )
                resumed = {row[0]: row[1] for row in rows}
                if len(resumed) == TARGETS:
                    break
                await asyncio.sleep(0.5)
            outage = console[before:]
    finally:
        if hole is not None and not hole.done():
            hole.cancel()
        await direct.close()
        await proxy.stop()
    text = "\n".join(outage)
    lag = {
        target: (resumed[target] - expires).total_seconds() if target in resumed else None
        for target, expires in expiry.items()
    }
    print(f"the console during the outage:\n{text}\nresumed after the leases' expiry: {lag}")
    assert len(resumed) == TARGETS, (sorted(resumed), lag, text[-3000:])
    for target, expires in expiry.items():
        assert resumed[target] <= expires + RESUME_WITHIN, (target, lag)
    assert "Traceback" not in text, text[-4000:]
    assert "\x1b[" not in text, "raw terminal escapes on a pipe"
    assert "Completing activity as failed" not in text, text[-3000:]
    assert "TMPRL1104" not in text, text[-3000:]
    down = [line for line in outage if re.search(r"\bPostgres unreachable \(", line)]
    back = [line for line in outage if re.search(r"\bPostgres is back after \d+ s\b", line)]
    assert len(down) == 1 and len(back) == 1, text[-3000:]
    assert outage.index(down[0]) < outage.index(back[0])
    away = int(re.findall(r"back after (\d+) s", back[0])[0])
    assert HOLE_SECONDS - 5 <= away <= HOLE_SECONDS + 30, back
    # Besides the checks' own lines (and their refusals), nothing but the two lines.
    check_line = re.compile(r"^\d\d:\d\d:\d\d out-\d+ .+ \d+ ms$")
    others = [line for line in outage if not check_line.match(line)]
    assert others == [down[0], back[0]] or others == [down[0], back[0], "stopping..."], others


def test_an_outage_is_told_once_and_its_end_with_how_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dependency = Dependency("Postgres", "127.0.0.1:5433", "checks wait for it")
    before = time.monotonic()
    with caplog.at_level(logging.INFO, logger="pricewatch.outages"):
        dependency.succeeded(before)  # nothing to tell
        dependency.failed(TimeoutError())
        dependency.failed(ConnectionResetError("reset by peer"))
        dependency.succeeded(before)  # began before the outage: says nothing of its end
        assert dependency.down
        dependency.succeeded(time.monotonic())
        dependency.succeeded(time.monotonic())
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "Postgres unreachable (127.0.0.1:5433: timed out); checks wait for it",
        "Postgres is back after 0 s",
    ], messages
    down, back = (json.loads(JsonFormatter().format(record)) for record in caplog.records)
    assert down["level"] == "WARNING" and down["dependency"] == "Postgres", down
    assert down["state"] == "unreachable" and down["problem"] == "127.0.0.1:5433: timed out"
    assert back["state"] == "back" and back["outage_seconds"] == 0, back


# A worker on its own Temporal dev server, through a proxy that resets every connection for
# a while (the frontend refusing): on the dev console, the pollers' errors are one line.
TEMPORAL_OUTAGE = """
import asyncio, os, sys, tempfile, time
from pathlib import Path
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker
from tests.chaos.proxy import Proxy
from workers.embedded import free_port, start_temporal_dev_server, stop_process
from workers.observability import configure_dev_console, core_runtime, watching_temporal

@activity.defn
async def nothing() -> None: ...

async def main() -> None:
    configure_dev_console(verbose=False)
    port = free_port()
    server = start_temporal_dev_server(Path(sys.argv[1]) / "t.db", port=port, ui_port=None)
    proxy = Proxy("temporal", ("127.0.0.1", port))
    try:
        await proxy.start()
        runtime = core_runtime()
        for _ in range(120):
            try:
                client = await Client.connect(proxy.address, runtime=runtime)
                break
            except RuntimeError:
                await asyncio.sleep(0.5)
        async with Worker(client, task_queue="q", activities=[nothing]), \
                watching_temporal(client):
            await asyncio.sleep(2)
            print("reset", flush=True)
            await proxy.fault("reset", float(sys.argv[2]))
            print("healed", flush=True)
            await asyncio.sleep(6)
    finally:
        await proxy.stop()
        stop_process(server)

asyncio.run(main())
sys.stdout.flush()
os._exit(0)  # temporalio can abort a finalising interpreter (sdk-python#300)
"""


async def test_a_temporal_outage_is_one_line_on_the_dev_console(tmp_path: Path) -> None:
    refused = 15
    text = await python_output("-c", TEMPORAL_OUTAGE, str(tmp_path), str(refused), within=120)
    lines = text.splitlines()
    outage = lines[lines.index("reset") + 1 :]
    down = [
        line for line in outage if re.search(r"\bTemporal unreachable \(.+\); the worker", line)
    ]
    back = [line for line in outage if re.search(r"\bTemporal is back after \d+ s$", line)]
    assert len(down) == 1 and len(back) == 1, text[-3000:]
    others = [line for line in outage if line not in (*down, *back, "healed")]
    assert not others, others  # no poll errors, no shutdown chatter
    assert "\x1b[" not in text, "raw terminal escapes on a pipe"


LEFT = timedelta(seconds=20)  # what the dead attempt's lease has left


@pytest.fixture
async def leased(pool: asyncpg.Pool, page_server: PageServer) -> CheckInput:
    """A target due now whose lease a dead attempt holds for LEFT more."""
    page_server.set("/p", "price 10")
    config = TargetConfig(target_id="acme", url=page_server.url("/p"), interval_seconds=3600)
    now = datetime.now(UTC)
    await store.sync_target(pool, config, next_slot=now, enabled=True)
    await pool.execute(
        "UPDATE monitor_targets SET lease_token = 'dead', lease_expires_at = now() + $1",
        LEFT,
    )
    return CheckInput(target_id="acme", url=config.url, slot=now)


def retried_within(err: ApplicationError) -> timedelta:
    assert err.type == LEASE_HELD, err
    assert err.category is ApplicationErrorCategory.BENIGN
    assert err.next_retry_delay is not None, "the generic backoff, not the lease's expiry"
    return err.next_retry_delay


async def test_a_claim_refused_by_a_live_lease_comes_back_when_it_expires(
    pool: asyncpg.Pool, http: httpx.AsyncClient, leased: CheckInput
) -> None:
    """The claim reads how long the lease has left: the next attempt comes just after it
    (normal attempts: Temporal honours `next_retry_delay`; the local first attempt: the
    workflow's backoff reads it), not 30-60 s of generic backoff later."""
    activities = CheckActivities(pool, http)
    for env in (local_attempt(), attempt(2)):
        with pytest.raises(ApplicationError) as refused:
            await env.run(activities.check_slot, leased)
        delay = retried_within(refused.value)
        assert LEFT - timedelta(seconds=2) < delay <= LEFT + LEASE_RETRY_MARGIN, delay
        assert first_retry_delay(refused.value) == delay
        assert "its lease ends in 1" in str(refused.value), refused.value  # 19s or 18s


async def test_a_dead_letter_refused_by_a_live_lease_comes_back_when_it_expires(
    pool: asyncpg.Pool, http: httpx.AsyncClient, leased: CheckInput
) -> None:
    activities = CheckActivities(pool, http)
    failure = RecordFailureInput(check=leased, error_message="HTTP 503")
    with pytest.raises(ApplicationError) as refused:
        await attempt(1).run(activities.record_failed_slot, failure)
    delay = retried_within(refused.value)
    assert LEFT - timedelta(seconds=2) < delay <= LEFT + LEASE_RETRY_MARGIN, delay


async def test_a_claim_reads_no_lease_left_when_it_takes_the_lease(
    pool: asyncpg.Pool, leased: CheckInput
) -> None:
    await pool.execute("UPDATE monitor_targets SET lease_expires_at = now()")
    claim = await store.claim(
        pool, target_id="acme", work_id=leased.work_id, execution_id="t",
        lease=timedelta(seconds=45), on_schedule=True, slot=leased.slot,
    )  # fmt: skip
    assert claim.claimed and claim.lease_left is None
