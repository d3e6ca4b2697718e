"""PRICEWATCH_TRACING: with Temporal's TracingInterceptor on the client (the worker inherits
it), each check is a span with its claim, fetch and commit inside, exported by the SDK's
tracer provider (here an in-memory one)."""

from datetime import timedelta

import asyncpg
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.testing import WorkflowEnvironment

from client.temporal import DATA_CONVERTER, start_monitor
from pricewatch.models import MonitorState
from tests.conftest import PageServer
from tests.helpers import HOUR, new_target, rows, running_worker
from workflows.monitor import MonitorTarget

EXPORTED = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTED))
trace.set_tracer_provider(PROVIDER)


async def test_each_check_is_a_span_with_claim_fetch_and_commit_inside(
    time_skipping_env: WorkflowEnvironment,
    pool: asyncpg.Pool,
    page_server: PageServer,
    task_queue: str,
) -> None:
    traced = Client(
        time_skipping_env.client.service_client,
        namespace=time_skipping_env.client.namespace,
        data_converter=DATA_CONVERTER,
        interceptors=[TracingInterceptor()],
    )
    config = new_target(page_server)
    anchor = (await time_skipping_env.get_current_time()).replace(microsecond=0) + HOUR
    EXPORTED.clear()
    async with running_worker(traced, task_queue, pool):
        handle = await start_monitor(
            traced, MonitorState(config=config, start_at=anchor), task_queue
        )
        await time_skipping_env.sleep(2 * HOUR + timedelta(minutes=1))
        await handle.signal(MonitorTarget.remove)
        await handle.result()
    spans = EXPORTED.get_finished_spans()
    checks = [s for s in spans if s.name == "RunActivity:check_slot"]
    assert len(checks) >= 2, sorted({s.name for s in spans})
    for check in checks:
        inside = [s.name for s in spans if s.parent and s.parent.span_id == check.context.span_id]
        assert inside == ["claim", "fetch", "commit"], inside
    assert {s.context.trace_id for s in spans if s.name == "StartWorkflow:MonitorTarget"} == {
        check.context.trace_id for check in checks
    }, "one trace from the start of the target through each of its checks"
    assert len(await rows(pool, config.target_id)) == 0  # removed with its rows
