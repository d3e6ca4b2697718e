"""The options `add` and `try` share (and the other commands' few), written once, and the
target settings they make: any price option turns price mode on."""

import contextlib
from datetime import UTC, datetime
from typing import Annotated

import typer

from client.channels import apprise_channel
from client.inputs import BadInput, valid_id
from pricewatch import calendar
from pricewatch.calendar import Calendar
from pricewatch.durations import parse_duration
from pricewatch.models import (
    FETCH_TIMEOUT_RANGE,
    Channel,
    ChannelKind,
    NotifyOn,
    PriceSettings,
    RenderSettings,
    TargetConfig,
)
from pricewatch.policy import MAX_FETCH_TIMEOUT, MIN_FETCH_TIMEOUT


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


def parse_timeout(text: str | None) -> int | None:
    """`--timeout 30s`: whole seconds within the bounds, else one line naming the option."""
    if text is None:
        return None
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError:
        seconds = None
    if seconds is None or not (
        MIN_FETCH_TIMEOUT.total_seconds() <= seconds <= MAX_FETCH_TIMEOUT.total_seconds()
    ):
        raise BadInput(f"invalid --timeout {text!r}: use {FETCH_TIMEOUT_RANGE}, e.g. 30s")
    return int(seconds)


def parse_since(text: str) -> datetime:
    """`7d` (that long ago) or an ISO-8601 moment."""
    with contextlib.suppress(ValueError):
        return datetime.now(UTC) - parse_duration(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as err:
        raise BadInput(
            f"invalid --since {text!r}: use a duration (7d, 12h) or ISO-8601 (2026-11-01)"
        ) from err
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


IdArg = Annotated[str, typer.Argument(help="Target id (a slug, e.g. hetzner-cloud-pricing).")]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="JSON for scripts (schema: docs/schemas/<command>.json).")
]


# The options `add` and `try` share: a target's settings, as `add` takes them.
EveryOpt = Annotated[
    str | None, typer.Option("--every", help="Cadence, e.g. 15m, 1h, 24h (default 24h).")
]
CronOpt = Annotated[
    str | None,
    typer.Option(help="Slots at local times instead, as cron writes them: '0 8 * * 1-5'."),
]
AtOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--at", metavar="<HH:MM>", help="Slots at this local time, e.g. 08:00 (repeatable)."
    ),
]
OnOpt = Annotated[
    str | None,
    typer.Option(help="With --at: the days, e.g. mon-fri, sat,sun, weekdays (default daily)."),
]
TzOpt = Annotated[
    str | None,
    typer.Option("--tz", help="With --cron or --at: the IANA time zone (default UTC)."),
]
JitterOpt = Annotated[
    str | None,
    typer.Option(help="With --cron or --at: shift each slot by a fixed amount below this."),
]
MaxAttemptsOpt = Annotated[
    int, typer.Option(help="Fetch attempts per slot on transient errors (1-20).")
]
UnhealthyAfterOpt = Annotated[
    int, typer.Option(help="Failed slots in a row that make the target unhealthy.")
]
WebhookOpt = Annotated[
    list[str] | None, typer.Option(metavar="<url>", help="Webhook URL to notify (repeatable).")
]
EmailOpt = Annotated[
    list[str] | None, typer.Option(metavar="<address>", help="Address to notify (repeatable).")
]
NotifyOpt = Annotated[
    list[str] | None,
    typer.Option(
        metavar="<apprise-url>",
        help="Any Apprise URL to notify: slack://, msteams://, discord://, tgram://, ntfy://, "
        "matrix://, gotify://, json://, ... (repeatable; stored only in Postgres).",
    ),
]
NotifyTitleOpt = Annotated[
    str | None,
    typer.Option(metavar="<template>", help="Title template of the --notify channels (Jinja)."),
]
NotifyBodyOpt = Annotated[
    str | None,
    typer.Option(
        metavar="<template>",
        help="Body template of the --notify channels, e.g. '{{ target }}: {{ headline }}' "
        "(variables: docs/notifications.md).",
    ),
]
SelectorOpt = Annotated[
    str | None, typer.Option(help="CSS selector: only the matched text counts (HTML).")
]
IgnoreOpt = Annotated[
    str | None, typer.Option(help="Regex removed before hashing (tokens, timestamps).")
]
JsonPointerOpt = Annotated[
    str | None, typer.Option(help="RFC 6901 pointer: only that value counts (JSON).")
]
UserAgentOpt = Annotated[str | None, typer.Option(help="User-Agent for this target.")]
TimeoutOpt = Annotated[
    str | None,
    typer.Option(
        "--timeout",
        help=f"How long the page may take, {FETCH_TIMEOUT_RANGE} (default: 10s per read, "
        "30s in all).",
    ),
]
PricesOpt = Annotated[
    bool,
    typer.Option(
        "--prices", help="Price mode: compare the page's prices (structured data), not text."
    ),
]
PriceSelectorOpt = Annotated[
    str | None, typer.Option(help="Price mode: CSS selector, each match one price.")
]
PriceNameOpt = Annotated[
    str | None, typer.Option(help="CSS selector inside each price match: its name.")
]
PriceAttrOpt = Annotated[
    str | None,
    typer.Option(help="Read each price match's attribute (content, data-price), not its text."),
]
NotifyOnOpt = Annotated[
    list[NotifyOn] | None,
    typer.Option(
        metavar="<rule>",
        help="Price mode: which moves are told: price-change (default), drop, rise, "
        "any-change, back-in-stock, out-of-stock; repeatable (drop and back-in-stock).",
    ),
]
BelowOpt = Annotated[
    str | None, typer.Option(help="Price mode: tell when a price falls below this.")
]
AboveOpt = Annotated[
    str | None, typer.Option(help="Price mode: tell when a price rises above this.")
]
RenderOpt = Annotated[
    bool,
    typer.Option("--render", help="Load the page in Chromium first (a render worker checks it)."),
]
TagOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tag", metavar="<tag>",
        help="A group it belongs to (repeatable): a short slug; `list --tag` filters by it.",
    ),
]  # fmt: skip
StepOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--step",
        metavar="<step>",
        help="With --render, before reading (repeatable, in order): 'click CSS', 'wait CSS', "
        "'wait 2s', 'select CSS=VALUE', 'fill CSS=TEXT', 'press KEY', 'scroll'.",
    ),
]
MinChangeOpt = Annotated[
    str | None, typer.Option(help="Price mode: tell only moves of at least N percent.")
]


