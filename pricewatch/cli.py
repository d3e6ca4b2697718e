"""`pricewatch`: the command line. Errors are one line on stderr; bad input exits 2."""

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from datetime import UTC, datetime
from functools import wraps
from typing import Annotated, Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

import asyncpg
import typer
from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.envconfig import ClientConfig
from temporalio.service import RPCError, RPCStatusCode

from activities.guard import AddressPolicy, BlockedAddress, check_url
from activities.normalise import Extraction, validate_extraction
from pricewatch.durations import format_duration, parse_duration
from pricewatch.models import (
    Channel,
    ChannelKind,
    CheckResult,
    CheckStatus,
    MonitorState,
    MonitorStatus,
    RetryRequest,
    TargetConfig,
)
from pricewatch.settings import Settings
from pricewatch.slots import format_slot, spread_anchor
from pricewatch.temporal import connect, start_monitor, workflow_id

app = typer.Typer(
    help="Watch pages on a schedule; record one result per due slot; say when they change.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

P = ParamSpec("P")
R = TypeVar("R")

BAD_INPUT = 2
UNAVAILABLE = 1


class BadInput(Exception):
    """The user asked for something invalid: exit 2, nothing changed."""


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn expected failures into one line on stderr: bad input exits 2, an unreachable
    or failing service exits 1."""
    try:
        yield
    except (BadInput, ValidationError, ValueError, BlockedAddress) as err:
        fail(_one_line(err), BAD_INPUT)
    except (RPCError, OSError, LookupError, TimeoutError, asyncpg.PostgresError) as err:
        fail(f"{type(err).__name__}: {_one_line(err)}", UNAVAILABLE)
    except WorkflowFailureError as err:
        fail(f"the workflow failed: {_one_line(err.cause)}", UNAVAILABLE)
    except WorkflowUpdateFailedError as err:  # the workflow's validator refused the request
        fail(f"refused by the workflow: {_one_line(err.cause)}", BAD_INPUT)


def command(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an async command with `user_errors`."""

    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        with user_errors():
            asyncio.run(fn(*args, **kwargs))

    return run


def fail(message: str, code: int) -> None:
    typer.echo(f"pricewatch: {message}", err=True)
    raise typer.Exit(code)


def _one_line(err: BaseException | None) -> str:
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def settings() -> Settings:
    return Settings()


async def read_database(query: Callable[[asyncpg.Pool], Awaitable[R]]) -> R:
    """Run one read against Postgres with a short-lived pool (the CLI's only DB access)."""
    pool = await asyncpg.create_pool(settings().resolved_database_url(), min_size=1, max_size=1)
    try:
        return await query(pool)
    finally:
        await pool.close()


def parse_start_at(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as err:
        raise BadInput(
            f"invalid --start-at {text!r}: use ISO-8601, e.g. 2026-08-07T08:00Z"
        ) from err
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def ui_link(client: Client, target_id: str) -> str:
    return f"{settings().ui_url}/namespaces/{client.namespace}/workflows/{workflow_id(target_id)}"


async def running_handle(client: Client, target_id: str) -> WorkflowHandle[Any, Any]:
    """The target's open workflow, or BadInput if there is none."""
    handle = client.get_workflow_handle(workflow_id(target_id))
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            raise BadInput(f"unknown target {target_id!r}") from err
        raise
    if description.status is not WorkflowExecutionStatus.RUNNING:
        raise BadInput(f"unknown target {target_id!r} (its workflow is no longer running)")
    return handle


async def target_workflow(target_id: str) -> tuple[Client, WorkflowHandle[Any, Any]]:
    """Check the id, connect, and find the target's open workflow (BadInput if none)."""
    valid_id(target_id)
    client = await connect()
    return client, await running_handle(client, target_id)


def valid_id(target_id: str) -> str:
    TargetConfig(target_id=target_id, url="http://example.com", interval_seconds=1)
    return target_id


def print_result(result: CheckResult) -> None:
    typer.echo(describe(result))


def describe(result: CheckResult) -> str:
    """One line per check; a slot still being retried says so, and when it tries again."""
    line = f"{result.work_id}  {result.status.value:<9} attempts={result.attempt_count}"
    if result.result_hash:
        line += f"  sha256={result.result_hash[:12]}"
    if result.next_attempt_at:
        line += f"  next attempt not before {format_slot(result.next_attempt_at)}"
    if result.error_message:
        line += f"  error={result.error_message}"
    return line


def print_status(status: MonitorStatus, retrying: list[CheckResult], link: str) -> None:
    config = status.config
    typer.echo(f"target:     {config.target_id}")
    typer.echo(f"url:        {config.url}")
    typer.echo(f"every:      {format_duration(config.interval)}")
    typer.echo(f"state:      {'paused' if status.paused else 'active'}")
    health = f"unhealthy ({status.failure_streak} failed slots in a row)"
    typer.echo(f"health:     {health if status.unhealthy else 'healthy'}")
    next_slot = format_slot(status.next_slot) if status.next_slot else "-"
    typer.echo(f"next slot:  {next_slot}")
    typer.echo(f"checks:     {status.checks_completed}")
    for result in retrying:
        typer.echo(f"now:        {describe(result)}")
    if status.last_result:
        typer.echo("last:       ", nl=False)
        print_result(status.last_result)
    else:
        typer.echo("last:       (no check yet)")
    typer.echo(f"history:    {link}")


IdArg = Annotated[str, typer.Argument(help="Target id (a slug, e.g. hetzner-cloud-pricing).")]


@app.command()
@command
async def add(
    target_id: IdArg,
    url: Annotated[str, typer.Argument(help="The http(s) page to watch.")],
    every: Annotated[str, typer.Option("--every", help="Cadence, e.g. 15m, 1h, 24h.")] = "24h",
    start_at: Annotated[
        str | None, typer.Option(help="First due slot (ISO-8601, default: now).")
    ] = None,
    max_attempts: Annotated[
        int, typer.Option(help="Fetch attempts per slot on transient errors (1-20).")
    ] = 5,
    unhealthy_after: Annotated[
        int, typer.Option(help="Failed slots in a row that make the target unhealthy.")
    ] = 3,
    webhook: Annotated[
        list[str] | None, typer.Option(help="Webhook URL to notify (repeatable).")
    ] = None,
    email: Annotated[list[str] | None, typer.Option(help="Address to notify (repeatable).")] = None,
    selector: Annotated[
        str | None, typer.Option(help="CSS selector: only the matched text counts (HTML).")
    ] = None,
    ignore: Annotated[
        str | None, typer.Option(help="Regex removed before hashing (tokens, timestamps).")
    ] = None,
    json_pointer: Annotated[
        str | None, typer.Option(help="RFC 6901 pointer: only that value counts (JSON).")
    ] = None,
    user_agent: Annotated[str | None, typer.Option(help="User-Agent for this target.")] = None,
) -> None:
    """Start watching a page (same settings again: no-op; different: reconfigure)."""
    valid_id(target_id)
    config = TargetConfig(
        target_id=target_id,
        url=url,
        interval_seconds=int(parse_duration(every).total_seconds()),
        max_attempts=max_attempts,
        unhealthy_after=unhealthy_after,
        channels=[Channel(kind=ChannelKind.WEBHOOK, destination=url) for url in webhook or []]
        + [Channel(kind=ChannelKind.EMAIL, destination=address) for address in email or []],
        selector=selector,
        ignore=ignore,
        json_pointer=json_pointer,
        user_agent=user_agent,
    )
    validate_extraction(Extraction(selector=selector, ignore=ignore, json_pointer=json_pointer))
    minimum = settings().min_interval
    if config.interval < minimum:
        raise BadInput(
            f"interval {every} is below the minimum {format_duration(minimum)} "
            "(PRICEWATCH_MIN_INTERVAL)"
        )
    # The grid's anchor, decided here once: the first registration records it, and every
    # later start or reset of the workflow adopts the recorded one.
    anchor = parse_start_at(start_at) or spread_anchor(target_id, datetime.now(UTC))
    policy = AddressPolicy.allowing(settings().allow_networks.split(","))
    for destination in [url, *(webhook or [])]:
        await check_url(policy, destination)
    client = await connect()
    try:
        handle = await running_handle(client, target_id)
    except BadInput:
        handle = None
    if handle is None:
        await start_monitor(
            client,
            MonitorState(
                config=config,
                start_at=anchor,
                min_interval_seconds=int(minimum.total_seconds()),
            ),
            settings().task_queue,
        )
        typer.echo(f"added {target_id}: {url} every {format_duration(config.interval)}")
    else:
        status = await handle.query("status", result_type=MonitorStatus)
        if status.config == config:
            typer.echo(f"{target_id} already watched with these settings: nothing changed")
        else:
            await handle.execute_update("reconfigure", config, result_type=MonitorStatus)
            typer.echo(f"reconfigured {target_id}: {url} every {format_duration(config.interval)}")
    typer.echo(f"history: {ui_link(client, target_id)}")


@app.command("list")
@command
async def list_targets() -> None:
    """List targets with their state, next slot and last result."""
    from activities.store import list_targets as fetch_targets

    rows = await read_database(fetch_targets)
    if not rows:
        typer.echo("no targets: add one with `pricewatch add <id> <url> --every 24h`")
        return
    for row in rows:
        state = ("active" if row["enabled"] else "paused") + (
            ",unhealthy" if row["unhealthy"] else ""
        )
        every = format_duration(parse_duration(f"{row['interval_seconds']}s"))
        last = row["last_status"] or "-"
        typer.echo(
            f"{row['id']:<24} {state:<16} every {every:<8} next {format_slot(row['next_check_at'])}"
            f"  last {last:<9} {row['url']}"
        )


@app.command()
@command
async def status(target_id: IdArg) -> None:
    """Show paused/active, the next due slot, the last result and the Temporal UI link."""
    from activities.store import failed_checks

    client, handle = await target_workflow(target_id)
    result = await handle.query("status", result_type=MonitorStatus)
    unsettled = await read_database(lambda pool: failed_checks(pool, target_id, limit=10))
    retrying = [r for r in unsettled if r.status is CheckStatus.RETRYING]
    print_status(result, retrying, ui_link(client, target_id))


@app.command()
@command
async def history(
    target_id: IdArg,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="How many slots.")] = 20,
) -> None:
    """Recorded checks of a target, newest first: one row per due slot."""
    from activities.store import check_history

    valid_id(target_id)
    results = await read_database(lambda pool: check_history(pool, target_id, limit))
    if not results:
        raise BadInput(f"no recorded checks for {target_id!r}")
    for result in results:
        print_result(result)


