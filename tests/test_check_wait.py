"""A check-now or retry answers within its bounds on every surface: a worker takes it within
10 s or the line names the task queue nobody polls (exit 1, 503), and a check not final
within 30 s is left to go on (the API's 202), never a call that hangs for the minutes a
failing page's retries take."""

import time
from datetime import timedelta

import httpx
import pytest
from temporalio.client import Client

from client import plans
from client import pricewatch as client_module
from client.manifest import Entry
from client.pricewatch import Pricewatch, StillChecking
from client.temporal import DATA_CONVERTER
from pricewatch.settings import Settings
from tests.conftest import PageServer
from tests.helpers import cli, serve_process, worker_process

pytestmark = pytest.mark.e2e


async def test_check_now_with_no_worker_names_the_task_queue_nobody_polls(
    env: dict[str, str], page_server: PageServer
) -> None:
    page_server.set("/idle", "<p>EUR 1</p>")
    code, out, err = await cli(env, "add", "idle", page_server.url("/idle"), "--every", "1h")
    assert code == 0, err
    started = time.monotonic()
    code, out, err = await cli(env, "check-now", "idle")
    took = time.monotonic() - started
    queue = env["PRICEWATCH_TASK_QUEUE"]
    assert (code, out) == (1, ""), err
    assert err == (
        "pricewatch: the check of idle was not taken by a worker in 10s: no worker is polling "
        f"task queue {queue!r}: start one (`pricewatch worker`)\n"
    )
    assert took < 40, took  # 10 s, the process's own start and Temporal's answer about pollers
    async with serve_process(env) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        answer = await http.post("/api/v1/targets/idle/check")
    assert answer.status_code == 503, answer.text
    assert "no worker is polling task queue" in answer.json()["error"]


async def test_a_check_not_final_in_time_is_left_to_go_on(
    env: dict[str, str], temporal_address: str, page_server: PageServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A page that answers 503 is retried (30 s apart): the caller hears, after the wait,
    that the check goes on, and the workflow records it once final without it."""
    page_server.set("/busy", "busy", status=503)
    monkeypatch.setattr(client_module, "CHECK_WAIT", timedelta(seconds=3))
    settings = Settings(
        database_url=env["PRICEWATCH_DATABASE_URL"], task_queue=env["PRICEWATCH_TASK_QUEUE"],
        min_interval=timedelta(seconds=1), allow_networks="127.0.0.1/32",
    )  # fmt: skip
    temporal = await Client.connect(temporal_address, data_converter=DATA_CONVERTER)
    entry = Entry(id="busy", url=page_server.url("/busy"), every="1h")
    async with worker_process(env), Pricewatch(settings, temporal) as pricewatch:
        await plans.put(pricewatch, entry)
        with pytest.raises(StillChecking) as going_on:
            await pricewatch.check_now("busy")
    assert str(going_on.value) == (
        "the check of busy is not final after 3s: it goes on (a page that fails for a while "
        "is retried), and `pricewatch history busy` shows it once it is"
    )
