"""Record MonitorTarget histories from a real run, for the replay tests.

Run after a deliberate workflow change that keeps old histories valid, or to add a
history for a new feature: `python -m tests.record_histories`. It starts its own dev
server, Postgres, page server and worker in a temp dir, drives one target through every
message (pause, resume, check-now, reconfigure, a permanent failure, a transient one
retried as a normal activity, continue-as-new, a removal during a backoff) with a
webhook channel told of its changes, a run started with 1.0's run length (300 checks)
that 1.1 shortens, a target in price mode whose rises nobody is told (`--notify-on drop`), a
rendered target checked on the render task queue and a calendar target (1.7: with an
offset) reconfigured to an interval (1.4), then one retention pass (`PruneChecks`) and one
self-watch pass (`WatchSelf`, 1.10), and writes each run's history to
tests/histories/<version>/, the package's version: from 1.0 on every release keeps its
histories there and every later release must replay them.
"""

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from importlib.metadata import version
from pathlib import Path

from aiohttp import web
from temporalio.client import Client, WorkflowHistory

from client.temporal import DATA_CONVERTER, start_monitor
from pricewatch.calendar import Calendar
from pricewatch.models import (
    Channel,
    ChannelKind,
    CheckResult,
    MonitorState,
    MonitorStatus,
    NotifyOn,
    PriceSettings,
    RenderSettings,
    TargetConfig,
)
from pricewatch.names import Update
from pricewatch.policy import LEGACY_RUN_CHECKS, RUN_CHECKS
from pricewatch.settings import Settings
from tests.conftest import LOOPBACK
from workers.embedded import (
    free_port,
    start_embedded_postgres,
    start_temporal_dev_server,
    stop_process,
)
from workers.worker import (
    Activities,
    WorkerTuning,
    build_worker,
    smtp_settings,
    worker_activities,
)
from workflows.monitor import MonitorTarget
from workflows.retention import PruneChecks
from workflows.selfwatch import WatchSelf

HISTORIES = Path(__file__).parent / "histories" / version("pricewatch")
TASK_QUEUE = "record-histories"
RETENTION_RECORDED = "pricewatch-retention-recorded"
SELFWATCH_RECORDED = "pricewatch-selfwatch-recorded"


async def drive(client: Client, activities: Activities, page_url: str) -> list[str]:
    config = TargetConfig(
        target_id="recorded",
        url=page_url,
        interval_seconds=1,
        channels=[Channel(kind=ChannelKind.WEBHOOK, destination=page_url + "hook")],
    )
    async with build_worker(client, TASK_QUEUE, activities, WorkerTuning(sandboxed=True)):
        handle = await start_monitor(
            client,
            MonitorState(config=config, max_checks_per_run=6, min_interval_seconds=1),
            TASK_QUEUE,
        )
        await asyncio.sleep(2.5)
        await handle.signal(MonitorTarget.pause)
        await asyncio.sleep(1.5)
        await handle.signal(MonitorTarget.resume)
        await handle.execute_update("check_now", result_type=CheckResult)
        broken = config.model_copy(update={"url": page_url + "gone"})
        await handle.execute_update(Update.RECONFIGURE, broken, result_type=MonitorStatus)
        await asyncio.sleep(1.5)
        # A 503 once: the local first attempt fails, the retry runs as a normal activity.
        busy = config.model_copy(update={"url": page_url + "busy"})
        await handle.execute_update(Update.RECONFIGURE, busy, result_type=MonitorStatus)
        await asyncio.sleep(3)
        await handle.execute_update(Update.RECONFIGURE, config, result_type=MonitorStatus)
        await asyncio.sleep(5)
        run_ids = [handle.result_run_id]
        latest = (await client.get_workflow_handle(handle.id).describe()).run_id
        run_ids.append(latest)
        # A page that keeps failing, then a removal while its check backs off (1.1: the
        # removal stops the check instead of waiting out its retries).
        down = config.model_copy(update={"url": page_url + "down"})
        await handle.execute_update(Update.RECONFIGURE, down, result_type=MonitorStatus)
        await asyncio.sleep(2)
        await handle.signal(MonitorTarget.remove)
        await client.get_workflow_handle(handle.id).result()
        # A run that 1.0 started (it carries 300 checks per run): 1.1 ends it after
        # RUN_CHECKS checks and the next run carries the new length.
        legacy = config.model_copy(update={"target_id": "recorded-legacy", "channels": []})
        started = await start_monitor(
            client,
            MonitorState(
                config=legacy, max_checks_per_run=LEGACY_RUN_CHECKS, min_interval_seconds=1
            ),
            TASK_QUEUE,
        )
        assert started.result_run_id is not None
        await asyncio.sleep(RUN_CHECKS + 2)
        await started.signal(MonitorTarget.remove)
        await client.get_workflow_handle(started.id).result()
        run_ids.append(f"{started.id}/{started.result_run_id}")
        # Price mode: the price goes up and down; only the drops are told (1.1).
        priced = config.model_copy(
            update={"target_id": "recorded-prices", "url": page_url + "plans",
                    "price_mode": PriceSettings(selector="p", notify_on=NotifyOn.DROP)}
        )  # fmt: skip
        started = await start_monitor(
            client, MonitorState(config=priced, min_interval_seconds=1), TASK_QUEUE
        )
        await asyncio.sleep(RUN_CHECKS - 1)
        await started.signal(MonitorTarget.remove)
        await client.get_workflow_handle(started.id).result()
        run_ids.append(f"{started.id}/{started.result_run_id}")
        # 1.4: a rendered target (every attempt on the render task queue) and a calendar
        # target (its first slot on the calendar, the next minute), each checked, then a
        # calendar reconfigured to an interval.
        async with rendering(client, activities):
            shown = config.model_copy(
                update={"target_id": "recorded-rendered", "url": page_url + "app",
                        "channels": [], "render": RenderSettings(steps=["wait p"]),
                        "price_mode": PriceSettings(selector="p")}
            )  # fmt: skip
            started = await start_monitor(
                client, MonitorState(config=shown, min_interval_seconds=1), TASK_QUEUE
            )
            await asyncio.sleep(6)
            await started.signal(MonitorTarget.remove)
            await client.get_workflow_handle(started.id).result()
            run_ids.append(f"{started.id}/{started.result_run_id}")
        # 1.7: the calendar has an offset (a site's place), so its slots are 3 s past.
        minutely = Calendar.parse("* * * * *", "Europe/Berlin")
        timed = TargetConfig.model_validate(
            {**config.model_dump(exclude={"interval_seconds"}), "target_id": "recorded-calendar",
             "channels": [], "calendar": minutely.model_copy(update={"offset_seconds": 3})}
        )  # fmt: skip
        started = await start_monitor(
            client, MonitorState(config=timed, min_interval_seconds=1), TASK_QUEUE
        )
        await asyncio.sleep(66)  # the first slot: the next whole minute, 3 s past
        await started.execute_update(
            Update.RECONFIGURE,
            config.model_copy(update={"target_id": "recorded-calendar", "channels": []}),
            result_type=MonitorStatus,
        )
        await asyncio.sleep(3)
        await started.signal(MonitorTarget.remove)
        await client.get_workflow_handle(started.id).result()
        run_ids.append(f"{started.id}/{started.result_run_id}")
        # A retention pass, as the hourly Schedule starts one (nothing expired: a fresh
        # database; the shape of the history is what replay checks).
        prune = await client.start_workflow(
            PruneChecks.run, id=RETENTION_RECORDED, task_queue=TASK_QUEUE
        )
        await prune.result()
        # A self-watch pass (1.10), as its Schedule starts one every minute.
        watch = await client.start_workflow(
            WatchSelf.run, id=SELFWATCH_RECORDED, task_queue=TASK_QUEUE
        )
        await watch.result()
    return [r for r in run_ids if r]


