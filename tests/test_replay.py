"""Determinism: histories recorded from real runs replay against today's workflow code.

A change to the workflow's command sequence (a new activity, a timer shape, a different
wait) makes these fail, which is the point: running histories would break the same way.
From 1.0 on such a change goes behind `workflow.patched`, and every release records its own
histories (`python -m tests.record_histories` writes tests/histories/<version>/) beside the
earlier releases' ones, which stay.
"""

from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from client.temporal import DATA_CONVERTER, SharedPydanticPayloadConverter
from pricewatch.models import MonitorState, TargetConfig
from workflows.monitor import MonitorTarget
from workflows.retention import PruneChecks
from workflows.selfwatch import WatchSelf

# Each release's histories, under tests/histories/<version>/: all of them must replay.
ROOT = Path(__file__).parent / "histories"
HISTORIES = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(ROOT.glob("*/*.json"))}


def test_histories_are_committed() -> None:
    assert HISTORIES, "record some with `python -m tests.record_histories`"


@pytest.mark.parametrize("name", HISTORIES)
async def test_recorded_history_replays(name: str) -> None:
    history = WorkflowHistory.from_json(name, HISTORIES[name])
    replayer = Replayer(
        workflows=[MonitorTarget, PruneChecks, WatchSelf], data_converter=DATA_CONVERTER
    )
    await replayer.replay_workflow(history)


async def test_replay_detects_a_changed_workflow() -> None:
    """Guard the guard: a history whose commands no longer match must fail to replay."""
    recorded = next(iter(HISTORIES.values()))
    tampered = recorded.replace('"sync_target"', '"remove_target"', 1)
    assert tampered != recorded
    history = WorkflowHistory.from_json("pricewatch-recorded", tampered)
    replayer = Replayer(workflows=[MonitorTarget], data_converter=DATA_CONVERTER)
    with pytest.raises(Exception, match=r"[Nn]ondetermin"):
        await replayer.replay_workflow(history)


def test_the_shared_converter_writes_what_pydantics_converter_writes() -> None:
    """Built once and reused per activation: same payloads, same values back."""
    state = MonitorState(
        config=TargetConfig(target_id="t", url="http://127.0.0.1/p", interval_seconds=3600),
        start_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    ours = DATA_CONVERTER.payload_converter.to_payloads([state])
    assert ours == pydantic_data_converter.payload_converter.to_payloads([state])
    assert DATA_CONVERTER.payload_converter.from_payloads(ours, [MonitorState]) == [state]
    first, second = SharedPydanticPayloadConverter(), SharedPydanticPayloadConverter()
    pairs = zip(first.converters.values(), second.converters.values(), strict=True)
    assert all(a is b for a, b in pairs)
