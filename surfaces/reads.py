"""`pricewatch`'s commands that read what was recorded and what runs: list, status, history,
channels, deliveries, prices, diff, screenshot, failures, health. None changes anything."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from client.inputs import BadInput
from pricewatch import views
from pricewatch.health import DEFAULT_WINDOW
from surfaces import terminal
from surfaces.command import (
    UNAVAILABLE,
    app,
    command,
    pricewatch,
    print_json,
)
from surfaces.options import (
    IdArg,
    JsonOpt,
    parse_since,
)

PANEL = "Read what was recorded"  # in `--help`, after the commands that change things


@app.command("list", rich_help_panel=PANEL)
@command
async def list_targets(
    as_json: JsonOpt = False,
    tag: Annotated[
        str | None, typer.Option("--tag", metavar="<tag>", help="Only the targets with this tag.")
    ] = None,
) -> None:
    """List targets with their state, next slot and last result."""
    async with pricewatch() as client:
        rows = (await client.targets(tag=tag)).targets
    if as_json:
        return print_json("list", rows)
    if not rows:
        typer.echo(
            f"no target has the tag {tag!r}"
            if tag
            else "no targets: add one with `pricewatch add <id> <url> --every 24h`"
        )
        return
    terminal.targets(rows)


@app.command(rich_help_panel=PANEL)
@command
async def status(target_id: IdArg, as_json: JsonOpt = False) -> None:
    """Show paused/active, the next slot, the last result and the Temporal UI link."""
    async with pricewatch() as client:
        view = await client.status_view(target_id)
    if as_json:
        return print_json("status", view)
    typer.echo("\n".join(terminal.status(view.status, view.retrying, view.history_url)))


@app.command(rich_help_panel=PANEL)
@command
async def history(
    target_id: IdArg,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="How many slots.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """Recorded checks of a target, newest first: one row per due slot."""
    async with pricewatch() as client:
        results = await client.history(target_id, limit)
    if as_json:
        return print_json("history", results)
    if not results:
        raise BadInput(f"no recorded checks for {target_id!r}")
    terminal.checks(results)


@app.command(rich_help_panel=PANEL)
@command
async def channels(
    target_id: IdArg,
    reveal: Annotated[
        bool, typer.Option(help="Print webhook secrets and Apprise URLs in full.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """A target's notification channels; secrets masked unless --reveal.

    Masked: webhook signing keys, and the credentials inside an Apprise URL (shown as Apprise
    masks them)."""
    async with pricewatch() as client:
        rows = await client.channels(target_id)
    shown = rows if reveal else [terminal.masked(row) for row in rows]
    if as_json:
        return print_json("channels", shown)
    if not rows:
        typer.echo(f"no channels for {target_id!r}: add them with --notify, --webhook, --email")
    else:
        terminal.channels(shown)


@app.command(rich_help_panel=PANEL)
@command
async def deliveries(
    target_id: IdArg,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="How many deliveries.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Each notice per channel, newest first: sent, or failed with the last error."""
    async with pricewatch() as client:
        rows = await client.deliveries(target_id, limit)
    if as_json:
        return print_json("deliveries", rows)
    if not rows:
        typer.echo("no deliveries yet")
    else:
        terminal.deliveries(rows)


@app.command("prices", rich_help_panel=PANEL)
@command
async def price_history(
    target_id: IdArg,
    since: Annotated[
        str, typer.Option(help="From this long ago (7d, 12h) or this date (ISO-8601).")
    ] = "30d",
    limit: Annotated[int, typer.Option(min=1, max=100000, help="At most this many slots.")] = 1000,
    plot: Annotated[
        Path | None, typer.Option(help="Also draw the price history to this PNG file.")
    ] = None,
    per: Annotated[
        views.Per | None,
        typer.Option(
            help="Each amount whose period is known as an amount a month (100 EUR/year is "
            "8.33 EUR/month); one-time prices and those without a period as read."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The prices each check read (price mode), one row per slot, oldest first."""
    start = parse_since(since)
    async with pricewatch() as client:
        rows = await client.prices(target_id, start, limit)
    if per is views.Per.MONTH:
        rows = [row.per_month() for row in rows]
    if plot is not None:
        terminal.plot_prices(target_id, rows, plot)
    if as_json:
        return print_json("prices", rows)
    terminal.prices(rows)
    if plot is not None:
        typer.echo(f"plot: {plot}", err=True)


@app.command(rich_help_panel=PANEL)
@command
async def diff(
    target_id: IdArg,
    work_id: Annotated[
        str | None, typer.Argument(help="A `changed` check (default: the newest).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """What changed: a unified diff of a change against the snapshot before it."""
    async with pricewatch() as client:
        change = await client.change(target_id, work_id)
    if as_json:
        return print_json("diff", change)
    typer.echo(terminal.inert(change.diff))


@app.command(rich_help_panel=PANEL)
@command
async def screenshot(
    work_id: Annotated[str, typer.Argument(help="A rendered check's work id.")],
) -> None:
    """A rendered page's screenshot (PNG) on stdout: `pricewatch screenshot ID:SLOT > shot.png`."""
    if sys.stdout.isatty():
        raise BadInput("the screenshot is a PNG: redirect it to a file (> shot.png)")
    async with pricewatch() as client:
        shot = await client.screenshot(work_id)
    sys.stdout.buffer.write(shot)
    sys.stdout.flush()


@app.command(rich_help_panel=PANEL)
@command
async def failures(
    target_id: Annotated[str | None, typer.Argument(help="Only this target.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="How many slots.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Failed slots (dead letters) and slots still being retried, newest first."""
    async with pricewatch() as client:
        results = await client.failures(target_id, limit)
    if as_json:
        return print_json("failures", results)
    if not results:
        typer.echo("no failed slots")
    else:
        terminal.checks(results, when=True)


@app.command(rich_help_panel=PANEL)
@command
async def health(
    window: Annotated[
        str, typer.Option(help="How far back: 1h, 1d, 7d, or any duration from 1m to 7d.")
    ] = DEFAULT_WINDOW,
    as_json: JsonOpt = False,
) -> None:
    """Is every slot checked on time: the window's slots, the workers, Temporal and Postgres.

    The window's due slots (on time, late, skipped by cause, failed), targets unchecked for 3
    slots, the workers polling each task queue, and whether Temporal and Postgres answer (each
    asked within 5 s). Exit 0 healthy, 1 when something is unwell (each problem one line), 2
    bad input."""
    async with pricewatch() as client:
        report = await client.health(window)
    if as_json:
        print_json("health", report)
    else:
        terminal.health(report)
    if not report.healthy:
        raise typer.Exit(UNAVAILABLE)