@app.command()
@command
async def channels(
    target_id: IdArg,
    reveal: Annotated[bool, typer.Option(help="Print webhook secrets in full.")] = False,
) -> None:
    """A target's notification channels; webhook secrets masked unless --reveal."""
    from activities.store import target_channels

    valid_id(target_id)
    rows = await read_database(lambda pool: target_channels(pool, target_id))
    if not rows:
        typer.echo(f"no channels for {target_id!r}: add them with --webhook / --email")
    for row in rows:
        secret = row["secret"] or ""
        shown = secret if reveal or not secret else "whsec_" + "*" * 8
        line = f"{row['channel_id']:<18} {row['kind']:<8} {row['destination']}"
        if secret:
            line += f"  secret={shown}"
        if row["disabled_reason"]:
            line += f"  DISABLED ({row['disabled_reason']})"
        typer.echo(line)


@app.command()
@command
async def deliveries(
    target_id: IdArg,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="How many deliveries.")] = 50,
) -> None:
    """Each notice per channel, newest first: sent, or failed with the last error."""
    from activities.store import target_deliveries

    valid_id(target_id)
    rows = await read_database(lambda pool: target_deliveries(pool, target_id, limit))
    if not rows:
        typer.echo("no deliveries yet")
    for row in rows:
        line = (
            f"{row['work_id']}  {row['notice']:<9} {row['channel_id']:<18} "
            f"{row['status']:<7} attempts={row['attempt_count']}"
        )
        if row["last_error"] and row["status"] != "sent":
            line += f"  error={row['last_error']}"
        typer.echo(line)


