"""Temporal names and the one client factory used by the CLI, the worker and the tests."""

import asyncio
import dataclasses
import json
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType, IndexedValueType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    ListWorkflowsInput,
    OutboundInterceptor,
    QueryWorkflowInput,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    SignalWorkflowInput,
    StartWorkflowInput,
    WorkflowExecutionAsyncIterator,
    WorkflowExecutionDescription,
    WorkflowHandle,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import CompositePayloadConverter, DataConverter
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from pricewatch.models import MonitorState
from pricewatch.names import (
    PAUSED_SEARCH_ATTRIBUTE,
    RETENTION_SCHEDULE_ID,
    RETENTION_WORKFLOW_TYPE,
    SELFWATCH_SCHEDULE_ID,
    SELFWATCH_WORKFLOW_TYPE,
    TARGET_SEARCH_ATTRIBUTE,
    UNHEALTHY_SEARCH_ATTRIBUTE,
    WORKFLOW_TYPE,
)
from pricewatch.policy import PRUNE_EVERY

# The marker the SDK records for a completed local activity.
LOCAL_ACTIVITY_MARKER = "core_local_activity"
# A one-off call of ours (not the worker's polls) gives up after this, and so does connecting:
# a frozen frontend accepts the TCP connection and then answers nothing. Every call, polls
# too, also runs on a connection whose HTTP/2 keepalive (the SDK's default: a ping every
# 30 s, 15 s to answer) closes it when the frontend stops answering (docs/failures.md).
RPC_TIMEOUT = timedelta(seconds=10)
DEFAULT_ADDRESS = "localhost:7233"
SEARCH_ATTRIBUTES = {
    TARGET_SEARCH_ATTRIBUTE.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    UNHEALTHY_SEARCH_ATTRIBUTE.name: IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
    PAUSED_SEARCH_ATTRIBUTE.name: IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
}


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """pydantic's payload converter, built once. The worker builds a payload converter
    twice per workflow activation; pydantic's takes no serialization context, so each build
    reuses the same converters (and their type-adapter cache) instead of new ones: 2% of
    the worker's CPU at 50 checks/s. Payloads are byte for byte the same."""

    def __init__(self) -> None:
        CompositePayloadConverter.__init__(self, *_PYDANTIC_CONVERTERS)


_PYDANTIC_CONVERTERS = tuple(PydanticPayloadConverter().converters.values())
DATA_CONVERTER = DataConverter(payload_converter_class=SharedPydanticPayloadConverter)


def workflow_id(target_id: str) -> str:
    return f"pricewatch-{target_id}"


async def start_monitor(
    client: Client, state: MonitorState, task_queue: str
) -> WorkflowHandle[Any, None]:
    """Start a target's workflow; if one is already open, this is a no-op (never a restart,
    which would cut off an in-flight check)."""
    target_id = state.config.target_id
    return await client.start_workflow(
        WORKFLOW_TYPE,
        state,
        id=workflow_id(target_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(TARGET_SEARCH_ATTRIBUTE, target_id)]
        ),
        result_type=type(None),
    )


async def ensure_retention_schedule(client: Client, task_queue: str) -> None:
    """The hourly retention Schedule: every worker asks at start; the first creates it, the
    others bring it up to date (this version's definition, their task queue). A pass still
    running when the next is due is not doubled (overlap: skip)."""
    await _ensure_schedule(
        client, RETENTION_SCHEDULE_ID, RETENTION_WORKFLOW_TYPE, task_queue, PRUNE_EVERY
    )


async def ensure_selfwatch_schedule(client: Client, task_queue: str, every: timedelta) -> None:
    """The self-watch Schedule, as the retention one: asked at start by each worker whose
    PRICEWATCH_SELFWATCH_NOTIFY is set."""
    await _ensure_schedule(
        client, SELFWATCH_SCHEDULE_ID, SELFWATCH_WORKFLOW_TYPE, task_queue, every
    )


async def _ensure_schedule(
    client: Client, schedule_id: str, workflow_type: str, task_queue: str, every: timedelta
) -> None:
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(workflow_type, id=schedule_id, task_queue=task_queue),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    try:
        await client.create_schedule(schedule_id, schedule, rpc_timeout=RPC_TIMEOUT)
    except ScheduleAlreadyRunningError:
        await client.get_schedule_handle(schedule_id).update(
            lambda _: ScheduleUpdate(schedule=schedule), rpc_timeout=RPC_TIMEOUT
        )


async def check_namespace(client: Client) -> None:
    """Ask for the client's namespace, as the SDK does when a worker starts (where a failure
    is fatal); asked first, a frontend that is away can be waited out."""
    await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=client.namespace), timeout=RPC_TIMEOUT
    )


async def register_search_attributes(client: Client) -> None:
    """Make our search attributes filterable (the dev launcher passes them at start)."""
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(namespace=client.namespace, search_attributes=SEARCH_ATTRIBUTES)
    )


