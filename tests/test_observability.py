"""The worker's JSON log lines and health endpoints (metrics are checked end to end)."""

import gc
import json
import logging

import httpx
import pytest

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
        async with httpx.AsyncClient(trust_env=False) as client:
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
