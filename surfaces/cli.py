"""`pricewatch`: the command line. Errors are one line on stderr; bad input exits 2."""

import asyncio
import contextlib
import os
import shlex
import socket
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import asyncpg
import typer
from rich.progress import Progress
from temporalio.envconfig import ClientConfig

from client import manifest, plans
from client.inputs import BadInput, unreachable_database
from client.plans import Action
from client.pricewatch import Pricewatch
from pricewatch import calendar, views
from pricewatch.durations import format_duration
from pricewatch.models import (
    TargetConfig,
)
from pricewatch.policy import check_timeout
from pricewatch.settings import Settings
from pricewatch.slots import format_slot, work_id
from pricewatch.views import Suggested
from surfaces import (
    reads,  # noqa: F401  (its commands, which only read, join `app`)
    terminal,
)
from surfaces.command import (
    DASHBOARD_PORT,
    UNAVAILABLE,
    app,
    command,
    fail,
    pricewatch,
    print_json,
    print_result,
    settings,
    user_errors,
)
from surfaces.options import (
    AboveOpt,
    AtOpt,
    BelowOpt,
    CronOpt,
    EmailOpt,
    EveryOpt,
    IdArg,
    IgnoreOpt,
    JitterOpt,
    JsonOpt,
    JsonPointerOpt,
    MaxAttemptsOpt,
    MinChangeOpt,
    NotifyBodyOpt,
    NotifyOnOpt,
    NotifyOpt,
    NotifyTitleOpt,
    OnOpt,
    PausedOpt,
    PriceAttrOpt,
    PriceNameOpt,
    PriceSelectorOpt,
    PricesOpt,
    RenderOpt,
    SelectorOpt,
    StepOpt,
    TagOpt,
    TimeoutOpt,
    TzOpt,
    UnhealthyAfterOpt,
    UserAgentOpt,
    WebhookOpt,
    config_of,
    entry_of,
    flag,
)

__all__ = ["app", "main"]  # the app with every command, and the entry point


def first_check(config: TargetConfig, start_at: datetime) -> str:
    """When an add's first check is, as a plan says it: spread apart from its site."""
    if config.calendar is not None:  # on the calendar from its anchor on, as the workflow does
        before = start_at - timedelta.resolution
        first = calendar.slot_after(config.calendar, config.target_id, before)
        return f"first check {format_slot(first)}"
    ahead = start_at - datetime.now(UTC)
    if ahead < timedelta(seconds=2):  # the next whole second, and a sub-second offset
        return "first check now"
    return f"first check in {format_duration(ahead)}"


@app.command()
@command
async def add(
    target_id: IdArg,
    url: Annotated[str, typer.Argument(help="The http(s) page to watch.")],
    every: EveryOpt = None,
    start_at: Annotated[
        str | None, typer.Option(help="First slot (ISO-8601, default: now).")
    ] = None,
    max_attempts: MaxAttemptsOpt = 5,
    unhealthy_after: UnhealthyAfterOpt = 3,
    webhook: WebhookOpt = None,
    email: EmailOpt = None,
    notify: NotifyOpt = None,
    notify_title: NotifyTitleOpt = None,
    notify_body: NotifyBodyOpt = None,
    selector: SelectorOpt = None,
    ignore: IgnoreOpt = None,
    json_pointer: JsonPointerOpt = None,
    user_agent: UserAgentOpt = None,
    fetch_timeout: TimeoutOpt = None,
    prices: PricesOpt = False,
    price_selector: PriceSelectorOpt = None,
    price_name: PriceNameOpt = None,
    price_attr: PriceAttrOpt = None,
    notify_on: NotifyOnOpt = None,
    below: BelowOpt = None,
    above: AboveOpt = None,
    min_change_percent: MinChangeOpt = None,
    rendered: RenderOpt = False,
    step: StepOpt = None,
    cron: CronOpt = None,
    at: AtOpt = None,
    on: OnOpt = None,
    tz: TzOpt = None,
    jitter: JitterOpt = None,
    tag: TagOpt = None,
    paused: PausedOpt = False,
) -> None:
    """Start watching a page (same settings again: no-op; different: reconfigure).

    Any price option turns price mode on: the prices are compared, and the rules say which
    moves are told. The same as `apply` of a file with this one entry."""
    entry = entry_of(target_id, url, dict(locals()))  # the parameters above, nothing else
    async with pricewatch() as client:
        for done in await plans.put(client, entry, said=flag):
            typer.echo(added(done))
        typer.echo(f"history: {client.ui_link(target_id)}")


