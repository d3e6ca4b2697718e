"""`pricewatch dev`: the whole embedded stack in the foreground.

Starts the Temporal dev server (SQLite file and UI), an embedded Postgres (unless
`PRICEWATCH_DATABASE_URL` is set), the migrations and a worker, all persistent in the data
dir, so a second run resumes every target with its history. Ctrl-C stops what it started.
"""

import asyncio
import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from client.temporal import ensure_retention_schedule, start_monitor
from pricewatch.models import MonitorState, PriceSettings, RenderSettings, TargetConfig
from pricewatch.names import render_queue
from pricewatch.settings import (
    DEV_ALLOW_NETWORKS_FILE,
    DEV_UI_URL_FILE,
    EMBEDDED_DATABASE_URL_FILE,
    Settings,
)
from pricewatch.slots import spread_anchor
from workers.chromium import ChromiumMissing
from workers.embedded import start_embedded_postgres, start_temporal_dev_server, stop_process
from workers.lifeline import start_ticks
from workers.lifeline import stop as stop_guarded
from workers.observability import (
    configure_dev_console,
    configure_tracing,
    core_runtime,
    heartbeating,
    watching_loop_lag,
    watching_temporal,
)
from workers.worker import (
    Stopping,
    WorkerTuning,
    address_policy,
    browser,
    build_render_worker,
    build_worker,
    retention_settings,
    smtp_settings,
    stop_on_signals,
    temporal_when_up,
    worker_activities,
)


@dataclass(frozen=True)
class DevPorts:
    temporal: int = 7233
    ui: int = 8233
    demo: int = 8099


@dataclass(frozen=True)
class Sidecar:
    """A server the stack runs beside its worker (the dashboard, from the CLI above us):
    `listen()` binds its port once the data dir is ours (a second `dev` on it is told so,
    not that the port is in use), before anything starts; `run(settings, stop)` serves
    until `stop` is set."""

    url: str
    listen: Callable[[], None]
    run: Callable[[Settings, asyncio.Event], Coroutine[Any, Any, None]]


DEV_SQLITE_PRAGMAS = (
    "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
)  # fmt: skip
# The dev stack watches local pages (the demo, your own test servers) on loopback only.
DEV_ALLOW_NETWORKS = "127.0.0.1/32"
DEMO_TARGET = "demo-pricing"
DEMO_PLANS_TARGET = "demo-plans"
DEMO_RENDERED_TARGET = "demo-app"
# Demo only: far below PRICEWATCH_MIN_INTERVAL, so a newcomer sees a change within minutes.
DEMO_INTERVAL_SECONDS = 20
DEMO_PRICE_PERIOD_SECONDS = 120
DEMO_BUSY_RETRY_AFTER_SECONDS = 10
# The plan table: one plan's price moves each period, in turn (a rise, later a drop back).
DEMO_PLANS = {"Small": Decimal("4.49"), "Medium": Decimal("8.99"), "Large": Decimal("17.99")}


CENT = Decimal("0.01")


def demo_plan_prices(period: int) -> dict[str, Decimal]:
    """Each plan is up by 10% in every other of its turns."""
    return {
        name: (base * Decimal("1.1")).quantize(CENT) if (period - turn) // 3 % 2 else base
        for turn, (name, base) in enumerate(DEMO_PLANS.items())
    }


def demo_plans_page(period: int) -> str:
    """Three plans in a table, and the same prices as JSON-LD offers (what price mode reads)."""
    prices = demo_plan_prices(period)
    offers = [
        {"@type": "Offer", "name": name, "price": f"{price:.2f}", "priceCurrency": "EUR"}
        for name, price in prices.items()
    ]
    structured = {"@context": "https://schema.org", "@type": "Product", "name": "Demo Cloud",
                  "offers": offers}  # fmt: skip
    rows = "".join(f"<tr><th>{name}</th><td>EUR {p:.2f}</td></tr>" for name, p in prices.items())
    return (
        f'<html><head><script type="application/ld+json">{json.dumps(structured)}</script>'
        f"</head><body><h1>Demo Cloud plans</h1><table>{rows}</table></body></html>"
    )


