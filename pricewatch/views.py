"""What the client returns and the CLI prints, human or `--json`. Each `--json` output is one
of these (or a list of them), and its JSON Schema is committed in docs/schemas/: a change to
a field shows there, and `tests/test_views.py` fails until the schema is regenerated with
`python -m pricewatch.views`. Add fields freely; renaming or removing one breaks scripts."""

import json
import sys
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from pricewatch import periods
from pricewatch.health import Health
from pricewatch.models import CheckResult, MonitorStatus


class View(BaseModel):
    model_config = ConfigDict(frozen=True)


class PriceView(View):
    """One named price as a check read it (price mode)."""

    name: str
    amount: Decimal
    currency: str | None
    period: str | None = None
    """What the amount pays for: `month`, `year`, `week`, `day`, `one-time`; null where the
    page does not say (and in rows recorded before 1.12)."""
    per: str | None = None
    """What it is counted per (`user`, `seat`, `GB`); null where the page does not say."""


class TargetSummary(View):
    """`list`: one per target."""

    id: str
    url: str
    interval_seconds: int
    """A calendar target's: its calendar's smallest spacing."""
    schedule: str = ""
    """As written (1.4): `every 24h`, `weekdays 08:00 Europe/Berlin`."""
    enabled: bool
    unhealthy: bool
    next_slot: datetime
    overdue: bool = False
    """Active, and `next_slot` is further in the past, by Postgres's clock when it answered,
    than the on-time bound (max(10 s, 10% of the interval), as `health` counts): its check
    can no longer be on time (a worker, Temporal or Postgres away, or retries)."""
    last_status: str | None
    """The newest recorded result other than `skipped`; None before the first check."""
    prices: list[PriceView] | None = None
    """Price mode: the prices the newest check read."""
    trend: list[Decimal] = []
    """Price mode: the first price's amount at each of the last checks, oldest first."""
    trends: dict[str, list[Decimal]] = {}
    """Price mode: each named price's amount at each of the last checks, oldest first."""
    tags: list[str] = []
    last_checked: datetime | None = None
    """When the newest check other than `skipped` ran."""
    last_changed: datetime | None = None
    """When the newest recorded change was seen."""
    error: str | None = None
    """The newest check's error, when it failed or is being retried."""


TargetState = Literal["unhealthy", "paused", "retrying", "prices"]
"""What the targets page and `/api/v1/targets?state=` filter by: prices is price mode."""
TargetSort = Literal["id", "next", "checked", "changed", "streak"]
"""What the targets page sorts by: id, next slot, last checked, last changed, failed slots
in a row."""


class TargetsPage(View):
    """One page of `list`: the dashboard's and the API's (its `X-Total-Count`: `total`)."""

    targets: list[TargetSummary]
    total: int


class StatusView(View):
    """`status`: the workflow's own view, slots being retried now, and its history link."""

    status: MonitorStatus
    retrying: list[CheckResult]
    history_url: str


class ChannelView(View):
    """`channels`: where a target's notices go (the secret masked unless asked)."""

    channel_id: str
    kind: str
    destination: str
    secret: str | None
    disabled_reason: str | None


class DeliveryView(View):
    """`deliveries`: one notice to one channel."""

    work_id: str
    notice: str
    channel_id: str
    status: str
    attempt_count: int
    last_error: str | None
    sent_at: datetime | None


class ChangeView(View):
    """`diff`: a recorded change against the snapshot before it, as a unified diff."""

    work_id: str
    previous_work_id: str
    diff: str


class PricesRow(View):
    """`prices`: the prices one slot's check read, oldest slot first."""

    work_id: str
    slot: datetime
    status: str
    prices: list[PriceView]

    def per_month(self) -> "PricesRow":
        """`prices --per month`: each price whose period is known as its amount a month
        (`100 EUR/year` is `8.33 EUR/month`); a one-time price or one without a period as
        it was read."""
        return self.model_copy(update={"prices": [_per_month(p) for p in self.prices]})


class Per(StrEnum):
    """`prices --per` (the API's `?per=`): the period every amount is shown for, where its
    own is known."""

    MONTH = "month"


def _per_month(price: PriceView) -> PriceView:
    monthly = periods.per_month(price.amount, price.period)
    if monthly is None:
        return price
    return price.model_copy(update={"amount": monthly, "period": "month"})


class PriceMoveView(View):
    """One price that moved, in a `price.changed` notice. Amounts are decimal strings; `old`
    is null for a price that appeared, `new` for one that went; `change` and
    `change_percent` are null when there is no amount to compare (or it was 0)."""

    name: str
    old: Decimal | None
    new: Decimal | None
    currency: str | None
    previous_currency: str | None
    change: Decimal | None
    change_percent: Decimal | None
    rules: list[str]
    """The rules this move satisfied; empty if it was not what the notice is for."""
    period: str | None = None
    """The billing period now (`month`, `year`, `week`, `day`, `one-time`; 1.12), where the
    page says. Where it is not `previous_period` (or `per` not `previous_per`), the move is
    a change of period: `change` and `change_percent` are null, it is neither a drop nor a
    rise, and it crosses no threshold."""
    previous_period: str | None = None
    per: str | None = None
    """What it is counted per now (`user`, `seat`, `GB`), where the page says."""
    previous_per: str | None = None


