"""The options `add` and `try` share (and the other commands' few), written once, and the
targets-file entry they make (`entry_of`): `add` applies it, `try` reads its page."""

import contextlib
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from client.inputs import BadInput
from client.manifest import Entry, field_error
from pricewatch.durations import parse_duration
from pricewatch.models import FETCH_TIMEOUT_RANGE, NotifyOn, TargetConfig


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


PausedOpt = Annotated[
    bool, typer.Option("--paused", help="Watch it paused: no checks until `resume`.")
]

# An entry's field as `add` takes it, where that is not `--` and the field's name.
FLAGS = {
    "id": "target id", "url": "url", "webhooks": "--webhook", "emails": "--email",
    "steps": "--step", "tags": "--tag", "prices": "price mode",
    "prices.selector": "--price-selector", "prices.name": "--price-name",
    "prices.attribute": "--price-attr", "notify.title": "--notify-title",
    "notify.body": "--notify-body", "notify.url": "--notify",
}  # fmt: skip


def flag(field: str) -> str:
    """An entry's field as `add`'s option: `webhooks.0` is --webhook, `prices.below` --below."""
    name = ".".join(part for part in field.split(".") if not part.isdigit())
    return FLAGS.get(name) or "--" + name.split(".")[-1].replace("_", "-")


# `add`'s and `try`'s options that are a target's settings, by the entry's key they fill
# (the others are the price options, --notify's templates and the command's own).
AS_ENTRY = {
    "every": "every", "start_at": "start_at", "max_attempts": "max_attempts",
    "unhealthy_after": "unhealthy_after", "webhook": "webhooks", "email": "emails",
    "selector": "selector", "ignore": "ignore", "json_pointer": "json_pointer",
    "user_agent": "user_agent", "fetch_timeout": "timeout", "rendered": "render",
    "step": "steps", "cron": "cron", "at": "at", "on": "on", "tz": "tz", "jitter": "jitter",
    "tag": "tags", "paused": "paused",
}  # fmt: skip
PRICE_OPTIONS = {
    "price_selector": "selector", "price_name": "name", "price_attr": "attribute",
    "notify_on": "notify_on", "below": "below", "above": "above",
    "min_change_percent": "min_change_percent",
}  # fmt: skip


def entry_of(target_id: str, url: str, options: dict[str, Any]) -> Entry:
    """The targets-file entry `add`'s (or `try`'s) options ask for: what `apply` would read
    of the same settings. Any price option turns price mode on; a bad option is BadInput
    naming its flag."""
    if (options.get("notify_title") or options.get("notify_body")) and not options.get("notify"):
        raise BadInput("--notify-title and --notify-body shape the --notify channels: give one")
    given = {k: v for k, v in options.items() if v is not None and v is not False and v != []}
    data: dict[str, Any] = {AS_ENTRY[key]: value for key, value in given.items() if key in AS_ENTRY}
    for key in ("every", "timeout", "jitter"):  # the command line's spaces are not the value
        if isinstance(data.get(key), str):
            data[key] = data[key].strip()
    if "start_at" in data:
        data["start_at"] = parse_start_at(data["start_at"])
    prices = {PRICE_OPTIONS[key]: value for key, value in given.items() if key in PRICE_OPTIONS}
    if prices or given.get("prices"):
        data["prices"] = prices
    templates = {"title": given.get("notify_title"), "body": given.get("notify_body")}
    if "notify" in given:
        data["notify"] = [{"url": url, **templates} for url in given["notify"]]
    try:
        return Entry.model_validate({"id": target_id, "url": url, **data})
    except ValidationError as err:
        raise BadInput(field_error(err, flag)) from err


def config_of(entry: Entry) -> TargetConfig:
    """The settings `entry_of`'s entry asks for; BadInput naming the flag that cannot be."""
    try:
        return entry.config(flag)
    except ValidationError as err:
        raise BadInput(field_error(err, flag)) from err
    except ValueError as err:
        raise BadInput(str(err).splitlines()[0]) from err
