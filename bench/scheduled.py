"""The Temporal Schedules design: one Schedule per target, each action starting this short
workflow, which runs the product's own `check_slot` activity (the same claim, fetch and
commit as pricewatch). Run as `python -m bench.scheduled`: a worker process of its own.
"""

import asyncio

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from activities.checks import CheckActivities
    from bench.process import worker_process
    from pricewatch.models import CheckInput, TargetConfig
    from pricewatch.policy import CHECK_RETRY, CHECK_TIMEOUT, HEARTBEAT_TIMEOUT
    from workers.worker import address_policy, smtp_settings, worker_activities

WORKFLOW_NAME = "BenchScheduledCheck"
# Set by the scheduler on every workflow it starts: the action's nominal time, our slot.
SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")


@workflow.defn(name=WORKFLOW_NAME)
class ScheduledCheck:
    @workflow.run
    async def run(self, config: TargetConfig) -> None:
        slot = workflow.info().typed_search_attributes.get(SCHEDULED_START_TIME)
        if slot is None:
            raise ValueError("not started by a Schedule: no TemporalScheduledStartTime")
        check = CheckInput(
            target_id=config.target_id,
            url=config.url,
            slot=slot,
        )
        await workflow.execute_activity_method(
            CheckActivities.check_slot,
            check,
            start_to_close_timeout=CHECK_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=CHECK_RETRY,
        )


async def main() -> None:
    """A worker like `pricewatch worker` (same defaults, pool and client), for this workflow."""
    process = await worker_process()
    settings = process.settings
    async with worker_activities(
        settings.resolved_database_url(),
        smtp_settings(settings),
        address_policy(settings),
        pool_size=process.tuning.pool_size,
    ) as activities:
        worker = Worker(
            process.client,
            workflows=[ScheduledCheck],
            activities=[activities.checks.check_slot],
            **process.options(),
        )
        await process.serve(worker)


if __name__ == "__main__":
    asyncio.run(main())