def demo_app_page(period: int) -> str:
    """The same plans, put on the page by a script after load (a single-page app): only a
    rendered check sees them."""
    plans = json.dumps({name: f"{price:.2f}" for name, price in demo_plan_prices(period).items()})
    return (
        '<html><body><h1>Demo Cloud app</h1><div id="plans">loading...</div><script>'
        f"const plans = {plans};"
        "setTimeout(() => { document.getElementById('plans').innerHTML = Object.entries(plans)"
        ".map(([n, p]) => `<p class=\"plan\"><b>${n}</b> EUR ${p}</p>`).join(''); }, 300);"
        "</script></body></html>"
    )


class DemoPricingPage(BaseHTTPRequestHandler):
    """A pricing page whose price moves every two minutes, a plan table (`/plans`), and two
    pages that fail, to watch from a second terminal: `/busy` is overloaded (503 with a
    Retry-After: transient, tried again), any other path is gone (404: permanent)."""

    def do_GET(self) -> None:
        period = int(datetime.now(UTC).timestamp()) // DEMO_PRICE_PERIOD_SECONDS
        price = 4 + period % 5
        status, headers = 200, {}
        if self.path == "/":
            body = (
                "<html><body><h1>Demo Cloud</h1>"
                f"<p>Small server: <b>EUR {price}.49</b> per month</p></body></html>"
            )
        elif self.path == "/plans":
            body = demo_plans_page(period)
        elif self.path == "/app":
            body = demo_app_page(period)
        elif self.path == "/busy":
            status, headers = 503, {"retry-after": str(DEMO_BUSY_RETRY_AFTER_SECONDS)}
            body = "<html><body><h1>Busy: try again later</h1></body></html>"
        else:
            status, body = 404, "<html><body><h1>No such page</h1></body></html>"
        data = body.encode()
        self.send_response(status)
        for name, value in {**headers, "content-type": "text/html; charset=utf-8"}.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the worker's output is the interesting part."""


@contextlib.contextmanager
def demo_page(port: int) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", port), DemoPricingPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.shutdown()
        server.server_close()


