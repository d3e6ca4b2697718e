"""The bare Temporal loop, the ceiling of this stack: one workflow per target sleeps until
its next grid slot, then runs one local activity that fetches the page with httpx and
inserts one row. No lease, no fencing, no change detection, no registration: what remains
is the least a durable per-target loop costs here, so `pricewatch/bare` in the report is
the price of the product's guarantees. Run as `python -m bench.bare`: a worker process of
its own, tuned as `pricewatch worker` is (unsandboxed, activations inline, same settings).
"""

import asyncio
import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import asyncpg
import httpx
from temporalio import activity, workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.store import keep_session
from bench.process import worker_process
from pricewatch.slots import first_slot, next_slot, work_id
from workers.payloads import skip_idle_payload_walks
from workers.worker import InlineActivations

WORKFLOW_NAME = "BenchBareLoop"
CHECK_ACTIVITY = "bare_check"
CHECK_TIMEOUT = timedelta(seconds=30)
# One round trip. A retry of a check whose row landed finds it there and moves on.
INSERT_ROW = """
INSERT INTO source_checks (work_id, target_id, scheduled_for, kind, checked_at, status,
                           result_hash, http_status, body_bytes)
VALUES ($1, $2, $3, 'scheduled', now(), 'unchanged', $4, $5, $6)
ON CONFLICT DO NOTHING
"""


def workflow_id(target_id: str) -> str:
    return f"bare-{target_id}"


@dataclass(frozen=True)
class BareLoop:
    target_id: str
    url: str
    anchor: datetime
    """A point of the grid: the first slot if still ahead."""
    interval_seconds: int
    max_checks_per_run: int


@dataclass(frozen=True)
class BareCheck:
    target_id: str
    url: str
    slot: datetime


class BareActivities:
    def __init__(self, pool: asyncpg.Pool, http: httpx.AsyncClient) -> None:
        self.pool = pool
        self.http = http

    @activity.defn(name=CHECK_ACTIVITY)
    async def check(self, check: BareCheck) -> None:
        response = await self.http.get(check.url)
        response.raise_for_status()
        body = response.content
        await self.pool.execute(
            INSERT_ROW, work_id(check.target_id, check.slot), check.target_id, check.slot,
            hashlib.sha256(body).hexdigest(), response.status_code, len(body),
        )  # fmt: skip


@workflow.defn(name=WORKFLOW_NAME)
class BareLoopWorkflow:
    @workflow.run
    async def run(self, loop: BareLoop) -> None:
        interval = timedelta(seconds=loop.interval_seconds)
        slot = first_slot(loop.anchor, interval, workflow.now())
        for _ in range(loop.max_checks_per_run):
            if (delay := slot - workflow.now()) > timedelta(0):
                await workflow.sleep(delay)
            await workflow.execute_local_activity_method(
                BareActivities.check,
                BareCheck(loop.target_id, loop.url, slot),
                start_to_close_timeout=CHECK_TIMEOUT,
            )
            slot = next_slot(slot, interval, workflow.now())
        workflow.continue_as_new(replace(loop, anchor=slot))


async def main() -> None:
    process = await worker_process()
    pool = await asyncpg.create_pool(
        process.settings.resolved_database_url(),
        min_size=1,
        max_size=process.tuning.pool_size,
        reset=keep_session,  # the same pool as the worker's
    )
    skip_idle_payload_walks()  # as pricewatch's worker does: the most this stack can do
    try:
        async with httpx.AsyncClient() as http:
            worker = Worker(
                process.client,
                workflows=[BareLoopWorkflow],
                activities=[BareActivities(pool, http).check],
                workflow_runner=UnsandboxedWorkflowRunner(),
                workflow_task_executor=InlineActivations(),
                **process.options(),
            )
            await process.serve(worker)
    finally:
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
