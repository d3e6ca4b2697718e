"""How the CLI shows what the client returns: tables for lists (fitted to the terminal; one
row per line when piped, for grep and awk), lines for one record. Scripts use `--json`."""

import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pricewatch.durations import format_duration
from pricewatch.health import Health, SlotCounts
from pricewatch.models import CheckResult, MonitorStatus, PriceSettings, TargetConfig
from pricewatch.periods import unit
from pricewatch.prices import stock_words
from pricewatch.slots import format_slot, format_time
from pricewatch.views import (
    ChannelView,
    DeliveryView,
    PricesRow,
    PriceView,
    Suggested,
    TargetSummary,
    TryView,
)

SPARKS = "▁▂▃▄▅▆▇█"
# C0 and C1 controls, DEL, the line and paragraph separators (a line break to Rich and to
# `splitlines`), and the bidi overrides that reorder a line: page text must not drive the
# terminal (colours, a cleared screen, a rewritten line). A table's cell keeps neither tab
# nor newline either, so that a record stays on one line.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_IN_LINES = re.compile(f"[{_CONTROLS}]")
_IN_A_CELL = re.compile(f"[\t\n{_CONTROLS}]")


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
    """With a PRICES column (the first price, its trend) once any target is in price mode,
    and a TAGS column once any has tags."""
    priced = any(row.prices for row in rows)
    tagged = any(row.tags for row in rows)
    table(
        ["ID", "STATE", "SCHEDULE", "NEXT SLOT", "LAST"]
        + (["PRICES"] if priced else [])
        + (["TAGS"] if tagged else [])
        + ["URL"],
        [
            [
                row.id,
                ("active" if row.enabled else "paused") + (",unhealthy" if row.unhealthy else ""),
                row.schedule,
                format_slot(row.next_slot) + (" overdue" if row.overdue else ""),
                row.last_status or "-",
            ]
            + ([price_summary(row)] if priced else [])
            + ([",".join(row.tags) or "-"] if tagged else [])
            + [row.url]
            for row in rows
        ],
    )


def amount(price: PriceView) -> str:
    """`9.90 EUR`, `9.90 EUR/month`; an amount no price has (stored before 1.9 read them as
    skipped) in scientific notation, not a million digits."""
    written = f"{price.amount:.3e}" if price.amount.adjusted() >= 15 else f"{price.amount:f}"
    return f"{written} {price.currency or ''}".rstrip() + unit(price.period, price.per)


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
    if view.waited:
        print(inert(f"rendered: {view.waited}"))
    if view.prices is not None:
        table(
            ["PRICE", "AMOUNT", "WAS", "STOCK", "READ FROM"],
            [
                [p.name,
                 f"{p.amount.normalize():f} {p.currency or ''}".rstrip() + unit(p.period, p.per),
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
    suggested(view.suggestions)


SHOWN_SUGGESTED = 4  # prices shown of each suggestion: enough to recognise the row


def suggested(suggestions: Sequence[Suggested]) -> None:
    """The ways to read this page's prices (`try` with no price selector), each with what it
    reads: the options to give `add`."""
    if not suggestions:
        return
    print("prices on this page, with the options that read them (`try` them, then `add`):")
    for suggestion in suggestions:
        source = "structured data" if suggestion.price_selector is None else "shown"
        print(inert(f"  {suggestion.options}    ({len(suggestion.prices)} {source})"))
        for p in suggestion.prices[:SHOWN_SUGGESTED]:
            amount = f"{p.amount.normalize():f} {p.currency or ''}".rstrip() + unit(p.period, p.per)
            print(inert(f"      {p.name}: {amount}"))
        if len(suggestion.prices) > SHOWN_SUGGESTED:
            print(f"      ... {len(suggestion.prices) - SHOWN_SUGGESTED} more")


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


def health(report: Health) -> None:
    """`health`: the verdict and its problems, the window's slots (all, then each target with
    a slot not on time, worst first), the skip causes, the workers and the services."""
    print(f"health: {'healthy' if report.healthy else 'unwell'}")
    for problem in report.problems:
        print(inert(f"  - {problem}"))
    schedule = report.schedule
    if schedule is not None:
        window = format_duration(timedelta(seconds=schedule.window_seconds))
        print(f"window: the {window} before {format_time(schedule.at)} (Postgres's clock); "
              f"on time: {schedule.on_time_bound}")  # fmt: skip
        table(
            ["TARGET", "DUE", "ON TIME", "LATE", "SKIPPED", "FAILED", "RETRYING", "PENDING",
             "ON-TIME RATE", "LATENESS P50", "P99", "UNCHECKED"],
            [["(all)", *_counts(schedule.deployment), "-"]]
            + [[t.target_id, *_counts(t), str(t.unchecked_slots)] for t in schedule.troubled],
        )  # fmt: skip
        causes = schedule.deployment.causes()
        if causes:
            print("skipped slots, by cause (a row naming two causes counts under each):")
            for cause, count in causes:
                print(inert(f"  {count:>6}  {cause}"))
    print("workers:")
    table(
        ["TASK QUEUE", "IDENTITY", "POLLS", "LAST POLL", "HEARTBEAT", "LOOP LAG", "STATE"],
        [
            [w.task_queue, w.identity, ",".join(w.polls) or "-",
             format_time(w.last_poll) if w.last_poll else "-",
             format_time(w.last_heartbeat) if w.last_heartbeat else "-",
             f"{w.loop_lag_seconds * 1000:.0f} ms" if w.loop_lag_seconds is not None else "-",
             f"not polling since {format_time(w.not_polling_since)}"
             if w.not_polling_since else "polling"]
            for w in report.workers
        ] or [["-", "(none)", "-", "-", "-", "-", "-"]],
    )  # fmt: skip
    print("services:")
    table(
        ["SERVICE", "ADDRESS", "STATE", "LAST ANSWER"],
        [
            [s.name, s.address, "answers" if s.reachable else (s.error or "unreachable"),
             format_time(s.answered_at) if s.answered_at else "never (this process)"]
            for s in report.services
        ],
    )  # fmt: skip


def _counts(c: SlotCounts) -> list[str]:
    rate = f"{c.on_time_rate:.1%}" if c.on_time_rate is not None else "-"
    p50, p99 = (f"{v:.1f} s" if v is not None else "-"
                for v in (c.lateness_p50_seconds, c.lateness_p99_seconds))  # fmt: skip
    return [str(n) for n in (c.due, c.on_time, c.late, c.skipped, c.failed, c.retrying,
                             c.pending)] + [rate, p50, p99]  # fmt: skip
