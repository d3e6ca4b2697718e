"""The Temporal Schedules design: one Schedule per target, each action starting this short
workflow, which runs the product's own `check_slot` activity (the same claim, fetch and
commit as pricewatch). Run as `python -m bench.scheduled`: a worker process of its own.
"""

import asyncio
import signal

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from activities.checks import CheckActivities
    from pricewatch.models import CheckInput, TargetConfig
    from pricewatch.policy import CHECK_RETRY, CHECK_TIMEOUT, HEARTBEAT_TIMEOUT
    from pricewatch.settings import Settings
    from pricewatch.temporal import connect
    from workers.observability import configure_logging, metrics_runtime
    from workers.worker import WorkerTuning, address_policy, smtp_settings, worker_activities

WORKFLOW_NAME = "BenchScheduledCheck"
# Set by the scheduler on every workflow it starts: the action's nominal time, our due slot.
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
    settings = Settings()
    configure_logging(settings.log_format)
    tuning = WorkerTuning.from_settings(settings)
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    client = await connect(metrics_runtime(settings.metrics_address))
    async with worker_activities(
        settings.resolved_database_url(),
        smtp_settings(settings),
        address_policy(settings),
        pool_size=tuning.pool_size,
    ) as activities:
        worker = Worker(
            client,
            task_queue=settings.task_queue,
            workflows=[ScheduledCheck],
            activities=[activities.checks.check_slot],
            graceful_shutdown_timeout=tuning.shutdown_grace,
            max_cached_workflows=tuning.max_cached_workflows,
            max_concurrent_activities=tuning.max_activities,
            max_concurrent_workflow_tasks=tuning.max_workflow_tasks,
        )
        async with worker:
            print(f"worker polling task queue {settings.task_queue!r}", flush=True)
            await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