def added(step: plans.Step) -> str:
    """What `add` did, a line: the target as it is now watched, or that nothing changed."""
    assert step.located is not None
    config = step.located.config
    watched = f"{step.target_id}: {config.url} {config.schedule}"
    if config.timeout_seconds is not None:
        watched += f", timeout {config.timeout_seconds}s"
    if step.action is Action.ADD and step.start_at is not None:
        first = first_check(config, step.start_at)
        return f"added {watched}, {first}" + (" (paused)" if step.located.entry.paused else "")
    return {
        Action.UNCHANGED: f"{step.target_id} already watched with these settings: nothing changed",
        Action.RECONFIGURE: f"reconfigured {watched} ({'; '.join(step.changes)})",
        Action.PAUSE: f"paused {step.target_id}",
        Action.RESUME: f"resumed {step.target_id}",
    }[step.action]


@app.command("try")
@command
async def try_page(
    url: Annotated[str, typer.Argument(help="The http(s) page to read.")],
    every: EveryOpt = None,
    max_attempts: MaxAttemptsOpt = 5,
    unhealthy_after: UnhealthyAfterOpt = 3,
    webhook: WebhookOpt = None,
    email: EmailOpt = None,
    selector: SelectorOpt = None,
    ignore: IgnoreOpt = None,
    json_pointer: JsonPointerOpt = None,
    user_agent: UserAgentOpt = None,
    fetch_timeout: TimeoutOpt = None,
    prices: PricesOpt = False,
    price_selector: PriceSelectorOpt = None,
    price_name: PriceNameOpt = None,
    price_attr: PriceAttrOpt = None,
    notify_on: NotifyOnOpt = None,
    below: BelowOpt = None,
    above: AboveOpt = None,
    min_change_percent: MinChangeOpt = None,
    rendered: RenderOpt = False,
    step: StepOpt = None,
    screenshot: Annotated[
        Path | None,
        typer.Option(help="With --render, write the rendered viewport here (PNG)."),
    ] = None,
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest", help="Print only the `add` command that reads the page's most prices."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Read a page once as `add` with these options would check it; nothing is written.

    Prints what the check would record: the prices and where each was read, what was skipped
    and why, the hash (no Temporal or Postgres needed). With no price selector, also the
    prices the page shows and the options that read each set."""
    config = config_of(entry_of("try", url, dict(locals())))  # the options a target takes
    # The fetch and the readers load for `try` alone (after `locals()`: they are no option).
    from client.trying import Unreadable
    from fetchers.http import FetchError

    async with Pricewatch(Settings()) as client, contextlib.AsyncExitStack() as stack:
        fetcher = None
        if config.render is not None:
            from workers.worker import browser

            fetcher = await stack.enter_async_context(browser(client.settings))
        if screenshot is not None and config.render is None:
            raise BadInput("--screenshot needs --render (a screenshot is of the rendered page)")
        try:
            view, shot = await client.try_page(config, fetcher, screenshot is not None)
        except FetchError as err:
            if isinstance(err, Unreadable) and not as_json:
                terminal.suggested(err.suggestions)
            if suggest and isinstance(err, Unreadable) and err.suggestions:
                return typer.echo(add_command(config, err.suggestions[0]))
            fail(f"a check would fail ({'transient' if err.transient else 'permanent'}): {err}",
                 UNAVAILABLE)  # fmt: skip
    if screenshot is not None and shot is not None:
        screenshot.write_bytes(shot)
    if suggest:
        if not view.suggestions:
            fail("no prices found on the page to suggest a selector for", UNAVAILABLE)
        typer.echo(add_command(config, view.suggestions[0]))
    elif as_json:
        print_json("try", view)
    else:
        terminal.tried(view)
        if screenshot is not None:
            typer.echo(f"screenshot: {screenshot} ({len(shot or b'')} bytes)")


def add_command(config: TargetConfig, suggested: Suggested) -> str:
    """The `add` command of a suggestion: an id from the page's host, the page's own
    rendering, and the options that read the suggested prices."""
    from client.trying import id_for

    target_id = id_for(config.url)
    rendered = ["--render"] if config.render is not None else []
    every = ["--every", format_duration(config.interval)]
    words = ["pricewatch", "add", target_id, config.url, *every, *rendered]
    return f"{shlex.join(words)} {suggested.options}"


@app.command("notify-test")
@command
async def notify_test(
    target_id: IdArg,
    channel: Annotated[
        str | None, typer.Option(metavar="<channel-id>", help="Only this channel (see: channels).")
    ] = None,
) -> None:
    """Send a marked test notice to each channel now and say what each answered.

    Records nothing (no change, no delivery) and disables no channel. Exit 1 if any failed."""
    async with pricewatch() as client:
        answers = await client.notify_test(target_id, channel)
    for view, error in answers:
        where = f"{view.channel_id} ({view.kind}, {view.destination})"
        disabled = f" [disabled: {view.disabled_reason}]" if view.disabled_reason else ""
        said = "sent" if error is None else f"failed: {error}"
        typer.echo(terminal.inert(f"{where}{disabled}: {said}"))
    if any(error is not None for _, error in answers):
        raise typer.Exit(UNAVAILABLE)


@app.command()
@command
async def retry(
    work_id: Annotated[str, typer.Argument(help="A failed slot's work id (see `failures`).")],
) -> None:
    """Re-run one failed slot now, through its workflow, on the same row."""
    async with pricewatch() as client:
        result = await client.retry(work_id)
    if result.already_recorded:
        typer.echo("already recorded, not fetched again:")
    print_result(result)


@app.command()
@command
async def pause(target_id: IdArg) -> None:
    """Stop future checks (a check already running finishes)."""
    async with pricewatch() as client:
        checking = (await client.status(target_id)).checking
        await client.pause(target_id)
    typer.echo(f"paused {target_id}: no more slots fall due until `pricewatch resume`")
    if checking:
        typer.echo(f"the check of {work_id(target_id, checking)} in flight still finishes")


@app.command()
@command
async def resume(target_id: IdArg) -> None:
    """Resume checks on the target's grid; slots that fell due while paused are not checked."""
    async with pricewatch() as client:
        await client.resume(target_id)
    typer.echo(f"resuming {target_id}")


@app.command("check-now")
@command
async def check_now(target_id: IdArg) -> None:
    """Run one extra check now (its own work id; the schedule is not moved)."""
    async with pricewatch() as client:
        print_result(await client.check_now(target_id))


@app.command()
@command
async def remove(target_id: IdArg) -> None:
    """Stop watching a target and delete its recorded checks."""
    async with pricewatch() as client:
        now = await client.status(target_id)
        if checking := now.checking:
            longest = check_timeout(now.config.timeout_seconds)
            typer.echo(
                f"stopping the check of {work_id(target_id, checking)} in flight: a backoff "
                "ends now, an attempt at its next heartbeat (a first attempt finishes, at most "
                f"{format_duration(longest)})"
            )
        typer.echo(f"removing {target_id}: waiting for its workflow to delete its rows ...")
        await client.remove(target_id)
    typer.echo(f"removed {target_id}")


@app.command()
@command
async def prune(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would go; delete nothing.")
    ] = False,
) -> None:
    """Delete check rows past their retention now (the worker does it hourly)."""
    async with pricewatch() as client:
        kept = client.retention()
        policy = (
            f"unchanged, skipped and failed checks older than {format_duration(kept.keep_checks)}, "
            f"changes older than {format_duration(kept.keep_changes)}"
        )
        if not dry_run:
            deleted = await client.prune()
            typer.echo(f"deleted {deleted} check rows: {policy}")
            return
        expired = await client.expired()
    if not expired:
        typer.echo(f"nothing to delete ({policy})")
        return
    total = sum(e.rows for e in expired)
    typer.echo(f"would delete {total} check rows: {policy}")
    for e in expired:
        typer.echo(
            f"  {e.status:<9} {e.rows:>10} rows of {e.targets} targets, "
            f"checked {format_slot(e.oldest)} .. {format_slot(e.newest)}, "
            f"with {e.deliveries} deliveries"
        )
    typer.echo(
        "kept regardless: each target's latest observation and newest snapshot, slots being "
        "retried, changes not yet told, and targets with a check in flight"
    )


