"""The worker as shipped: workflow activations run inline on its event loop."""

import asyncio
import threading
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from workers.worker import InlineActivations


@workflow.defn(sandboxed=False)
class WhereActivated:
    """Test-only: reports the thread each of its two activations ran on."""

    @workflow.run
    async def run(self) -> list[int]:
        threads = [threading.get_ident()]
        await workflow.sleep(timedelta(days=1))
        threads.append(threading.get_ident())
        return threads


async def test_activations_run_on_the_event_loop_and_leave_it_running(client: Client) -> None:
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    loop = asyncio.get_running_loop()
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[WhereActivated],
        workflow_runner=UnsandboxedWorkflowRunner(),
        workflow_task_executor=InlineActivations(),
    ):
        threads = await client.execute_workflow(
            WhereActivated.run, id=f"where-{task_queue}", task_queue=task_queue
        )
        # An activation clears the running loop on exit; the worker's must be back.
        assert asyncio.get_running_loop() is loop
        await asyncio.sleep(0)
    assert threads == [threading.get_ident()] * 2
