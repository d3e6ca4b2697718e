"""A worker that starts while the Temporal server is frozen (SIGSTOP: it accepts TCP
connections and answers nothing, as a paused VM does) waits for it, one line naming Temporal
and its address, and starts once it is continued; a namespace that does not exist is still
fatal at once (issue 41/48).

The soak saw workers die with "Worker validation failed: Namespace default ... http2 error":
the SDK's own namespace check as the worker starts hit a frozen frontend after every earlier
step had passed. The in-process tests freeze the server exactly there."""

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from tests.chaos.proxy import Proxy
from tests.conftest import PageServer
from tests.helpers import PRICEWATCH, cli, read_until, terminated
from tests.waits import eventually, wait_for
from workers.embedded import free_port, start_temporal_dev_server, stop_process
from workers.worker import polling

FROZEN_FOR = 12.0  # past RPC_TIMEOUT: the worker says it waits
FROZEN_UNTIL = 120.0  # the bound on waiting for the worker to say so
RESET_UNTIL = 120.0  # the bound on the SDK's own retries of its start-up check (about 10 s)


@pytest.fixture(scope="module")
def temporal_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A dev server of this module's own: the tests freeze it."""
    with tempfile.TemporaryDirectory(prefix="pricewatch-temporal-") as tmp:
        port = free_port()
        server = start_temporal_dev_server(Path(tmp) / "temporal.db", port=port, ui_port=None)
        try:
            asyncio.run(answering(f"127.0.0.1:{port}"))
            yield server, f"127.0.0.1:{port}"
        finally:
            os.kill(server.pid, signal.SIGCONT)  # a failed test may have left it stopped
            stop_process(server)


async def answering(address: str) -> None:
    """Until the server's frontend answers: its port opens before it is healthy, and these
    tests' own connects are no worker's, which waits that out ("Frontend is not healthy yet",
    seen on fresh clones of a busy machine)."""

    async def connects() -> bool:
        with contextlib.suppress(RuntimeError):
            await Client.connect(address)
            return True
        return False

    await eventually(connects, within=60, what="the dev server's frontend answering")


@contextlib.contextmanager
def frozen_for(server: subprocess.Popen[bytes], seconds: float) -> Iterator[None]:
    """The server stopped now and continued `seconds` later (or on the way out)."""
    os.kill(server.pid, signal.SIGSTOP)
    thaw = asyncio.get_running_loop().call_later(seconds, os.kill, server.pid, signal.SIGCONT)
    try:
        yield
    finally:
        thaw.cancel()
        os.kill(server.pid, signal.SIGCONT)


@activity.defn
async def nothing() -> None:
    """A worker needs something to run."""


async def started(client: Client, stop: asyncio.Event) -> contextlib.AsyncExitStack:
    """A worker of `client` started as `pricewatch worker` starts one; the stack shuts it down."""
    stack = contextlib.AsyncExitStack()
    queue = f"start-{uuid.uuid4()}"
    worker = await stack.enter_async_context(
        polling(lambda: Worker(client, task_queue=queue, activities=[nothing]), client, stop)
    )
    assert worker.is_running
    return stack


def waited(caplog: pytest.LogCaptureFixture, address: str) -> list[str]:
    """The worker's lines, each asserted to be about waiting for Temporal at `address`."""
    lines = [r.getMessage() for r in caplog.records if r.name == "pricewatch.worker"]
    assert all(line.startswith(f"waiting for Temporal at {address} (") for line in lines), lines
    return lines


