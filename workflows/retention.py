"""`PruneChecks`: one retention pass over every target, started hourly by a Temporal
Schedule (`pricewatch-retention`, created by the worker). The work and its batching live in
the `prune_checks` activity; this only keeps calling it until the pass is done, so a pass
survives worker restarts and shows in the Temporal UI like everything else."""

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pricewatch.models import PruneProgress
    from pricewatch.names import RETENTION_WORKFLOW_TYPE, Activity
    from pricewatch.policy import PRUNE_HEARTBEAT_TIMEOUT, PRUNE_RETRY, PRUNE_TIMEOUT


@workflow.defn(name=RETENTION_WORKFLOW_TYPE)
class PruneChecks:
    @workflow.run
    async def run(self) -> PruneProgress:
        progress = PruneProgress()
        while not progress.done:
            progress = await workflow.execute_activity(
                Activity.PRUNE_CHECKS,
                progress,
                result_type=PruneProgress,
                start_to_close_timeout=PRUNE_TIMEOUT,
                heartbeat_timeout=PRUNE_HEARTBEAT_TIMEOUT,
                retry_policy=PRUNE_RETRY,
                summary=f"prune after {progress.after!r}" if progress.after else "prune",
            )
        return progress
