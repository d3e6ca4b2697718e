"""`python -m bench.cadence --runs 10,50,100,300`: what a workflow-cache miss costs at each
continue-as-new cadence (`max_checks_per_run`).

A miss makes the server send the run's whole history and the worker replay it before the
wake-up can go on, so the cost grows with the checks the run already holds. For each cadence
K, one real target (interval 1 s, test-only) runs on a dev server of its own until its second
run continues as new (the first also registers the target); then, from that run's history:
- events per check, the continue-as-new and the next run's first task included;
- worker CPU to replay the whole run (a miss at the end of a run, the worst case) with the
  production worker's settings (no sandbox, activations inline), and per event;
- server CPU to serve that history (a `GetWorkflowExecutionHistory`, what a miss asks for).
A miss in the middle of a run costs about half the end-of-run figure; `bench --cache` measures
the whole fleet. The figures go to docs/performance.md.
"""

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from bench import procs
from bench.report import commit_name
from bench.stack import PAGE
from client.temporal import DATA_CONVERTER, start_monitor, workflow_id
from fetchers.guard import AddressPolicy
from pricewatch.models import MonitorState, TargetConfig
from pricewatch.settings import Settings
from workers.embedded import (
    free_port,
    start_embedded_postgres,
    start_temporal_dev_server,
    stop_process,
)
from workers.payloads import skip_idle_payload_walks
from workers.worker import (
    InlineActivations,
    WorkerTuning,
    build_worker,
    smtp_settings,
    worker_activities,
)
from workflows.monitor import MonitorTarget

TASK_QUEUE = "cadence"
REPLAYS = 5
FETCHES = 20


@dataclass
class Cadence:
    checks_per_run: int
    events_per_run: int
    events_per_check: float
    replay_worker_ms: float
    replay_worker_us_per_event: float
    serve_server_ms: float
    history_kib: float


async def serve_page() -> web.AppRunner:
    app = web.Application()

    async def page(_: web.Request) -> web.Response:
        return web.Response(body=PAGE, content_type="text/html")

    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    return runner


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def finished_run(client: Client, target_id: str, run_id: str, wait: float) -> WorkflowHistory:
    """A run's history, once it has continued as new."""
    run = client.get_workflow_handle(workflow_id(target_id), run_id=run_id)
    deadline = time.monotonic() + wait
    while (await run.describe()).status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{target_id} did not continue as new in {wait:.0f} s")
        await asyncio.sleep(1)
    return await run.fetch_history()


async def steady_run(client: Client, target_id: str, first: str, wait: float) -> WorkflowHistory:
    """The second run: it starts from continue-as-new, as every run after the first does
    (the first also registers the target)."""
    history = await finished_run(client, target_id, first, wait)
    last = history.events[-1].workflow_execution_continued_as_new_event_attributes
    return await finished_run(client, target_id, last.new_execution_run_id, wait)


def second_run_start(history: WorkflowHistory) -> int:
    """Events the next run spends before its first timer: its start and first task."""
    events = 0
    for event in history.events:
        events += 1
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            return events - 1
    return events


async def replay_cpu_ms(history: WorkflowHistory) -> float:
    skip_idle_payload_walks()  # as the worker does
    replayer = Replayer(
        workflows=[MonitorTarget],
        data_converter=DATA_CONVERTER,
        workflow_runner=UnsandboxedWorkflowRunner(),
        workflow_task_executor=InlineActivations(),
    )
    await replayer.replay_workflow(history)  # warm: imports, converters
    started = time.process_time()
    for _ in range(REPLAYS):
        await replayer.replay_workflow(history)
    return (time.process_time() - started) / REPLAYS * 1000


async def serve_cpu_ms(client: Client, server_pid: int, history: WorkflowHistory) -> float:
    handle = client.get_workflow_handle(history.workflow_id, run_id=history.run_id)
    before = procs.cpu_seconds({"server": [server_pid]})["server"]
    for _ in range(FETCHES):
        await handle.fetch_history()
    spent = procs.cpu_seconds({"server": [server_pid]})["server"] - before
    return spent / FETCHES * 1000


