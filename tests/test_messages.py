"""What a user reads speaks the product's language, not Python's: stored errors, CLI errors,
durations, the wording for an unknown target, `--help` and URLs (issue 27, points 4 and 6).
Through the CLI's real output wherever a user would read it."""

from datetime import timedelta

import asyncpg
from temporalio.testing import WorkflowEnvironment

from tests.conftest import PageServer, Start
from tests.test_workflow import HOUR, new_target, rows, running_worker

PYTHON_NAMES = ("Error:", "PermanentFetchError", "TransientFetchError", "ApplicationError")


async def test_a_dead_letter_reads_like_the_attempts_before_it(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    start: Start,
    task_queue: str,
) -> None:
    """A 404 page's failed row and a 503 page's row, retrying and then given up, read
    `HTTP <status> <reason>`: no error type of ours or the SDK's before it."""
    client = time_skipping_env.client
    gone, busy = new_target(page_server), new_target(page_server)
    busy = busy.model_copy(update={"max_attempts": 2})
    page_server.set(f"/{gone.target_id}", "gone", status=404)
    page_server.set(f"/{busy.target_id}", "busy", status=503)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    async with running_worker(client, task_queue, pool):
        await start(gone, start_at=anchor)
        await start(busy, start_at=anchor)
        await time_skipping_env.sleep(timedelta(hours=1, seconds=10))
        retrying = (await rows(pool, busy.target_id))[0]
        await time_skipping_env.sleep(timedelta(minutes=10))
    dead_404 = (await rows(pool, gone.target_id))[0]
    dead_503 = (await rows(pool, busy.target_id))[0]
    assert retrying["status"] == "retrying"
    assert retrying["error_message"] == "HTTP 503 Service Unavailable"
    assert (dead_503["status"], dead_503["error_message"]) == ("failed", retrying["error_message"])
    assert (dead_404["status"], dead_404["error_message"]) == ("failed", "HTTP 404 Not Found")