async def serve(
    settings: Settings,
    database_url: str,
    demo_url: str | None,
    verbose: bool,
    sidecar: Sidecar | None = None,
) -> None:
    configure_dev_console(verbose)
    if settings.tracing:
        configure_tracing()
    stop = stop_on_signals()
    try:
        runtime = core_runtime()
        client = await temporal_when_up(stop, settings.tracing, runtime)
    except Stopping:
        print("stopping...", flush=True)
        return
    tuning = WorkerTuning.from_settings(settings)
    async with (
        worker_activities(
            database_url,
            smtp_settings(settings),
            address_policy(settings),
            settings.snapshot_retention,
            tuning.pool_size,
            retention_settings(settings),
        ) as activities,
        build_worker(client, settings.task_queue, activities, tuning),
        contextlib.AsyncExitStack() as rendering,
        watching_temporal(client),
        watching_loop_lag(runtime) as watch,  # a stalled loop, said in one line as `worker` does
    ):
        renders = False
        try:  # the render task queue too, where a Chromium can be had
            fetcher = await rendering.enter_async_context(browser(settings))
            checks = activities.checks.fetching_with(fetcher)
            await rendering.enter_async_context(
                build_render_worker(
                    client, settings.task_queue, checks, settings.render_concurrency, tuning
                )
            )
            print(f"render:    {render_queue(settings.task_queue)} (pages that need a browser)")
            renders = True
        except ChromiumMissing as missing:
            print(f"render:    off, {missing}: targets added with --render wait", flush=True)
        polled = [settings.task_queue, *([render_queue(settings.task_queue)] if renders else [])]
        await rendering.enter_async_context(
            heartbeating(watch, activities.checks.pool, client.identity, polled)
        )
        await ensure_retention_schedule(client, settings.task_queue)
        if demo_url:
            demos = [
                TargetConfig(target_id=DEMO_TARGET, url=demo_url,
                             interval_seconds=DEMO_INTERVAL_SECONDS),
                TargetConfig(target_id=DEMO_PLANS_TARGET, url=f"{demo_url}plans",
                             interval_seconds=DEMO_INTERVAL_SECONDS, price_mode=PriceSettings()),
            ]  # fmt: skip
            if renders:  # the plans a script writes: only a browser sees them
                demos.append(TargetConfig(
                    target_id=DEMO_RENDERED_TARGET, url=f"{demo_url}app",
                    interval_seconds=DEMO_INTERVAL_SECONDS,
                    price_mode=PriceSettings(selector="p.plan", name="b"),
                    render=RenderSettings(steps=["wait p.plan"]),
                ))  # fmt: skip
            for config in demos:
                # Anchored as `pricewatch add` does.
                anchor = spread_anchor(config.target_id, datetime.now(UTC))
                state = MonitorState(
                    config=config, start_at=anchor, min_interval_seconds=DEMO_INTERVAL_SECONDS
                )
                await start_monitor(client, state, settings.task_queue)
            print(
                f"demo:      watching {demo_url} as {DEMO_TARGET!r} and its plan table "
                f"(price mode) as {DEMO_PLANS_TARGET!r}, every {DEMO_INTERVAL_SECONDS}s; a "
                f"price moves every {DEMO_PRICE_PERIOD_SECONDS // 60} min. Try `pricewatch "
                f"prices {DEMO_PLANS_TARGET}`"
                + (f" or {sidecar.url}targets/{DEMO_PLANS_TARGET}" if sidecar else "")
                + ". Pages that fail, to add yourself: "
                f"{demo_url}busy (503, transient), {demo_url}gone (404, permanent)."
                + (
                    f" The same plans written by a script ({demo_url}app) are rendered as "
                    f"{DEMO_RENDERED_TARGET!r}."
                    if renders
                    else ""
                ),
                flush=True,
            )
        served: asyncio.Task[None] | None = None
        if sidecar is not None:
            served = asyncio.create_task(sidecar.run(settings, stop))
            print(f"dashboard: {sidecar.url} (HTTP API: {sidecar.url}api/v1)", flush=True)
        print(
            "worker:    running; one line per check below"
            + ("" if verbose else " (--verbose: every log line)")
            + ". Ctrl-C stops everything started here.",
            flush=True,
        )
        await stop.wait()
        if served is not None:
            await served
    print("stopping...", flush=True)


# What this data dir's `pricewatch dev` runs: a lock held while it runs, and the servers it
# started (name: [pid, start ticks]), removed when it stops cleanly.
DEV_LOCK_FILE = "dev.lock"
DEV_PIDS_FILE = "dev.pids.json"