async def measure(runs: list[int], root: Path) -> list[Cadence]:
    database_url, postgres = await asyncio.to_thread(start_embedded_postgres, root / "pgdata")
    port = free_port()
    temporal = start_temporal_dev_server(root / "t.db", port=port, ui_port=None)
    page = await serve_page()
    try:
        page_port = free_port()
        await web.TCPSite(page, "127.0.0.1", page_port).start()
        client = await Client.connect(f"127.0.0.1:{port}", data_converter=DATA_CONVERTER)
        histories: dict[int, WorkflowHistory] = {}
        async with (
            worker_activities(
                database_url, smtp_settings(Settings()), AddressPolicy.allowing(["127.0.0.1/32"])
            ) as activities,
            build_worker(client, TASK_QUEUE, activities, WorkerTuning()),
        ):
            first_runs: dict[int, str] = {}
            for k in runs:
                config = TargetConfig(
                    target_id=f"cadence-{k}",
                    url=f"http://127.0.0.1:{page_port}/cadence-{k}",
                    interval_seconds=1,
                )
                state = MonitorState(config=config, max_checks_per_run=k, min_interval_seconds=1)
                handle = await start_monitor(client, state, TASK_QUEUE)
                assert handle.result_run_id is not None
                first_runs[k] = handle.result_run_id
            say(f"checks per run {runs}: two runs each (about {2 * max(runs)} s)")
            for k in runs:
                wait = max(runs) * 3 + 60
                histories[k] = await steady_run(client, f"cadence-{k}", first_runs[k], wait)
            next_runs = {k: await client.get_workflow_handle(workflow_id(f"cadence-{k}"))
                         .fetch_history() for k in runs}  # fmt: skip
        results = []
        for k in runs:
            history = histories[k]
            events = len(history.events)
            overhead = second_run_start(next_runs[k])
            worker_ms = await replay_cpu_ms(history)
            server_ms = await serve_cpu_ms(client, temporal.pid, history)
            results.append(
                Cadence(
                    checks_per_run=k,
                    events_per_run=events,
                    events_per_check=(events + overhead) / k,
                    replay_worker_ms=worker_ms,
                    replay_worker_us_per_event=worker_ms * 1000 / events,
                    serve_server_ms=server_ms,
                    history_kib=len(history.to_json()) / 1024,
                )
            )
        return results
    finally:
        await page.cleanup()
        stop_process(temporal)
        await asyncio.to_thread(postgres.cleanup)


def table(results: list[Cadence]) -> str:
    lines = [
        "checks/run  events/run  events/check  history KiB  worker replay ms (us/event)  "
        "server serve ms"
    ]
    for r in results:
        lines.append(
            f"{r.checks_per_run:>10}  {r.events_per_run:>10}  {r.events_per_check:>12.2f}  "
            f"{r.history_kib:>11.0f}  {r.replay_worker_ms:>16.1f} "
            f"({r.replay_worker_us_per_event:>5.0f})  {r.serve_server_ms:>15.2f}"
        )
    return "\n".join(lines)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cadence",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", default="10,50,100,300", help="checks per run, comma-separated")
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table: stderr)")
    args = parser.parse_args(argv)
    try:
        runs = sorted({int(k) for k in args.runs.split(",")})
    except ValueError:
        parser.error("--runs: comma-separated whole numbers")
    if runs[0] < 1:
        parser.error("--runs: each at least 1")
    root = Path(tempfile.mkdtemp(prefix="pricewatch-bench-cadence-"))
    try:
        results = await measure(runs, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table(results), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        stamp = {"date": datetime.now(UTC).isoformat(), "commit": commit_name()}
        print(json.dumps({**stamp, "cadence": [asdict(r) for r in results]}, indent=2))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