async def missing_search_attributes(client: Client) -> list[str]:
    """Register the search attributes the namespace lacks (a cluster upgraded from an older
    pricewatch: a workflow setting an unregistered one fails its task until it exists);
    returns those it could not add, as `NAME (Type)` (the operator API refused, e.g. on
    Temporal Cloud, where a namespace's attributes are set in its own console)."""
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace), timeout=RPC_TIMEOUT
        )
    except RPCError as err:
        if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
            raise  # away: the caller waits for it
        return []  # no operator API to ask: nothing to tell
    missing = {
        name: kind
        for name, kind in SEARCH_ATTRIBUTES.items()
        if name not in listed.custom_attributes
    }
    if not missing:
        return []
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing),
            timeout=RPC_TIMEOUT,
        )
    except RPCError:
        return [
            f"{name} ({IndexedValueType.Name(kind).removeprefix('INDEXED_VALUE_TYPE_').title()})"
            for name, kind in sorted(missing.items())
        ]
    return []


class QueryUnanswered(RPCError):
    """A query had no answer within its timeout: Temporal or the worker it asked (a query
    runs on a worker) did not answer, and which one the client cannot tell."""


class Bounded(Interceptor):
    """Every one-off call the CLI and the API make (start, describe, query, signal, list)
    gives up after RPC_TIMEOUT unless the caller set its own timeout: without one, a frozen
    frontend holds the call until the keepalive closes the connection (up to 45 s). Updates
    (check-now, retry, reconfigure) wait for a check on a worker and keep the keepalive's
    bound; the describe each of them starts with is bounded."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _BoundedCalls(next)


Input = TypeVar(
    "Input", StartWorkflowInput, DescribeWorkflowInput, QueryWorkflowInput, SignalWorkflowInput,
    ListWorkflowsInput,
)  # fmt: skip


def _bounded(input: Input) -> Input:
    return input if input.rpc_timeout else dataclasses.replace(input, rpc_timeout=RPC_TIMEOUT)


class _BoundedCalls(OutboundInterceptor):
    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        return await super().start_workflow(_bounded(input))

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        return await super().describe_workflow(_bounded(input))

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        try:
            return await super().query_workflow(_bounded(input))
        except RPCError as err:
            if err.status not in TIMED_OUT:
                raise
            raise QueryUnanswered(
                f"the query of {input.id} had no answer in time",
                err.status,
                err.raw_grpc_status,
            ) from err

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        await super().signal_workflow(_bounded(input))

    def list_workflows(self, input: ListWorkflowsInput) -> WorkflowExecutionAsyncIterator:
        return super().list_workflows(_bounded(input))


# How a call past its timeout fails: the client's own deadline is CANCELLED ("Timeout
# expired"), the server's DEADLINE_EXCEEDED.
TIMED_OUT = (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED)


def address() -> str:
    """Where `connect` connects (TEMPORAL_ADDRESS, or the profile's): what an error names."""
    return str(ClientConfig.load_client_connect_config().get("target_host", DEFAULT_ADDRESS))


async def connect(runtime: Runtime | None = None, tracing: bool = False) -> Client:
    """Connect using Temporal's environment convention, with the pydantic converter and
    every one-off call bounded (`Bounded`). With `tracing`, OpenTelemetry spans follow
    every start, workflow task and activity (a worker built on this client inherits the
    interceptor)."""
    connect_config = ClientConfig.load_client_connect_config()
    connect_config.setdefault("target_host", DEFAULT_ADDRESS)
    interceptors: list[Interceptor] = [Bounded()]
    if tracing:
        from temporalio.contrib.opentelemetry import TracingInterceptor

        interceptors.append(TracingInterceptor())
    where = connect_config["target_host"]
    try:
        return await asyncio.wait_for(
            Client.connect(
                **connect_config, data_converter=DATA_CONVERTER, runtime=runtime,
                interceptors=interceptors,
            ),
            RPC_TIMEOUT.total_seconds(),
        )  # fmt: skip
    except TimeoutError as err:  # a frozen frontend: connected, never answered
        raise ConnectionError(f"cannot reach Temporal at {where}: no answer in time") from err
    except RuntimeError as err:  # the SDK reports an unreachable server this way
        raise ConnectionError(
            f"cannot reach Temporal at {where} (start `pricewatch dev` or set TEMPORAL_ADDRESS)"
        ) from err


def local_activity_type(event: HistoryEvent) -> str | None:
    """The activity a local-activity marker records (a check's first attempt), else None.
    For readers of histories: the benchmark and the chaos run."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return None
    marker = event.marker_recorded_event_attributes
    data = marker.details.get("data")
    if marker.marker_name != LOCAL_ACTIVITY_MARKER or data is None or not data.payloads:
        return None
    activity_type = json.loads(data.payloads[0].data).get("activity_type")
    return str(activity_type) if activity_type else None