@contextlib.asynccontextmanager
async def rendering(client: Client, activities: Activities) -> AsyncIterator[None]:
    """A render worker beside the workflow worker: a Chromium and the render task queue."""
    from workers.worker import browser, build_render_worker

    async with browser(Settings(allow_networks="127.0.0.1/32")) as fetcher:
        checks = activities.checks.fetching_with(fetcher)
        async with build_render_worker(client, TASK_QUEUE, checks, 2):
            yield


def write(path: Path, history: WorkflowHistory) -> None:
    path.write_text(history.to_json())
    print(f"wrote {path} ({len(history.events)} events)")


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="pricewatch-record-") as tmp:
        database_url, postgres = start_embedded_postgres(Path(tmp) / "pgdata")
        port = free_port()
        temporal = start_temporal_dev_server(Path(tmp) / "t.db", port=port, ui_port=None)
        app = web.Application()
        counter = iter(range(1_000_000))
        busy_answered: list[str] = []

        async def page(request: web.Request) -> web.Response:
            if request.path.endswith("down"):
                return web.Response(status=503, text="down")
            if request.path.endswith("gone"):
                return web.Response(status=404, text="gone")
            if request.path.endswith("busy") and not busy_answered:
                busy_answered.append(request.path)
                return web.Response(status=503, headers={"Retry-After": "1"})
            if request.path.endswith("app"):  # written by a script: needs the browser
                script = "setTimeout(() => document.body.innerHTML = '<p>$ 7</p>', 100)"
                return web.Response(text=f"<script>{script}</script>", content_type="text/html")
            if request.path.endswith("plans"):
                price = 5 + next(counter) % 2
                return web.Response(text=f"<p>$ {price}</p>", content_type="text/html")
            return web.Response(text=f"price {next(counter) // 3}")

        app.router.add_get("/{tail:.*}", page)

        async def hook(request: web.Request) -> web.Response:
            return web.Response(status=204)

        app.router.add_post("/hook", hook)
        runner = web.AppRunner(app)
        await runner.setup()
        page_port = free_port()
        await web.TCPSite(runner, "127.0.0.1", page_port).start()
        try:
            client = await Client.connect(f"127.0.0.1:{port}", data_converter=DATA_CONVERTER)
            async with worker_activities(
                database_url, smtp_settings(Settings()), LOOPBACK
            ) as activities:
                run_ids = await drive(client, activities, f"http://127.0.0.1:{page_port}/")
            HISTORIES.mkdir(parents=True, exist_ok=True)
            for index, run_id in enumerate(dict.fromkeys(run_ids)):
                workflow, _, run = run_id.rpartition("/")
                history = await client.get_workflow_handle(
                    workflow or "pricewatch-recorded", run_id=run
                ).fetch_history()
                write(HISTORIES / f"monitor_target_run{index + 1}.json", history)
            prune = await client.get_workflow_handle(RETENTION_RECORDED).fetch_history()
            write(HISTORIES / "prune_checks_run1.json", prune)
            watch = await client.get_workflow_handle(SELFWATCH_RECORDED).fetch_history()
            write(HISTORIES / "watch_self_run1.json", watch)
        finally:
            await runner.cleanup()
            stop_process(temporal)
            postgres.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
