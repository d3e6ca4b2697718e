"""Names recorded in Temporal histories and used by every surface (workflow, activities,
client, CLI, tests). Never derive them from Python identifiers: a rename must not change
what running workflows and their histories call things."""

from enum import StrEnum

from temporalio.common import SearchAttributeKey

WORKFLOW_TYPE = "MonitorTarget"
RETENTION_WORKFLOW_TYPE = "PruneChecks"
# The Temporal Schedule that runs retention, and the id of each run it starts.
RETENTION_SCHEDULE_ID = "pricewatch-retention"
# The monitor watching itself (PRICEWATCH_SELFWATCH_NOTIFY): its workflow and Schedule.
SELFWATCH_WORKFLOW_TYPE = "WatchSelf"
SELFWATCH_SCHEDULE_ID = "pricewatch-selfwatch"
TARGET_SEARCH_ATTRIBUTE = SearchAttributeKey.for_keyword("PricewatchTarget")
UNHEALTHY_SEARCH_ATTRIBUTE = SearchAttributeKey.for_bool("PricewatchUnhealthy")
PAUSED_SEARCH_ATTRIBUTE = SearchAttributeKey.for_bool("PricewatchPaused")


class Signal(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    REMOVE = "remove"


class Update(StrEnum):
    RECONFIGURE = "reconfigure"
    CHECK_NOW = "check_now"
    RETRY_SLOT = "retry_slot"


class Query(StrEnum):
    STATUS = "status"


class Activity(StrEnum):
    REGISTER_TARGET = "register_target"
    SYNC_TARGET = "sync_target"
    RECONFIGURE_TARGET = "reconfigure_target"
    CHECK_SLOT = "check_slot"
    RECORD_FAILED_SLOT = "record_failed_slot"
    UNNOTIFIED_CHANGES = "unnotified_changes"
    REMOVE_TARGET = "remove_target"
    DELIVER_NOTICE = "deliver_notice"
    RECORD_DELIVERY_FAILED = "record_delivery_failed"
    PRUNE_CHECKS = "prune_checks"
    WATCH_SELF = "watch_self"


def render_queue(task_queue: str) -> str:
    """The task queue of rendered checks beside a deployment's queue (`pricewatch-render`):
    only render workers, with a browser, poll it."""
    return f"{task_queue}-render"
