"""How the CLI shows what the client returns: tables for lists (fitted to the terminal; one
row per line when piped, for grep and awk), lines for one record. Scripts use `--json`."""

import re
import sys
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pricewatch.models import CheckResult, MonitorStatus, PriceSettings, TargetConfig
from pricewatch.prices import stock_words
from pricewatch.slots import format_slot
from pricewatch.views import (
    ChannelView,
    DeliveryView,
    PricesRow,
    PriceView,
    TargetSummary,
    TryView,
)

SPARKS = "▁▂▃▄▅▆▇█"
# C0 and C1 controls, DEL, and the bidi overrides that reorder a line: page text must not
# drive the terminal (colours, a cleared screen, a rewritten line). A table's cell keeps
# neither tab nor newline either, nor Unicode's line and paragraph separators (Rich breaks
# a row at them), so that a record stays on one line.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_IN_LINES = re.compile(f"[{_CONTROLS}]")
_IN_A_CELL = re.compile(f"[\t\n\u2028\u2029{_CONTROLS}]")


def inert(text: str, cell: bool = False) -> str:
    """Text from outside (a page, a URL, an error) as the terminal should show it: every
    control character written as its escape (`\\x1b`), so it prints and does nothing. Rich
    markup needs no escaping here: no console of ours reads markup (`console`)."""
    controls = _IN_A_CELL if cell else _IN_LINES
    return controls.sub(lambda found: ascii(found.group())[1:-1], text)


def console(**options: object) -> Console:
    """The CLI's one kind of console: text is shown as given, never read as markup
    (`[/bold]` in a plan's name crashed `list`), emoji codes or highlighted numbers."""
    return Console(markup=False, emoji=False, highlight=False, **options)  # type: ignore[arg-type]


def check(result: CheckResult) -> str:
    """One line per check; a slot still being retried says so, and when it tries again."""
    line = f"{result.work_id}  {result.status.value:<9} attempts={result.attempt_count}"
    if result.result_hash:
        line += f"  sha256={result.result_hash[:12]}"
    if result.next_attempt_at:
        line += f"  next attempt not before {format_slot(result.next_attempt_at)}"
    if result.error_message:
        line += f"  error={result.error_message}"
    return inert(line)


def status(status: MonitorStatus, retrying: list[CheckResult], link: str) -> list[str]:
    config = status.config
    health = f"unhealthy ({status.failure_streak} failed slots in a row)"
    lines = [
        f"target:     {config.target_id}",
        f"url:        {config.url}",
        f"schedule:   {config.schedule}",
        f"timeout:    {fetch_timeout(config)}",
        *([f"prices:     {price_rules(config.price_mode)}"] if config.price_mode else []),
        *([f"rendered:   {'; '.join(config.render.steps) or 'no steps'}"] if config.render else []),
        f"state:      {'paused' if status.paused else 'active'}",
        f"health:     {health if status.unhealthy else 'healthy'}",
        f"next slot:  {format_slot(status.next_slot) if status.next_slot else '-'}",
        f"checks:     {status.checks_completed}",
    ]
    if status.checking:
        lines.append(f"checking:   {format_slot(status.checking)} (in flight)")
    lines += [f"now:        {check(result)}" for result in retrying]
    last = check(status.last_result) if status.last_result else "(no check yet)"
    return [inert(line) for line in [*lines, f"last:       {last}", f"history:    {link}"]]


def fetch_timeout(config: TargetConfig) -> str:
    """`30s`, as `--timeout` set it, or what a target without one gets."""
    if config.timeout_seconds is None:
        return "default (10s per read, 30s in all)"
    return f"{config.timeout_seconds}s"


