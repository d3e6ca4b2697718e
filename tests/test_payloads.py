"""The worker skips the SDK's payload walks when they cannot change a payload, and only then."""

from collections.abc import Sequence
from pathlib import Path

import pytest
import temporalio.bridge.worker
from temporalio.api.common.v1 import Payload
from temporalio.bridge.proto.workflow_commands import (
    CompleteWorkflowExecution,
    WorkflowCommand,
)
from temporalio.bridge.proto.workflow_completion import (
    Success,
    WorkflowActivationCompletion,
)
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.worker._command_aware_visitor import CommandAwarePayloadVisitor

from client.temporal import DATA_CONVERTER
from workers.payloads import skip_idle_payload_walks
from workers.worker import InlineActivations
from workflows.monitor import MonitorTarget

HISTORY = Path(__file__).parent / "histories" / "1.1.0" / "monitor_target_run4.json"


class Tagging(PayloadCodec):
    """Test-only codec: marks every payload it encodes."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={**p.metadata, "tagged": b"1"}, data=p.data) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


def completion() -> WorkflowActivationCompletion:
    result = Payload(metadata={"encoding": b"json/plain"}, data=b"1")
    command = WorkflowCommand(complete_workflow_execution=CompleteWorkflowExecution(result=result))
    return WorkflowActivationCompletion(run_id="r", successful=Success(commands=[command]))


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every payload walk the SDK starts."""
    started: list[object] = []
    original = CommandAwarePayloadVisitor.visit

    async def counted(self: CommandAwarePayloadVisitor, *args: object) -> None:
        started.append(args)
        await original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(CommandAwarePayloadVisitor, "visit", counted)
    skip_idle_payload_walks()
    skip_idle_payload_walks()  # a second install must not wrap the first
    return started


async def test_a_replay_with_pricewatchs_converter_walks_no_payload(walks: list[object]) -> None:
    history = WorkflowHistory.from_json("recorded", HISTORY.read_text())
    replayer = Replayer(
        workflows=[MonitorTarget],
        data_converter=DATA_CONVERTER,
        workflow_runner=UnsandboxedWorkflowRunner(),
        workflow_task_executor=InlineActivations(),
    )
    await replayer.replay_workflow(history)
    assert walks == []


async def test_a_converter_with_a_codec_is_still_walked(walks: list[object]) -> None:
    coded = DataConverter(payload_codec=Tagging())
    message = completion()
    await temporalio.bridge.worker.encode_completion(
        message, coded, encode_headers=False, storage_concurrency_limit=1
    )
    result = message.successful.commands[0].complete_workflow_execution.result
    assert result.metadata["tagged"] == b"1"
    assert len(walks) == 3

    untouched = completion()
    await temporalio.bridge.worker.encode_completion(
        untouched, DATA_CONVERTER, encode_headers=False, storage_concurrency_limit=1
    )
    assert untouched == completion()
    assert len(walks) == 3
