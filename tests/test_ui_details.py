"""What the Temporal UI says a target is doing (the workflow's current details) and which
targets its search box lists as paused, against a dev server and a real worker process."""

from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from client.temporal import DATA_CONVERTER, workflow_id
from tests.conftest import PageServer
from tests.helpers import cli, worker_process
from tests.waits import eventually

pytestmark = pytest.mark.e2e


async def test_the_ui_says_sleeping_paused_retrying_and_unhealthy(
    env: dict[str, str], page_server: PageServer
) -> None:
    page_server.set("/ok", "<p>EUR 4.49</p>")
    page_server.queue("/busy", *[(503, "busy")] * 5, headers={"Retry-After": "600"})
    client = await Client.connect(env["TEMPORAL_ADDRESS"], data_converter=DATA_CONVERTER)

    async def details(target_id: str) -> str:
        handle = client.get_workflow_handle(workflow_id(target_id))
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        return str(metadata.current_details)

    def saying(target_id: str, *words: str) -> Any:
        async def probe() -> str | None:
            text = await details(target_id)
            return text if all(word in text for word in words) else None

        return eventually(probe, within=90, what=f"{target_id}'s details saying {words}")

    async with worker_process(env):
        for target_id, path, *options in (
            ("ui-ok", "/ok"),
            ("ui-busy", "/busy"),
            ("ui-gone", "/gone", "--unhealthy-after", "1"),
        ):
            code, _, err = await cli(
                env, "add", target_id, page_server.url(path), "--every", "1h", *options
            )
            assert code == 0, err

        assert (await saying("ui-ok", "sleeping until ")).startswith("sleeping until 20")
        busy = await saying("ui-busy", "retrying ui-busy:", "attempt 2 not before")
        assert "attempt 1 of 5 failed (HTTP 503" in busy, busy
        gone = await saying("ui-gone", "unhealthy since", "1 failed slot in a row")
        assert gone.startswith("sleeping until "), gone

        code, _, err = await cli(env, "pause", "ui-ok")
        assert code == 0, err
        assert (await saying("ui-ok", "paused since ")).endswith("Z")

        async def listed_as_paused() -> set[str]:
            paused = client.list_workflows("PricewatchPaused = true")
            return {w.id async for w in paused}

        assert await eventually(listed_as_paused, what="a paused target listed") == {
            workflow_id("ui-ok")
        }
        code, _, err = await cli(env, "resume", "ui-ok")
        assert code == 0, err
        await saying("ui-ok", "sleeping until ")

        async def none_paused() -> bool:
            return not await listed_as_paused()

        await eventually(none_paused, what="the resumed target off the paused list")
        for target_id in ("ui-ok", "ui-busy", "ui-gone"):
            await cli(env, "remove", target_id)