PLAN_MARKS = {
    Action.ADD: "+", Action.RECONFIGURE: "~", Action.PAUSE: "=", Action.RESUME: ">",
    Action.REMOVE: "-",
}  # fmt: skip


@app.command()
@command
async def apply(
    path: Annotated[Path, typer.Argument(help="A targets file (see `pricewatch export`).")],
    prune: Annotated[
        bool, typer.Option("--prune", help="Also remove targets the file does not name.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; change nothing.")
    ] = False,
) -> None:
    """Make the targets what the file says: add, reconfigure, pause, resume, remove (--prune).

    Every entry is validated before anything changes."""
    entries = manifest.load(path)
    async with pricewatch() as client:
        steps = await plans.plan(client, entries, prune)
        for step in steps:
            if step.action is not Action.UNCHANGED:
                detail = "; ".join(step.changes)
                if step.action is Action.ADD and step.located and step.start_at is not None:
                    config = step.located.config
                    detail = f"{config.schedule}, {first_check(config, step.start_at)}"
                typer.echo(f"{PLAN_MARKS[step.action]} {step.action.value} {step.target_id}"
                           + (f" ({detail})" if detail else ""))  # fmt: skip
        todo = [step for step in steps if step.action is not Action.UNCHANGED]
        counts = Counter(step.action for step in steps)
        summary = ", ".join(f"{counts[a]} to {a.value}" for a in PLAN_MARKS if counts[a])
        unchanged = f"{counts[Action.UNCHANGED]} unchanged"
        typer.echo(
            f"plan: {summary}, {unchanged}" if summary else f"plan: nothing to do ({unchanged})"
        )
        if dry_run or not todo:
            return
        started = time.monotonic()
        with Progress(console=terminal.console(stderr=True), transient=True) as progress:
            bar = progress.add_task("applying", total=len(todo))
            await plans.apply(client, todo, lambda _: progress.advance(bar))
    changes = f"{len(todo)} change{'' if len(todo) == 1 else 's'}"
    typer.echo(f"applied {changes} in {time.monotonic() - started:.1f} s")