def price_rules(rules: PriceSettings) -> str:
    """`selector tr.plan (names: th), tell drop below 10`: price mode as `add` set it."""
    source = "structured data" if rules.selector is None else f"selector {rules.selector}"
    if rules.name:
        source += f" (names: {rules.name})"
    tell = [" or ".join(rule.value for rule in rules.notify_on)]
    tell += [f"below {rules.below}"] if rules.below is not None else []
    tell += [f"above {rules.above}"] if rules.above is not None else []
    if rules.min_change_percent is not None:
        tell.append(f"by {rules.min_change_percent}% or more")
    return f"{source}, tell {' '.join(tell)}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a borderless table: fitted to a terminal's width (long cells fold), unbounded
    when piped, so that each record stays on one line."""
    grid = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for header in headers:
        grid.add_column(header, overflow="fold")
    for row in rows:
        grid.add_row(*(inert(text, cell=True) for text in row))
    width = None if sys.stdout.isatty() else 100_000
    console(width=width, soft_wrap=False).print(grid)


def targets(rows: Sequence[TargetSummary]) -> None:
    """With a PRICES column (the first price, its trend) once any target is in price mode."""
    priced = any(row.prices for row in rows)
    table(
        ["ID", "STATE", "SCHEDULE", "NEXT SLOT", "LAST"] + (["PRICES"] if priced else []) + ["URL"],
        [
            [
                row.id,
                ("active" if row.enabled else "paused") + (",unhealthy" if row.unhealthy else ""),
                row.schedule,
                format_slot(row.next_slot),
                row.last_status or "-",
            ]
            + ([price_summary(row)] if priced else [])
            + [row.url]
            for row in rows
        ],
    )


def amount(price: PriceView) -> str:
    """`9.90 EUR`; an amount no price has (stored before 1.9 read them as skipped) in
    scientific notation, not a million digits."""
    written = f"{price.amount:.3e}" if price.amount.adjusted() >= 15 else f"{price.amount:f}"
    return f"{written} {price.currency or ''}".rstrip()


def price_summary(row: TargetSummary) -> str:
    """`Basic 9.90 € ▁▁▅█ (+2 more)`: the first price now, and its last checks."""
    if not row.prices:
        return "-"
    first, more = row.prices[0], len(row.prices) - 1
    text = f"{first.name} {amount(first)} {sparkline(row.trend)}".rstrip()
    return text + (f" (+{more} more)" if more else "")


def sparkline(values: Sequence[Decimal]) -> str:
    """One block character per value, scaled between the lowest and the highest."""
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    if low == high:
        return SPARKS[0] * len(values)
    top = len(SPARKS) - 1
    return "".join(SPARKS[round((v - low) / (high - low) * top)] for v in values)


def prices(rows: Sequence[PricesRow]) -> None:
    """One row per slot, one column per named price (in the order they first appeared)."""
    names = list(dict.fromkeys(price.name for row in rows for price in row.prices))
    table(
        ["SLOT", "STATUS", *names],
        [
            [format_slot(row.slot), row.status]
            + [amount(found[n]) if n in found else "-" for n in names]
            for row in rows
            for found in [{price.name: price for price in row.prices}]
        ],
    )


def tried(view: TryView) -> None:
    """What a check would record: the prices and where each was read, what was skipped, the
    hash; for a text target, the text that is hashed."""
    print(inert(f"{view.url}: HTTP {view.http_status}, {view.body_bytes} bytes"))
    if view.prices is not None:
        table(
            ["PRICE", "AMOUNT", "WAS", "STOCK", "READ FROM"],
            [
                [p.name, f"{p.amount.normalize():f} {p.currency or ''}".rstrip(),
                 f"{p.regular.normalize():f}" if p.regular is not None else "-",
                 stock_words(p.availability) if p.availability else "-", p.source or "-"]
                for p in view.prices
            ],
        )  # fmt: skip
    else:
        lines = view.text.splitlines()
        print(f"text that is hashed ({len(lines)} lines{', first 20' if len(lines) > 20 else ''}):")
        for line in lines[:20]:
            print(f"  {inert(line)}")
    for value in view.skipped_values:
        print(inert(f"skipped: {value}"))
    for request in view.refused_requests:
        print(inert(f"refused request: {request}"))
    print(f"sha256: {view.result_hash}  (nothing was written)")


def plot_prices(target_id: str, rows: Sequence[PricesRow], path: Path) -> None:
    """The price history as a step chart, one line per named price (needs pricewatch[plot])."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as err:
        raise ValueError("--plot needs matplotlib: pip install 'pricewatch[plot]'") from err
    figure, axes = pyplot.subplots(figsize=(10, 5), layout="constrained")
    names = list(dict.fromkeys(price.name for row in rows for price in row.prices))
    for name in names:
        points = [(row.slot, p) for row in rows for p in row.prices if p.name == name]
        currency = points[-1][1].currency or ""
        axes.step(
            [when for when, _ in points],  # type: ignore[arg-type]  # matplotlib takes dates
            [float(p.amount) for _, p in points],
            where="post", marker=".", label=f"{name} ({currency})" if currency else name,
        )  # fmt: skip
    axes.set_title(f"{target_id}: prices per check")
    axes.set_ylabel("amount")
    axes.grid(alpha=0.3)
    axes.legend(loc="best")
    figure.autofmt_xdate()
    try:
        figure.savefig(path, dpi=100)
    finally:
        pyplot.close(figure)


def checks(results: Sequence[CheckResult], when: bool = False) -> None:
    """History or failures: a slot being retried says when it tries again."""
    table(
        ["WORK ID", "STATUS", "ATTEMPTS", "SHA256", "NEXT ATTEMPT", "ERROR"]
        + (["AT"] if when else []),
        [
            [
                r.work_id,
                r.status.value,
                str(r.attempt_count),
                r.result_hash[:12] if r.result_hash else "-",
                format_slot(r.next_attempt_at) if r.next_attempt_at else "-",
                r.error_message or "-",
            ]
            + ([format_slot(r.checked_at)] if when else [])
            for r in results
        ],
    )


def masked(channel: ChannelView) -> ChannelView:
    """The channel as shown without --reveal: the secret's prefix only."""
    if channel.secret is None:
        return channel
    if channel.kind == "apprise":  # the whole URL: its destination column is Apprise's mask
        return channel.model_copy(update={"secret": "*" * 8})
    return channel.model_copy(update={"secret": "whsec_" + "*" * 8})


def channels(rows: Sequence[ChannelView]) -> None:
    table(
        ["CHANNEL", "KIND", "DESTINATION", "SECRET", "DISABLED"],
        [
            [r.channel_id, r.kind, r.destination, r.secret or "-", r.disabled_reason or "-"]
            for r in rows
        ],
    )


def deliveries(rows: Sequence[DeliveryView]) -> None:
    table(
        ["WORK ID", "NOTICE", "CHANNEL", "STATUS", "ATTEMPTS", "LAST ERROR"],
        [
            [
                r.work_id,
                r.notice,
                r.channel_id,
                r.status,
                str(r.attempt_count),
                r.last_error if r.last_error and r.status != "sent" else "-",
            ]
            for r in rows
        ],
    )
