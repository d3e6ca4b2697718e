"""`WatchSelf`: one pass of the monitor watching itself, started every minute (settings:
PRICEWATCH_SELFWATCH_EVERY) by a Temporal Schedule (`pricewatch-selfwatch`, created by a
worker whose PRICEWATCH_SELFWATCH_NOTIFY is set). The pass, and what makes it told once per
episode, live in the `watch_self` activity (activities/selfwatch.py)."""

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from pricewatch.names import SELFWATCH_WORKFLOW_TYPE, Activity

# One pass: the health query and a send per channel (9 s each). A notice that could not go
# is tried again a few times here, and by every later pass.
PASS_TIMEOUT = timedelta(seconds=60)
PASS_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5), maximum_interval=timedelta(seconds=20),
    maximum_attempts=3,
)  # fmt: skip


@workflow.defn(name=SELFWATCH_WORKFLOW_TYPE)
class WatchSelf:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(
            Activity.WATCH_SELF, start_to_close_timeout=PASS_TIMEOUT, retry_policy=PASS_RETRY
        )