@app.command()
@command
async def export() -> None:
    """Every target as a targets file: `pricewatch export > targets.yaml` round-trips."""
    async with pricewatch() as client:
        current = await plans.current(client)
    typer.echo(manifest.dump([current[t] for t in sorted(current)]), nl=False)


def as_typed(value: object) -> str:
    """A setting as its variable takes it: `true`, not `True`; unset is `-`, not `None`."""
    if value is None or value == "":
        return "-"
    return str(value).lower() if isinstance(value, bool) else str(value)


@app.command()
def config(as_json: JsonOpt = False) -> None:
    """The effective settings (secrets masked) and where the Temporal client will connect."""
    with user_errors():
        current = settings()
        effective = current.model_dump(mode="json")
        for key, value in current:  # durations as they are typed (90d, 15m), not ISO 8601
            if isinstance(value, timedelta):
                effective[key] = format_duration(value)
        for key, value in effective.items():
            if "password" in key and value:
                effective[key] = "********"
            elif key == "database_url" and value and urlsplit(value).password:
                effective[key] = value.replace(f":{urlsplit(value).password}@", ":********@")
        connect = ClientConfig.load_client_connect_config()
        temporal = {
            "TEMPORAL_ADDRESS": str(connect.get("target_host", "localhost:7233")),
            "TEMPORAL_NAMESPACE": str(connect.get("namespace", "default")),
            "TEMPORAL_API_KEY": "********" if connect.get("api_key") else "-",
            "TEMPORAL_TLS": "on" if connect.get("tls") else "off",
        }
        if as_json:
            return print_json("config", views.ConfigView(settings=effective, temporal=temporal))
        for key, value in sorted(effective.items()):
            typer.echo(f"PRICEWATCH_{key.upper():<30} {as_typed(value)}")
        for key, value in temporal.items():
            typer.echo(f"{key:<41} {value}")


