"""Run only by tests/test_lifeline.py (its name is not a test file's): holds the fixtures'
servers until the run is killed, after writing that they are up."""

import asyncio
import os
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment


@pytest.mark.timeout(300)
async def test_hold_every_fixtures_server(
    postgres_server_url: str, temporal_address: str, time_skipping_env: WorkflowEnvironment
) -> None:
    await asyncio.to_thread(Path(os.environ["LIFELINE_PROBE_UP"]).write_text, "up\n")
    await asyncio.Event().wait()  # until killed