@contextlib.contextmanager
def data_dir_lock(data_dir: Path) -> Iterator[None]:
    """One `pricewatch dev` per data dir: a second would share its servers' files (and
    take the first one's servers for a killed run's). The kernel lets go of the lock when
    its holder dies, however it dies."""
    with open(data_dir / DEV_LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise ValueError(
                f"another `pricewatch dev` (pid {holder}) runs on {data_dir}: stop it first, or "
                "give this one its own PRICEWATCH_DATA_DIR"
            ) from None
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield


@dataclass
class Started:
    """The servers this run started, on file while it runs (`stop_stale` reads it)."""

    path: Path

    def note(self, name: str, pid: int) -> None:
        recorded = _read_pids(self.path)
        recorded[name] = [pid, start_ticks(pid)]
        self.path.write_text(json.dumps(recorded) + "\n")

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


def _read_pids(path: Path) -> dict[str, list[int | None]]:
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def stop_stale(data_dir: Path) -> None:
    """Stop the servers a killed `pricewatch dev` of this data dir left running (its file
    of them is still there), with one line. The lock is ours, so no live run owns them;
    a recorded pid counts only if the process has the start time recorded with it (not
    one that reused the pid). Usually its lifeline stopped them already."""
    path = data_dir / DEV_PIDS_FILE
    recorded = _read_pids(path)
    left = [
        (name, pid, ticks)
        for name, (pid, ticks) in recorded.items()
        if pid is not None and ticks is not None and start_ticks(pid) == ticks
    ]
    if left:
        names = ", ".join(f"its {name} (pid {pid})" for name, pid, _ in left)
        print(f"stale:     a killed `pricewatch dev` left {names} running: stopping", flush=True)
        stop_guarded([(pid, ticks) for _, pid, ticks in left])
    path.unlink(missing_ok=True)


def run_dev(
    settings: Settings,
    *,
    demo: bool,
    ports: DevPorts = DevPorts(),
    verbose: bool = False,
    sidecar: Sidecar | None = None,
) -> None:
    if not settings.allow_networks:
        settings = settings.model_copy(update={"allow_networks": DEV_ALLOW_NETWORKS})
    print(
        f"fetch guard: private addresses refused except {settings.allow_networks} "
        "(PRICEWATCH_ALLOW_NETWORKS)",
        flush=True,
    )
    data_dir = settings.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"data dir:  {data_dir}", flush=True)
    with contextlib.ExitStack() as stack:
        stack.enter_context(data_dir_lock(data_dir))
        if sidecar is not None:
            sidecar.listen()
        stop_stale(data_dir)
        started = Started(data_dir / DEV_PIDS_FILE)
        stack.callback(started.forget)
        if settings.database_url:
            database_url = settings.database_url
            print("postgres:  PRICEWATCH_DATABASE_URL", flush=True)
        else:
            database_url, server = start_embedded_postgres(data_dir / "pgdata")
            stack.callback(server.cleanup)
            if pid := server.get_pid():
                started.note("Postgres", pid)
            url_file = data_dir / EMBEDDED_DATABASE_URL_FILE
            url_file.write_text(database_url + "\n")
            stack.callback(url_file.unlink, missing_ok=True)
            allowed_file = data_dir / DEV_ALLOW_NETWORKS_FILE
            allowed_file.write_text(settings.allow_networks + "\n")
            stack.callback(allowed_file.unlink, missing_ok=True)
            print(f"postgres:  embedded, {database_url}", flush=True)
        temporal = start_temporal_dev_server(
            data_dir / "temporal.db",
            port=ports.temporal,
            ui_port=ports.ui,
            binary=settings.temporal_bin,
            log_file=data_dir / "temporal.log",
            # SQLite's default journal is the dev server's first ceiling; WAL nearly doubles
            # throughput at the cost of the last commits on power loss: fine for development.
            extra_args=DEV_SQLITE_PRAGMAS,
        )
        stack.callback(stop_process, temporal)
        started.note("Temporal server", temporal.pid)
        os.environ["TEMPORAL_ADDRESS"] = f"127.0.0.1:{ports.temporal}"
        print(
            f"temporal:  127.0.0.1:{ports.temporal} (log {data_dir / 'temporal.log'})", flush=True
        )
        ui_url = f"http://localhost:{ports.ui}"
        ui_file = data_dir / DEV_UI_URL_FILE  # the CLI's links in a second terminal
        ui_file.write_text(ui_url + "\n")
        stack.callback(ui_file.unlink, missing_ok=True)
        print(f"ui:        {ui_url}", flush=True)
        demo_url = stack.enter_context(demo_page(ports.demo)) if demo else None
        asyncio.run(serve(settings, database_url, demo_url, verbose, sidecar))
