"""Every CLI and API call that needs Temporal is bounded (issue 48): with the Temporal server
frozen (SIGSTOP: it keeps accepting TCP connections and answers nothing, as a paused VM
does), a command exits 1 within RPC_TIMEOUT with one line naming Temporal and its address,
as a frozen Postgres's `cannot reach Postgres at ...: no answer in time` does, and the API
answers 503 with the same line. Real processes throughout."""

import asyncio
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from client.temporal import RPC_TIMEOUT
from tests.conftest import PageServer
from tests.helpers import cli, serve_process, worker_process
from tests.waits import eventually
from workers.embedded import free_port, start_temporal_dev_server, stop_process

# Scheduling on a busy two-core machine.
SLACK = 5.0
BOUND = RPC_TIMEOUT.total_seconds() + SLACK


@pytest.fixture(scope="module")
def temporal_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A dev server of this module's own: the tests freeze it."""
    with tempfile.TemporaryDirectory(prefix="pricewatch-temporal-") as tmp:
        port = free_port()
        server = start_temporal_dev_server(Path(tmp) / "temporal.db", port=port, ui_port=None)
        try:
            yield server, f"127.0.0.1:{port}"
        finally:
            stop_process(server)


@pytest.fixture
def env(temporal_server: tuple[subprocess.Popen[bytes], str], database_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": temporal_server[1],
        "PRICEWATCH_DATABASE_URL": database_url,
        "PRICEWATCH_TASK_QUEUE": "bounds",
        "PRICEWATCH_ALLOW_NETWORKS": "127.0.0.1/32",  # the test page
    }


@asynccontextmanager
async def frozen(server: subprocess.Popen[bytes], address: str) -> AsyncIterator[None]:
    """The server stopped, then continued and answering a workflow call again (a thawed
    dev server takes a while to take its shards back on a loaded machine)."""
    os.kill(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)
    client = await asyncio.wait_for(Client.connect(address), 60)
    for _ in range(60):
        try:
            await client.get_workflow_handle("nothing").describe(rpc_timeout=timedelta(seconds=2))
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                return
        await asyncio.sleep(1)


def said_once(text: str, address: str) -> None:
    """One line, naming Temporal and where, in the shape Postgres's case has; no traceback."""
    assert text == f"pricewatch: cannot reach Temporal at {address}: no answer in time\n", text


@pytest.mark.timeout(360)  # six CLI processes, three of them waiting out their bound
async def test_cli_with_temporal_frozen_exits_1_within_the_bound(
    temporal_server: tuple[subprocess.Popen[bytes], str], env: dict[str, str]
) -> None:
    server, address = temporal_server
    async with frozen(server, address):
        for args in (("status", "some-target"), ("pause", "some-target"), ("export",)):
            own_start = await startup(env, *args)
            started = time.monotonic()
            code, out, err = await cli(env, *args)
            took = time.monotonic() - started
            assert code == 1, (args, out, err)
            said_once(err, address)
            assert took <= own_start + BOUND, (args, took, own_start)
        # `list` reads Postgres only: it answers as usual while Temporal is frozen.
        code, out, err = await cli(env, "list")
        assert (code, err) == (0, ""), (out, err)


async def startup(env: dict[str, str], *args: str) -> float:
    """How long the same command takes to fail at once (Temporal refusing): the process's
    own start, which a loaded machine stretches to seconds, is not the bound's to keep."""
    started = time.monotonic()
    code, _, err = await cli(env | {"TEMPORAL_ADDRESS": "127.0.0.1:1"}, *args)
    assert code == 1 and "cannot reach Temporal at 127.0.0.1:1" in err, err
    return time.monotonic() - started


async def test_api_with_temporal_frozen_answers_503_within_the_bound(
    temporal_server: tuple[subprocess.Popen[bytes], str], env: dict[str, str]
) -> None:
    """The server's client is connected before the freeze: each call, not only the
    connect, has its bound; after the thaw the same server answers again."""
    server, address = temporal_server
    async with serve_process(env) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:

        async def connected() -> bool:  # an earlier test's thaw may still be catching up
            return (await http.get("/api/v1/targets/some-target")).status_code == 404

        await eventually(connected, what="the API connected to Temporal")
        async with frozen(server, address):
            started = time.monotonic()
            answer = await http.get("/api/v1/targets/some-target")
            took = time.monotonic() - started
            assert answer.status_code == 503, answer.text
            assert answer.json() == {
                "error": f"cannot reach Temporal at {address}: no answer in time"
            }
            assert took <= BOUND, took
        # The thawed server answers the same client again: at once, or after one 503 while
        # the connection the freeze broke is made again.
        answers = [(await http.get("/api/v1/targets/some-target")).status_code for _ in range(2)]
        assert answers[-1] == 404, answers


async def test_a_query_to_a_frozen_worker_ends_within_the_bound(
    temporal_server: tuple[subprocess.Popen[bytes], str],
    env: dict[str, str],
    page_server: PageServer,
) -> None:
    """Temporal answers, the worker holding the target is frozen: `status` (a query, which
    a worker answers) ends within the bound with a line that says it could be either."""
    _, address = temporal_server
    page_server.set("/p", "price 10")
    async with worker_process(env) as worker:
        code, _, err = await cli(env, "add", "frozen", page_server.url("/p"), "--every", "1h")
        assert code == 0, err
        assert (await cli(env, "status", "frozen"))[0] == 0  # the worker holds it now
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            code, out, err = await cli(env, "status", "frozen")
            took = time.monotonic() - started
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        own_start = await startup(env, "status", "frozen")
    assert code == 1, (out, err)
    assert err == (
        "pricewatch: the query of pricewatch-frozen had no answer in time "
        f"(from Temporal at {address}, or the worker it asked)\n"
    ), err
    assert took <= own_start + BOUND, (took, own_start)