@app.command()
@command
async def migrate() -> None:
    """Apply pending database migrations (safe to run concurrently)."""
    from activities.migrate import migrate as apply

    url = settings().resolved_database_url()
    try:
        conn = await asyncpg.connect(url)
    except (OSError, TimeoutError) as err:
        raise unreachable_database(url, err) from err
    try:
        applied = await apply(conn)
    finally:
        await conn.close()
    typer.echo(f"applied: {', '.join(applied)}" if applied else "schema up to date")


@app.command()
@command
async def worker(
    render: Annotated[
        bool,
        typer.Option(
            "--render",
            help="Check only the pages that need a browser (task queue <queue>-render), with "
            "Chromium (PRICEWATCH_RENDER=true).",
        ),
    ] = False,
) -> None:
    """Run a worker (Temporal from TEMPORAL_* variables, Postgres from PRICEWATCH_DATABASE_URL)."""
    from workers.worker import run_worker

    chosen = settings()
    await run_worker(chosen.model_copy(update={"render": True}) if render else chosen)


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(help="Address to listen on; beyond loopback needs PRICEWATCH_API_TOKEN.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = DASHBOARD_PORT,
) -> None:
    """Serve the dashboard and the HTTP API (/api/v1) over this deployment's targets."""
    from surfaces import web

    with user_errors():
        server = web.server(settings(), host, port)
        bound = web.listen(host, port)
        typer.echo(f"dashboard: http://{host}:{port}/ (HTTP API: /api/v1, /api/v1/openapi.json)")
        server.run(sockets=[bound])


@app.command()
def dev(
    demo: Annotated[
        bool, typer.Option(help="Also serve a local pricing page and watch it.")
    ] = False,
    temporal_port: Annotated[int, typer.Option(help="Temporal dev server port.")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal UI port.")] = 8233,
    demo_port: Annotated[int, typer.Option(help="Demo pricing page port.")] = 8099,
    dashboard_port: Annotated[
        int, typer.Option(help="Dashboard and HTTP API port (on 127.0.0.1).")
    ] = DASHBOARD_PORT,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Every log line, not just one per check.")
    ] = False,
) -> None:
    """Run the whole embedded stack in the foreground: Temporal, Postgres, a worker."""
    from surfaces import web
    from workers.dev import DevPorts, Sidecar, run_dev

    bound: list[socket.socket] = []

    def listen() -> None:
        bound.append(web.listen("127.0.0.1", dashboard_port))

    async def dashboard(effective: Settings, stop: asyncio.Event) -> None:
        server = web.server(effective, "127.0.0.1", dashboard_port, embedded=True)
        serving = asyncio.create_task(server.serve(sockets=bound))
        await stop.wait()
        server.should_exit = True
        await serving

    with user_errors():
        ports = DevPorts(temporal=temporal_port, ui=ui_port, demo=demo_port)
        sidecar = Sidecar(f"http://127.0.0.1:{dashboard_port}/", listen, dashboard)
        run_dev(settings(), demo=demo, ports=ports, verbose=verbose, sidecar=sidecar)


def main() -> None:
    try:
        app()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: the Temporal client's native threads can abort a finalizing
    # interpreter (temporalio/sdk-python#300), which would turn success into exit 134.
    os._exit(code)