async def test_the_sdks_start_up_check_against_a_frozen_server_is_waited_out(
    temporal_server: tuple[subprocess.Popen[bytes], str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Connected, then frozen just before the worker starts: the SDK's check hangs; that is
    said, and the worker runs once the server is continued."""
    server, address = temporal_server
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    client = await Client.connect(address)
    caplog.set_level(logging.WARNING, "pricewatch.worker")
    # Frozen until the worker has said it waits: a busy machine may start the SDK's check
    # later than any fixed span would last.
    with frozen_for(server, FROZEN_UNTIL):
        starting = asyncio.create_task(started(client, asyncio.Event()))

        async def said_it_waits() -> bool:
            return bool(waited(caplog, address))

        await eventually(said_it_waits, within=FROZEN_UNTIL, what="the worker saying it waits")
    stack = await asyncio.wait_for(starting, 90)
    await stack.aclose()


async def test_the_sdks_start_up_check_failing_on_a_reset_connection_is_waited_out(
    temporal_server: tuple[subprocess.Popen[bytes], str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every connection reset while the worker starts: the SDK's check fails (a RuntimeError
    naming no status, fatal to `async with worker`); the same worker starts once it stops."""
    host, _, port = temporal_server[1].rpartition(":")
    frontend = Proxy("temporal", (host, int(port)))
    await frontend.start()
    monkeypatch.setenv("TEMPORAL_ADDRESS", frontend.address)
    caplog.set_level(logging.WARNING, "pricewatch.worker")
    try:
        client = await Client.connect(frontend.address)
        fault = asyncio.create_task(frontend.fault("reset", RESET_UNTIL))
        await asyncio.sleep(0.2)  # the live connection is reset, new ones are refused
        starting = asyncio.create_task(started(client, asyncio.Event()))

        # The reset lasts until the SDK's check has failed and the worker asks on its own
        # ("trying again"): on a busy machine the SDK's retries last longer than any fixed span.
        async def asked_on_its_own() -> bool:
            return any("trying again" in line for line in waited(caplog, frontend.address))

        await eventually(asked_on_its_own, within=RESET_UNTIL, what="the SDK's check failing")
        fault.cancel()
        stack = await asyncio.wait_for(starting, 90)
        await stack.aclose()
    finally:
        await frontend.stop()
    assert any("start-up check failed" in line for line in waited(caplog, frontend.address))


async def test_a_namespace_that_does_not_exist_is_fatal_at_once(
    temporal_server: tuple[subprocess.Popen[bytes], str], caplog: pytest.LogCaptureFixture
) -> None:
    client = await Client.connect(temporal_server[1], namespace="no-such-namespace")
    with pytest.raises(RPCError) as raised:
        await asyncio.wait_for(started(client, asyncio.Event()), 30)
    assert raised.value.status is RPCStatusCode.NOT_FOUND
    assert "waiting for" not in caplog.text


async def test_a_worker_started_while_temporal_is_frozen_starts_and_checks_once_continued(
    temporal_server: tuple[subprocess.Popen[bytes], str],
    database_url: str,
    pool: asyncpg.Pool,
    page_server: PageServer,
) -> None:
    """`pricewatch worker` as a process: one line saying what it waits for, and no exit."""
    server, address = temporal_server
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "PRICEWATCH_DATABASE_URL": database_url,
        "PRICEWATCH_TASK_QUEUE": "worker-start",
        "PRICEWATCH_MIN_INTERVAL": "1s",
        "PRICEWATCH_ALLOW_NETWORKS": "127.0.0.1/32",
    }
    page_server.set("/start", "<p>EUR 1</p>")
    with frozen_for(server, 3600):
        process = await asyncio.create_subprocess_exec(
            PRICEWATCH, "worker", env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        assert process.stdout is not None
        seen: list[bytes] = []
        try:
            await read_until(process, b"waiting for Temporal", seen)
            await asyncio.sleep(FROZEN_FOR)  # past the SDK's retries: the worker still waits
            assert process.returncode is None, b"".join(seen)
        except BaseException:
            await terminated(process, grace=40)
            raise
    try:
        await read_until(process, b"polling", seen, within=120)
        drain = asyncio.create_task(process.stdout.read())
        code, out, err = await cli(env, "add", "start", page_server.url("/start"), "--every", "1s")
        assert code == 0, (out, err)
        await wait_for(pool, "SELECT count(*) FROM source_checks WHERE target_id = 'start'")
    finally:
        await terminated(process, grace=40)
    logged = (b"".join(seen) + await drain).decode()
    assert f"waiting for Temporal at {address} (" in logged, logged
    assert "Traceback" not in logged, logged
    assert process.returncode == 0


class NeverStarting:
    """A worker whose start-up check never answers (the SDK's, against a frozen server)."""

    is_running = False

    async def run(self) -> None:
        await asyncio.Event().wait()


async def test_a_start_up_check_on_a_starved_loop_is_said_by_the_clock(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each poll's sleep lasts 0.3 s where 0.05 s was asked (a loop starved beside a burner):
    the wait is said after RPC_TIMEOUT of time, not after RPC_TIMEOUT's worth of polls (which
    a fresh clone beside a burner saw take minutes)."""
    monkeypatch.setattr("workers.worker.RPC_TIMEOUT", timedelta(seconds=1))
    caplog.set_level(logging.WARNING, "pricewatch.worker")
    stop = asyncio.Event()

    async def starve() -> None:
        while not stop.is_set():
            time.sleep(0.3)  # noqa: ASYNC251  (the point: the loop is held)
            await asyncio.sleep(0)

    async def start() -> None:
        async with polling(lambda: NeverStarting(), None, stop):  # type: ignore[arg-type, return-value]
            raise AssertionError("it never starts")

    starved, starting = asyncio.create_task(starve()), asyncio.create_task(start())
    began = time.monotonic()
    try:
        said = await eventually(
            lambda: asyncio.sleep(0, [r.getMessage() for r in caplog.records]), within=6
        )
    finally:
        stop.set()
        await asyncio.wait([starved, starting])
    assert "no answer to the worker's start-up check" in said[0], said
    assert time.monotonic() - began < 4, "said late: by the polls counted, not the clock"
