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
from collections.abc import Iterator
from contextlib import contextmanager
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
from workers.embedded import start_temporal_dev_server_anywhere, stop_process

# Scheduling on a busy two-core machine.
SLACK = 5.0
BOUND = RPC_TIMEOUT.total_seconds() + SLACK


@pytest.fixture
def temporal_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A dev server of each test's own: the tests freeze it, and a dev server frozen for a
    minute on a busy machine may reset every connection for minutes after its thaw (seen
    beside a burner), which is the dev server's affair, not the next test's."""
    with tempfile.TemporaryDirectory(prefix="pricewatch-temporal-") as tmp:
        server, port = start_temporal_dev_server_anywhere(Path(tmp) / "temporal.db")
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


@contextmanager
def frozen(server: subprocess.Popen[bytes]) -> Iterator[None]:
    """The server stopped, then continued."""
    os.kill(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


async def answering(address: str) -> None:
    """Until the thawed server answers a workflow call again: a thawed dev server takes a
    while to take its shards back on a loaded machine, and resets connections meanwhile."""

    async def answers() -> bool:
        try:
            client = await asyncio.wait_for(Client.connect(address), 10)
            await client.get_workflow_handle("nothing").describe(rpc_timeout=timedelta(seconds=2))
        except RPCError as err:
            return err.status is RPCStatusCode.NOT_FOUND
        except (RuntimeError, TimeoutError):  # the connect refused or reset
            return False
        return False

    await eventually(answers, within=120, every=1, what="the thawed Temporal answering")


def said_once(text: str, address: str) -> None:
    """One line, naming Temporal and where, in the shape Postgres's case has; no traceback."""
    assert text == f"pricewatch: cannot reach Temporal at {address}: no answer in time\n", text


@pytest.mark.long
@pytest.mark.timeout(360)  # six CLI processes, three of them waiting out their bound
async def test_cli_with_temporal_frozen_exits_1_within_the_bound(
    temporal_server: tuple[subprocess.Popen[bytes], str], env: dict[str, str]
) -> None:
    server, address = temporal_server
    own_start = {args: await startup(env, *args) for args in COMMANDS}
    with frozen(server):
        for args in COMMANDS:
            started = time.monotonic()
            code, out, err = await cli(env, *args)
            took = time.monotonic() - started
            assert code == 1, (args, out, err)
            said_once(err, address)
            own_start[args] = max(own_start[args], await startup(env, *args))
            assert took <= own_start[args] + BOUND, (args, took, own_start[args])
        # `list` reads Postgres only: it answers as usual while Temporal is frozen.
        code, out, err = await cli(env, "list")
        assert (code, err) == (0, ""), (out, err)


COMMANDS = (("status", "some-target"), ("pause", "some-target"), ("export",))


async def startup(env: dict[str, str], *args: str) -> float:
    """How long the same command takes to fail at once (Temporal refusing): the process's
    own start, which a loaded machine stretches to seconds, is not the bound's to keep. It
    varies by seconds from one start to the next beside a burner, so the tests take the
    longer of one start before and one after the bounded call."""
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
        with frozen(server):
            started = time.monotonic()
            answer = await http.get("/api/v1/targets/some-target")
            took = time.monotonic() - started
            assert answer.status_code == 503, answer.text
            assert answer.json() == {
                "error": f"cannot reach Temporal at {address}: no answer in time"
            }
            assert took <= BOUND, took
        await answering(address)
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
        own_start = await startup(env, "status", "frozen")
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            code, out, err = await cli(env, "status", "frozen")
            took = time.monotonic() - started
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        own_start = max(own_start, await startup(env, "status", "frozen"))
    assert code == 1, (out, err)
    assert err == (
        "pricewatch: the query of pricewatch-frozen had no answer in time "
        f"(from Temporal at {address}, or the worker it asked)\n"
    ), err
    assert took <= own_start + BOUND, (took, own_start)