def calendar_of(
    cron: str | None, at: list[str] | None, on: str | None, tz: str | None, jitter: str | None
) -> Calendar | None:
    """The calendar `--cron` or `--at`/`--on` asks for, in `--tz`, with `--jitter`."""
    spread = None if jitter is None else int(parse_duration(jitter).total_seconds())
    return calendar.written(cron, at, on, tz, spread)


def target_config(
    target_id: str, url: str, every: str | None, max_attempts: int, unhealthy_after: int,
    webhook: list[str] | None, email: list[str] | None, selector: str | None,
    ignore: str | None, json_pointer: str | None, user_agent: str | None,
    fetch_timeout: str | None, prices: bool, price_selector: str | None,
    price_name: str | None, price_attr: str | None, notify_on: list[NotifyOn] | None,
    below: str | None, above: str | None, min_change_percent: str | None,
    rendered: bool = False, step: list[str] | None = None, grid: Calendar | None = None,
    notify: list[str] | None = None, notify_title: str | None = None,
    notify_body: str | None = None, tags: list[str] | None = None,
) -> TargetConfig:  # fmt: skip
    """A target's settings from `add`'s options: any price option turns price mode on."""
    if (notify_title or notify_body) and not notify:
        raise BadInput("--notify-title and --notify-body shape the --notify channels: give one")
    price_options = {
        "selector": price_selector, "name": price_name, "attribute": price_attr,
        "notify_on": notify_on or None, "below": below, "above": above,
        "min_change_percent": min_change_percent,
    }  # fmt: skip
    given = {key: value for key, value in price_options.items() if value is not None}
    if step and not rendered:
        raise BadInput("--step needs --render (steps run in the browser)")
    if grid is not None and every is not None:
        raise BadInput("--every and a calendar (--cron, --at) are two schedules: pick one")
    schedule: dict[str, object] = (
        {"calendar": grid}
        if grid is not None
        else {
            "interval_seconds": int(
                parse_duration("24h" if every is None else every).total_seconds()
            )
        }
    )
    return TargetConfig(
        target_id=valid_id(target_id),
        url=url,
        **schedule,
        max_attempts=max_attempts,
        unhealthy_after=unhealthy_after,
        channels=[Channel(kind=ChannelKind.WEBHOOK, destination=url) for url in webhook or []]
        + [Channel(kind=ChannelKind.EMAIL, destination=address) for address in email or []]
        + [apprise_channel(url, notify_title, notify_body) for url in notify or []],
        selector=selector,
        ignore=ignore,
        json_pointer=json_pointer,
        user_agent=user_agent,
        price_mode=PriceSettings.model_validate(given) if prices or given else None,
        timeout_seconds=parse_timeout(fetch_timeout),
        render=RenderSettings(steps=step or []) if rendered else None,
        tags=tags or [],
    )
