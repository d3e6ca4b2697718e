"""The worker's JSON log lines, the dev console's lines and the health endpoints (metrics
are checked end to end)."""

import gc
import json
import logging
import os
import re
from pathlib import Path

import httpx
import pytest

from tests.helpers import python_output
from workers import observability
from workers.embedded import free_port
from workers.observability import JsonFormatter, serve_health


def test_a_log_line_is_one_json_object_with_the_check_ids() -> None:
    record = logging.LogRecord(
        "activities", logging.INFO, __file__, 1, "recorded %s", ("changed",), None
    )
    record.target_id, record.work_id, record.execution_id = (
        "acme",
        "acme:2026-08-07T08:00:00Z",
        "r/1/2",
    )
    record.temporal_activity = {"activity_type": "check_slot", "attempt": 2}
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "recorded changed"
    assert (parsed["target_id"], parsed["work_id"], parsed["execution_id"]) == (
        "acme", "acme:2026-08-07T08:00:00Z", "r/1/2"
    )  # fmt: skip
    assert parsed["temporal"]["attempt"] == 2 and parsed["level"] == "INFO"


async def test_health_answers_live_and_ready_as_the_check_says() -> None:
    readiness = [True]

    async def ready() -> bool:
        return readiness[0]

    address = f"127.0.0.1:{free_port()}"
    server = await serve_health(address, ready)
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
            assert (await client.get(f"http://{address}/livez")).status_code == 200
            assert (await client.get(f"http://{address}/readyz")).status_code == 200
            readiness[0] = False
            assert (await client.get(f"http://{address}/readyz")).status_code == 503
            assert (await client.get(f"http://{address}/livez")).status_code == 200
            assert (await client.get(f"http://{address}/other")).status_code == 404
    finally:
        server.close()
        await server.wait_closed()


def test_a_long_garbage_collection_is_a_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(observability, "GC_PAUSE_WORTH_A_LINE", 0.0)
    before = list(gc.callbacks)
    try:
        observability.watch_gc_pauses(None)
        with caplog.at_level(logging.WARNING, "pricewatch.worker"):
            gc.collect()
    finally:
        gc.callbacks[:] = before
    assert "garbage collection (generation 2) paused the worker for" in caplog.text


# A workflow whose one delivery gives up, on a time-skipping server, in a process of its own
# configured as `pricewatch dev`'s console is. The workflow is a module of its own: the
# sandbox imports it again, which it cannot do for `__main__`.
GIVES_UP_WORKFLOW = """
from temporalio import workflow
with workflow.unsafe.imports_passed_through():
    from pricewatch.deliveries import DeliveryInput
from workflows import calls

@workflow.defn
class GivesUp:
    @workflow.run
    async def run(self, delivery: DeliveryInput) -> None:
        await calls.deliver(delivery)
"""
GIVES_UP = """
import asyncio, os, sys, uuid
from gives_up import GivesUp
from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from client.temporal import DATA_CONVERTER
from pricewatch.deliveries import DeliveryFailureInput, DeliveryInput, Notice
from pricewatch.names import Activity
from pricewatch.policy import PERMANENT_DELIVERY_ERROR, expected_failure
from tests.helpers import CHANGED
from workers.embedded import find_binary
from workers.observability import configure_dev_console

@activity.defn(name=Activity.DELIVER_NOTICE)
async def deliver_notice(delivery: DeliveryInput) -> None:
    raise expected_failure("HTTP 500 from the webhook", PERMANENT_DELIVERY_ERROR,
                           non_retryable=True)

@activity.defn(name=Activity.RECORD_DELIVERY_FAILED)
async def record_delivery_failed(failure: DeliveryFailureInput) -> None: ...

async def main() -> None:
    configure_dev_console(verbose=False)
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=DATA_CONVERTER,
        test_server_existing_path=find_binary("temporal-test-server"),
    )
    delivery = DeliveryInput(notice=Notice.CHANGED, channel_id="webhook-1",
                             target_id="acme", url="http://127.0.0.1/", result=CHANGED)
    try:
        async with Worker(env.client, task_queue="q", workflows=[GivesUp],
                          activities=[deliver_notice, record_delivery_failed]):
            await env.client.execute_workflow(GivesUp.run, delivery, id=str(uuid.uuid4()),
                                              task_queue="q")
    finally:
        await env.shutdown()

asyncio.run(main())
sys.stdout.flush()
os._exit(0)  # temporalio can abort a finalising interpreter (sdk-python#300)
"""

GAVE_UP_LINE = re.compile(
    r"^\d\d:\d\d:\d\d notify webhook-1 changed acme:\S+ gave up: .*HTTP 500 from the webhook"
)


async def test_a_delivery_that_gives_up_is_one_line_on_the_dev_console(tmp_path: Path) -> None:
    """Like a check's line: time, what, why; not the SDK's logger prefix and context dict."""
    (tmp_path / "gives_up.py").write_text(GIVES_UP_WORKFLOW)
    (tmp_path / "main.py").write_text(GIVES_UP)
    pythonpath = {"PYTHONPATH": str(Path(__file__).parents[1])}
    text = await python_output(
        str(tmp_path / "main.py"), within=60, env={**os.environ, **pythonpath}
    )
    assert "temporalio.workflow" not in text and "{'attempt'" not in text, text
    assert [line for line in text.splitlines() if GAVE_UP_LINE.match(line)], text