class NoticeBody(View):
    """The JSON body of every webhook (signed per Standard Webhooks) and of every email; the
    variables of an Apprise channel's templates (pricewatch/notices.py). `test`: a notice of
    `pricewatch notify-test` (work id `<target>:test`, status `test`, no hashes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["page.changed", "price.changed", "page.failing", "page.recovered", "test"]
    target_id: str
    url: str
    slot: str
    work_id: str
    status: str
    previous_hash: str | None
    new_hash: str | None
    checked_at: datetime
    error: str | None
    failure_streak: int
    excerpt: str | None
    prices: list[PriceMoveView] | None = None
    """`price.changed` only: every price that moved."""


class TriedPrice(View):
    """`try`: one price the page shows, and where on it the price was read."""

    name: str
    amount: Decimal
    currency: str | None
    regular: Decimal | None
    """The struck-out price beside it (a sale's "was"): never recorded as the price."""
    availability: str | None
    source: str | None
    """`JSON-LD offer 'Pro'`, `microdata price`, `OpenGraph price`, `match 2`."""
    period: str | None = None
    """What the amount pays for: `month`, `year`, `week`, `day`, `one-time`; null where the
    page does not say."""
    per: str | None = None
    """What it is counted per (`user`, `seat`, `GB`); null where the page does not say."""


class Suggested(View):
    """`try` with no price selector: settings that read prices on this page (each was read
    back with them), and what they read."""

    price_selector: str | None
    """None: the page's structured data, which `--prices` alone reads."""
    price_name: str | None
    options: str
    """The options of `add` (and `try`) that read these prices, shell-quoted."""
    prices: list[TriedPrice]


class TryView(View):
    """`try`: what one check of these settings would record now (nothing is written)."""

    url: str
    http_status: int
    body_bytes: int
    result_hash: str
    """The SHA-256 a check would record: of `text`."""
    text: str
    """What is hashed: the page's normalised text, or in price mode the prices' listing."""
    prices: list[TriedPrice] | None
    skipped_values: list[str]
    """Price mode: the values that could not be read, each with why."""
    refused_requests: list[str] = []
    """A rendered page: the requests it made that the guard refused."""
    waited: str | None = None
    """A rendered page: what the browser waited for before reading it, and how long."""
    suggestions: list[Suggested] = []
    """With no price selector (and no text selector): what would read prices on this page,
    the most prices first."""


class ConfigView(View):
    """`config`: the effective settings (secrets masked) and the Temporal connection."""

    settings: dict[str, object]
    temporal: dict[str, str]


# Each command's `--json` output, by command: what the schema files describe.
OUTPUTS: dict[str, TypeAdapter[object]] = {
    "list": TypeAdapter(list[TargetSummary]),
    "status": TypeAdapter(StatusView),
    "history": TypeAdapter(list[CheckResult]),
    "failures": TypeAdapter(list[CheckResult]),
    "channels": TypeAdapter(list[ChannelView]),
    "deliveries": TypeAdapter(list[DeliveryView]),
    "diff": TypeAdapter(ChangeView),
    "config": TypeAdapter(ConfigView),
    "try": TypeAdapter(TryView),
    "prices": TypeAdapter(list[PricesRow]),
    "health": TypeAdapter(Health),
}
# What every channel receives: a schema like the outputs', for receivers.
PAYLOADS: dict[str, TypeAdapter[object]] = {"notice": TypeAdapter(NoticeBody)}
SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schemas"


def schema(name: str) -> str:
    """The JSON Schema of a command's `--json` output or of a payload."""
    shape = OUTPUTS.get(name) or PAYLOADS[name]
    return json.dumps(shape.json_schema(mode="serialization", by_alias=False), indent=2) + "\n"


def dump(command: str, value: object) -> str:
    """The command's `--json` output. It names fields as the code does (`slot`), not by the
    1.2 spellings the models keep on the wire (`scheduled_for`, see `pricewatch.models.Model`):
    a script reads one name per concept."""
    shape = OUTPUTS[command]
    return shape.dump_json(value, indent=2, by_alias=False, context={"views": True}).decode()


def write_schemas(folder: Path = SCHEMAS) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in [*OUTPUTS, *PAYLOADS]:
        (folder / f"{name}.json").write_text(schema(name))
        print(f"wrote {folder / name}.json", file=sys.stderr)


if __name__ == "__main__":
    write_schemas()