@app.command()
@command
async def diff(
    target_id: IdArg,
    work_id: Annotated[
        str | None, typer.Argument(help="A `changed` check (default: the newest).")
    ] = None,
) -> None:
    """What changed: a unified diff of a change against the snapshot before it."""
    from activities.snapshots import decompress, unified_diff
    from activities.store import snapshots_for_diff

    valid_id(target_id)
    row = await read_database(lambda pool: snapshots_for_diff(pool, target_id, work_id))
    if row is None:
        which = f"change {work_id!r}" if work_id else "change"
        raise BadInput(f"no recorded {which} with a snapshot for {target_id!r}")
    if row["previous_snapshot"] is None:
        raise BadInput(f"no snapshot before {row['work_id']} (pruned by the retention setting)")
    typer.echo(
        unified_diff(
            decompress(row["previous_snapshot"]),
            decompress(row["snapshot"]),
            row["previous_work_id"],
            row["work_id"],
        )
    )


@app.command()
@command
async def failures(
    target_id: Annotated[str | None, typer.Argument(help="Only this target.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="How many slots.")] = 50,
) -> None:
    """Failed slots (dead letters) and slots still being retried, newest first."""
    from activities.store import failed_checks

    if target_id is not None:
        valid_id(target_id)
    results = await read_database(lambda pool: failed_checks(pool, target_id, limit))
    if not results:
        typer.echo("no failed slots")
    for result in results:
        typer.echo(f"{describe(result)}  at={format_slot(result.checked_at)}")


@app.command()
@command
async def retry(
    work_id: Annotated[str, typer.Argument(help="A failed slot's work id (see `failures`).")],
) -> None:
    """Re-run one failed slot now, through its workflow, on the same row."""
    from activities.store import check_target, stored_check

    async def lookup(pool: asyncpg.Pool) -> tuple[CheckResult | None, str | None]:
        return await stored_check(pool, work_id), await check_target(pool, work_id)

    stored, target_id = await read_database(lookup)
    if stored is None or target_id is None:
        raise BadInput(f"unknown work id {work_id!r}")
    client = await connect()
    handle = await running_handle(client, target_id)
    request = RetryRequest(scheduled_for=stored.scheduled_for, kind=stored.kind)
    result = await handle.execute_update("retry_slot", request, result_type=CheckResult)
    if result.already_recorded:
        typer.echo("already recorded, not fetched again:")
    print_result(result)


@app.command()
@command
async def pause(target_id: IdArg) -> None:
    """Stop future checks (a check already running finishes)."""
    _, handle = await target_workflow(target_id)
    await handle.signal("pause")
    typer.echo(f"pausing {target_id}")


@app.command()
@command
async def resume(target_id: IdArg) -> None:
    """Resume checks on the target's grid; slots that fell due while paused are not checked."""
    _, handle = await target_workflow(target_id)
    await handle.signal("resume")
    typer.echo(f"resuming {target_id}")


@app.command("check-now")
@command
async def check_now(target_id: IdArg) -> None:
    """Run one extra check now (its own work id; the schedule is not moved)."""
    _, handle = await target_workflow(target_id)
    result = await handle.execute_update("check_now", result_type=CheckResult)
    print_result(result)


@app.command()
@command
async def remove(target_id: IdArg) -> None:
    """Stop watching a target and delete its recorded checks."""
    _, handle = await target_workflow(target_id)
    await handle.signal("remove")
    try:
        await asyncio.wait_for(handle.result(), timeout=120)
    except TimeoutError as err:
        raise TimeoutError(
            f"{target_id} will be removed when a worker picks it up (none did in 120 s)"
        ) from err
    typer.echo(f"removed {target_id}")


@app.command()
def config() -> None:
    """The effective settings (secrets masked) and where the Temporal client will connect."""
    with user_errors():
        effective = settings().model_dump(mode="json")
        for key, value in sorted(effective.items()):
            if "password" in key and value:
                value = "********"
            elif key == "database_url" and value and urlsplit(value).password:
                value = value.replace(f":{urlsplit(value).password}@", ":********@")
            typer.echo(f"PRICEWATCH_{key.upper():<30} {value}")
        temporal = ClientConfig.load_client_connect_config()
        typer.echo(f"{'TEMPORAL_ADDRESS':<41} {temporal.get('target_host', 'localhost:7233')}")
        typer.echo(f"{'TEMPORAL_NAMESPACE':<41} {temporal.get('namespace', 'default')}")
        typer.echo(f"{'TEMPORAL_API_KEY':<41} {'********' if temporal.get('api_key') else '-'}")
        typer.echo(f"{'TEMPORAL_TLS':<41} {'on' if temporal.get('tls') else 'off'}")


@app.command()
@command
async def migrate() -> None:
    """Apply pending database migrations (safe to run concurrently)."""
    from activities.migrate import migrate as apply

    conn = await asyncpg.connect(settings().resolved_database_url())
    try:
        applied = await apply(conn)
    finally:
        await conn.close()
    typer.echo(f"applied: {', '.join(applied)}" if applied else "schema up to date")


@app.command()
@command
async def worker() -> None:
    """Run a worker (Temporal from TEMPORAL_* variables, Postgres from PRICEWATCH_DATABASE_URL)."""
    from workers.worker import run_worker

    await run_worker(settings())


@app.command()
def dev(
    demo: Annotated[
        bool, typer.Option(help="Also serve a local pricing page and watch it.")
    ] = False,
    temporal_port: Annotated[int, typer.Option(help="Temporal dev server port.")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal UI port.")] = 8233,
    demo_port: Annotated[int, typer.Option(help="Demo pricing page port.")] = 8099,
) -> None:
    """Run the whole embedded stack in the foreground: Temporal, Postgres, a worker."""
    from workers.dev import DevPorts, run_dev

    with user_errors():
        ports = DevPorts(temporal=temporal_port, ui=ui_port, demo=demo_port)
        run_dev(settings(), demo=demo, ports=ports)


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
