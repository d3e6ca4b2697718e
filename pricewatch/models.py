"""One pydantic model per Temporal boundary: workflow input, messages, activity calls.

Every field added later must carry a default, so histories recorded with older
shapes still decode. Models are side-effect free so the workflow sandbox can import them.
"""

import contextlib
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Annotated

from pydantic import (
    AfterValidator,
    AliasChoices,
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from pricewatch.calendar import Calendar, CalendarGrid, describe, spacing_seconds
from pricewatch.durations import format_duration
from pricewatch.policy import MAX_FETCH_TIMEOUT, MIN_FETCH_TIMEOUT, RUN_CHECKS
from pricewatch.slots import Grid, IntervalGrid, work_id
from pricewatch.steps import parse_steps
from pricewatch.urls import as_typed

MAX_INTERVAL_SECONDS = 366 * 24 * 3600  # a year: well inside the int4 column
FETCH_TIMEOUT_RANGE = (
    f"{MIN_FETCH_TIMEOUT.total_seconds():.0f}s to {MAX_FETCH_TIMEOUT.total_seconds():.0f}s"
)
TARGET_ID_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
# A tag names a group (`--tag`, `/groups/TAG`): a short slug, so it is a path segment as is.
TAG_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$")
MAX_TAGS = 10


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("datetime must carry a time zone")
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]

# The times a user may name: a first slot (`start_at`), a page of the record (`before`,
# `since`). From the grid's epoch to a date far enough ahead that a slot plus a year's
# interval, an offset and a jitter still fits Python's datetime and Postgres' timestamptz
# (year 1 and 9999 overflow both once a grid is added: issue 40).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


def in_range(value: datetime) -> datetime:
    """`value` in UTC (a naive one read as UTC), or ValueError saying the range."""
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    with contextlib.suppress(OverflowError):  # year 1 east of UTC, 9999 west of it: out
        moment = moment.astimezone(UTC)
        if EARLIEST <= moment < LATEST:
            return moment
    raise ValueError(
        f"must be from {EARLIEST:%Y-%m-%d} to before {LATEST:%Y-%m-%d} (UTC), "
        f"not {value.isoformat()}"
    )


class Model(BaseModel):
    # Unknown fields are ignored, not refused: a field dropped in a later version must not
    # stop old histories from decoding. A field renamed in 1.3 reads its new name and its
    # 1.2 spelling and writes the 1.2 spelling (`serialization_alias`): payloads, histories
    # and the config in Postgres stay readable by 1.2 workers during a rolling upgrade
    # (docs/operations.md, "Renames ledger"). Code uses the new name only.
    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class ChannelKind(StrEnum):
    WEBHOOK = "webhook"
    EMAIL = "email"
    APPRISE = "apprise"
    """Any Apprise URL (1.5): Slack, Teams, Discord, Telegram, ntfy, Matrix, ..."""


EMAIL_PATTERN = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
STORED_PATTERN = re.compile(r"^apprise-([0-9a-f]{12})$")


class Channel(Model):
    """Where notices go. Its id is derived from what it is, so re-adding the same channel
    keeps its id (and its secret, which lives only in Postgres).

    An Apprise URL carries its service's credentials, so it never enters a workflow's input:
    the client stores it in Postgres first (`notify_urls`), and the channel names it by the
    stored row's `ref`, with the URL as Apprise masks it for people in `destination`."""

    kind: ChannelKind
    destination: str
    ref: str | None = None
    """Apprise: the stored URL's key (its channel id is `apprise-<ref>`)."""
    title: str | None = None
    """Apprise: the title template (pricewatch.notices); None: the default."""
    body: str | None = None
    """Apprise: the body template; None: the default."""
    url: str | None = Field(default=None, exclude=True, repr=False)
    """Apprise: the URL as given, before the client stores it; never serialized."""

    @field_validator("destination")
    @classmethod
    def _destination(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        if info.data.get("kind") is ChannelKind.APPRISE:
            return value  # Apprise's own masked form (activities.services)
        if info.data.get("kind") is ChannelKind.EMAIL:
            if not EMAIL_PATTERN.fullmatch(value):
                raise ValueError(f"not an email address: {value!r}")
            return value
        parsed = AnyHttpUrl(value)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError("webhook must be an absolute http(s) URL")
        return str(parsed)

    @model_validator(mode="after")
    def _templates_for_apprise(self) -> "Channel":
        if self.kind is not ChannelKind.APPRISE and (self.title or self.body or self.ref):
            raise ValueError("title and body templates are for Apprise channels (--notify)")
        if self.ref is not None and not STORED_PATTERN.fullmatch(f"apprise-{self.ref}"):
            raise ValueError(f"not a stored Apprise URL's ref: {self.ref!r} (12 hex digits)")
        return self

    @property
    def channel_id(self) -> str:
        if self.kind is ChannelKind.APPRISE:
            if self.ref is None:
                raise ValueError(f"{self.destination}: its URL is not stored yet")
            return f"apprise-{self.ref}"
        digest = hashlib.sha256(self.destination.encode()).hexdigest()[:10]
        return f"{self.kind.value}-{digest}"


class NotifyOn(StrEnum):
    """Which moves of a price tell the channels (price mode)."""

    ANY_CHANGE = "any-change"
    """Anything the hash covers: a price moved, or a price appeared or disappeared."""
    PRICE_CHANGE = "price-change"
    DROP = "drop"
    RISE = "rise"
    BACK_IN_STOCK = "back-in-stock"
    """A price seen both times whose availability went from not in stock to in stock (1.3)."""
    OUT_OF_STOCK = "out-of-stock"
    """The way back (1.3)."""


class PriceSettings(Model):
    """Price mode: the page's prices (not its text) are what is compared, and these rules
    decide which moves are told. Without a selector, the prices come from the page's
    structured data (JSON-LD offers, microdata, OpenGraph)."""

    selector: str | None = None
    """CSS selector: each match is one price (instead of structured data)."""
    name: str | None = None
    """CSS selector relative to each match: the price's name (default: its position)."""
    attribute: str | None = None
    """Read each match's attribute (`content`, `data-price`) instead of its text."""
    notify_on: list[NotifyOn] = Field(default_factory=lambda: [NotifyOn.PRICE_CHANGE], min_length=1)
    """The moves told: any of these directions, and these stock transitions (1.3: several;
    one is written as it was in 1.2, a plain value, so 1.2 workers read it)."""
    below: Decimal | None = None
    """Tell when a price falls below this (once per crossing)."""
    above: Decimal | None = None
    """Tell when a price rises above this (once per crossing)."""
    min_change_percent: Decimal | None = Field(default=None, gt=0)
    """Tell only moves of at least this many percent against the previous check."""

    @field_validator("notify_on", mode="before")
    @classmethod
    def _one_or_several(cls, value: object) -> object:
        return [value] if isinstance(value, str | NotifyOn) else value

    @field_serializer("notify_on")
    def _as_written(
        self, value: list[NotifyOn], info: SerializationInfo
    ) -> list[NotifyOn] | NotifyOn:
        """One rule is a plain value, as 1.2 reads it (on the wire, in Postgres and in the
        rules' fingerprint); the `--json` views (context `views`) always say a list."""
        listed = isinstance(info.context, dict) and info.context.get("views")
        return value[0] if len(value) == 1 and not listed else list(value)

    @model_validator(mode="after")
    def _name_needs_selector(self) -> "PriceSettings":
        if self.name is not None and self.selector is None:
            raise ValueError("a price name selector needs a price selector")
        if self.attribute is not None and self.selector is None:
            raise ValueError("a price attribute needs a price selector")
        return self


class RenderSettings(Model):
    """A page that needs a browser (1.3): it is loaded in Chromium by a worker of the render
    task queue, these steps run in order (`click #yearly`, `wait .price`; pricewatch.steps),
    and the page as it then is gets read like a fetched one."""

    steps: list[str] = Field(default_factory=list)

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[str]) -> list[str]:
        parse_steps(value)  # one line naming the bad step, at add time
        return [" ".join(step.split()) for step in value]


@dataclass(frozen=True)
class Extraction:
    """A target's reading rules, whole; all optional. `selector` (HTML) and `json_pointer`
    (JSON) exclude each other; `ignore` is a regex whose matches are removed (tokens,
    timestamps); `price_mode`: the page's prices are read instead (readers.price_reader)."""

    selector: str | None = None
    ignore: str | None = None
    json_pointer: str | None = None
    price_mode: PriceSettings | None = None


class TargetConfig(Model):
    """What the user asked for: the only thing `add` and `reconfigure` change."""

    target_id: str
    url: str
    interval_seconds: int = Field(gt=0, le=MAX_INTERVAL_SECONDS)
    max_attempts: int = Field(default=5, ge=1, le=20)
    """Fetch attempts per slot before it is recorded failed (transient errors only)."""
    unhealthy_after: int = Field(default=3, ge=1, le=1000)
    """Failed slots in a row after which the target counts as unhealthy."""
    channels: list[Channel] = Field(default_factory=list)
    selector: str | None = None
    """CSS selector (HTML): only the text of matching elements counts."""
    ignore: str | None = None
    """Regular expression removed from the text before hashing (tokens, timestamps)."""
    json_pointer: str | None = None
    """RFC 6901 pointer (JSON): only that value counts."""
    user_agent: str | None = None
    """Overrides pricewatch's User-Agent for this target."""
    price_mode: PriceSettings | None = Field(
        default=None, validation_alias=AliasChoices("price_mode", "prices"),
        serialization_alias="prices",
    )  # fmt: skip
    """Price mode (1.1): compare the page's prices, tell by these rules. Not the prices a
    check read (`Page.prices`); the targets file and the wire call it `prices`."""
    timeout_seconds: int | None = None
    """How long the page may take (1.1), 5 to 120: the fetch's overall deadline and its
    limit per read. None: the default (10 s per read, 30 s in all)."""
    render: RenderSettings | None = None
    """Load the page in a browser first (1.3); None: fetch it as it is served."""
    calendar: Calendar | None = None
    """Slots at local wall-clock times (1.4: `--cron` or `--at`/`--on`, `--tz`, `--jitter`);
    None: every `interval_seconds` from the anchor. A calendar target's `interval_seconds`
    is filled in as the calendar's smallest spacing (at most a year): what the minimum
    interval is checked against."""
    tags: list[str] = Field(default_factory=list)
    """Groups it belongs to (`--tag`): short slugs, sorted, each once. Empty by default: a
    config recorded before tags reads as untagged, and older workers ignore the field."""

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str]) -> list[str]:
        for tag in value:
            if not TAG_PATTERN.fullmatch(tag):
                raise ValueError(
                    f"{tag[:40]!r} is not a tag: lowercase letters, digits and inner hyphens, "
                    "1-32 chars"
                )
        if len(set(value)) > MAX_TAGS:
            raise ValueError(f"at most {MAX_TAGS} tags, not {len(set(value))}")
        return sorted(set(value))

    @model_validator(mode="before")
    @classmethod
    def _calendar_spacing(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("calendar") and "interval_seconds" not in data:
            written = data["calendar"]
            found = written if isinstance(written, Calendar) else Calendar.model_validate(written)
            data = {**data, "interval_seconds": min(spacing_seconds(found), MAX_INTERVAL_SECONDS)}
        return data

    @field_validator("selector", "ignore", "json_pointer", "user_agent", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """An empty one is no filter (and the default User-Agent), as leaving it out is: so a
        target written with `ignore: ''` exports, and loads back, as the same target."""
        return None if value == "" else value

    @field_validator("timeout_seconds")
    @classmethod
    def _timeout(cls, value: int | None) -> int | None:
        if value is not None and not (
            MIN_FETCH_TIMEOUT.total_seconds() <= value <= MAX_FETCH_TIMEOUT.total_seconds()
        ):
            raise ValueError(f"must be from {FETCH_TIMEOUT_RANGE}, not {value}s")
        return value

    @model_validator(mode="after")
    def _one_mode(self) -> "TargetConfig":
        if self.price_mode is not None and (self.selector or self.json_pointer or self.ignore):
            raise ValueError(
                "price mode reads the prices alone: selector, ignore and json_pointer do not "
                "apply (use a price selector)"
            )
        return self

    @field_validator("target_id")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not TARGET_ID_PATTERN.fullmatch(value):
            raise ValueError(
                "target id must be a slug: lowercase letters, digits and inner hyphens, 1-63 chars"
            )
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        """Normalised (lowercase scheme and host, a path), so equal URLs compare equal, and
        kept as typed: non-ASCII characters are not percent-encoded here, only when fetched
        (`pricewatch.urls`). A config recorded encoded (up to 1.1) decodes to the same form."""
        return as_typed(value)

    @property
    def interval(self) -> timedelta:
        return timedelta(seconds=self.interval_seconds)

    @property
    def schedule(self) -> str:
        """As the user wrote it: `every 24h`, `weekdays 08:00 Europe/Berlin`."""
        if self.calendar is not None:
            return describe(self.calendar)
        return f"every {format_duration(self.interval)}"

    @property
    def extraction(self) -> Extraction:
        return Extraction(self.selector, self.ignore, self.json_pointer, self.price_mode)

    @property
    def grid(self) -> Grid:
        """Where its slots fall (pricewatch.slots): the calendar's times, or every interval."""
        if self.calendar is not None:
            return CalendarGrid(self.calendar, self.target_id)
        return IntervalGrid(self.interval)


class CheckStatus(StrEnum):
    UNCHANGED = "unchanged"
    CHANGED = "changed"
    # An attempt failed and another will come (`next_attempt_at`): not a result yet.
    RETRYING = "retrying"
    # Gave up: a permanent error, or every attempt failed (a dead letter).
    FAILED = "failed"
    # Came due while an earlier slot was still being checked (or nothing was running):
    # recorded when the schedule moved past it, never fetched.
    SKIPPED = "skipped"


class CheckKind(StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"  # `check-now`'s extra check (the glossary); the wire keeps "manual"


class CheckResult(Model):
    """The durable outcome of one slot, as stored: digests only, never the page."""

    work_id: str
    slot: UtcDatetime = Field(
        validation_alias=AliasChoices("slot", "scheduled_for"), serialization_alias="scheduled_for"
    )
    """The slot this row records (the `scheduled_for` column; on the wire until 1.4)."""
    kind: CheckKind = CheckKind.SCHEDULED
    status: CheckStatus
    checked_at: UtcDatetime
    attempt_count: int
    result_hash: str | None = None
    previous_hash: str | None = None
    error_message: str | None = None
    next_attempt_at: UtcDatetime | None = None
    """While `retrying`: the next attempt comes no earlier (by the database's clock)."""
    next_slot: UtcDatetime | None = None
    notify: bool = True
    """For a change: whether the channels are told. Price rules hold back the moves they do
    not match (1.1)."""
    skipped_values: list[str] = Field(default_factory=list)
    """Price mode (1.3): the values the check could not read and skipped, each with why."""

    @field_validator("skipped_values", mode="before")
    @classmethod
    def _none_skipped(cls, value: object) -> object:
        return [] if value is None else value  # the column is NULL where nothing was skipped

    already_recorded: bool = False
    unnotified: list["CheckResult"] = Field(default_factory=list)
    """With an already recorded slot: changes recorded after it, before the schedule's next
    slot, whose notices never settled. The run that checked them is gone (a reset, or
    history the server lost), so this run tells the channels instead."""


class CheckInput(Model):
    target_id: str
    url: str
    slot: UtcDatetime
    kind: CheckKind = CheckKind.SCHEDULED
    retry: bool = False
    """A re-run of a failed slot on demand (`pricewatch retry`): off the schedule."""
    selector: str | None = None
    ignore: str | None = None
    json_pointer: str | None = None
    user_agent: str | None = None
    price_mode: PriceSettings | None = Field(
        default=None, validation_alias=AliasChoices("price_mode", "prices"),
        serialization_alias="prices",
    )  # fmt: skip
    timeout_seconds: int | None = None
    """The target's fetch timeout (1.1); None: the default."""
    render: RenderSettings | None = None
    """Rendered in Chromium on the render task queue (1.3)."""
    asked_at: UtcDatetime | None = None
    """Temporal's time when the workflow asked for this check. The schedule moves on from the
    later of it and the database's now(): never from a worker's clock."""

    @classmethod
    def of(
        cls,
        config: "TargetConfig",
        slot: datetime,
        kind: CheckKind = CheckKind.SCHEDULED,
        retry: bool = False,
    ) -> "CheckInput":
        """The check of `slot` under the target's config as it is now."""
        return cls(
            target_id=config.target_id, url=config.url, slot=slot, kind=kind, retry=retry,
            selector=config.selector, ignore=config.ignore, json_pointer=config.json_pointer,
            user_agent=config.user_agent, price_mode=config.price_mode,
            timeout_seconds=config.timeout_seconds, render=config.render,
        )  # fmt: skip

    @property
    def extraction(self) -> Extraction:
        return Extraction(self.selector, self.ignore, self.json_pointer, self.price_mode)

    @property
    def on_schedule(self) -> bool:
        """Whether this check is of the target's next slot: it moves the schedule when final."""
        return self.kind is CheckKind.SCHEDULED and not self.retry

    @property
    def work_id(self) -> str:
        if self.kind is CheckKind.MANUAL:
            return work_id(f"{self.target_id}:manual", self.slot)
        return work_id(self.target_id, self.slot)


class MonitorState(Model):
    """The workflow's state: the input of a run, changed by it, and handed as is to the next
    run through continue-as-new.

    Starting a target needs only `config`; the rest defaults. `start_at` is the first slot
    the start asks for (`--start-at`; `pricewatch add` always passes one), the grid anchor a
    registration proposes; a run continued as new carries its next slot there. The first
    registration of a target records its grid in Postgres (default anchor: when the workflow
    first runs); every later one, a reset to the first workflow task included, adopts the
    recorded grid and next slot. `next_slot` is the schedule's position.
    """

    model_config = ConfigDict(frozen=False, extra="ignore")  # the workflow changes it

    config: TargetConfig
    start_at: UtcDatetime | None = None
    next_slot: UtcDatetime | None = None
    paused: bool = False
    registered: bool = False
    last_result: CheckResult | None = None
    checks_completed: int = 0
    pending_checks: list[CheckInput] = Field(default_factory=list)
    """Extra checks (docs/design.md, glossary) asked for by `check_now` or `retry_slot` and
    not yet run; the field keeps its name on the wire (the renames ledger)."""
    failure_streak: int = 0
    max_checks_per_run: int = Field(default=RUN_CHECKS, gt=0)
    """Continue-as-new after this many checks (see `pricewatch.policy.RUN_CHECKS`), or
    sooner if the server suggests it."""
    mirror_stale: bool = False
    """A change (pause, resume, reconfigure) not yet mirrored into Postgres."""
    paused_at: UtcDatetime | None = None
    """When the pause took effect: slots due before it were due, later ones were not."""
    unrecorded_skips: list[UtcDatetime] = Field(default_factory=list)
    """Slots due before a pause and never checked: their skipped rows go with the next sync."""
    unhealthy_since: UtcDatetime | None = None
    """When the target turned unhealthy (1.2; the Temporal UI's current details say so)."""
    min_interval_seconds: int = Field(default=15 * 60, gt=0)
    """The smallest interval this target accepts, now and on reconfigure (the CLI passes
    PRICEWATCH_MIN_INTERVAL; a start from the Temporal CLI or UI gets the default)."""


class MonitorStatus(Model):
    """What the `status` query returns."""

    config: TargetConfig
    paused: bool
    next_slot: UtcDatetime | None
    last_result: CheckResult | None
    checks_completed: int
    failure_streak: int = 0
    unhealthy: bool = False
    checking: UtcDatetime | None = None
    """The scheduled slot being checked right now (its attempts or their backoff), if any."""


class RetryRequest(Model):
    """Re-run one failed slot (scheduled or manual) of this target."""

    slot: UtcDatetime = Field(
        validation_alias=AliasChoices("slot", "scheduled_for"), serialization_alias="scheduled_for"
    )
    kind: CheckKind = CheckKind.SCHEDULED


class RegisterTargetInput(Model):
    """A run's first task proposes a grid; Postgres keeps the one it already has."""

    config: TargetConfig
    anchor: UtcDatetime
    next_slot: UtcDatetime
    enabled: bool
    skipped: list[UtcDatetime] = Field(default_factory=list)
    """Slots that came due after the workflow was started but before its first task ran:
    written only if this registration creates the target."""


class Registration(Model):
    """The target's grid and next slot as recorded, and the changes recorded before that
    slot whose notices never settled (the run that recorded them is gone)."""

    anchor: UtcDatetime
    next_slot: UtcDatetime
    created: bool
    unnotified: list[CheckResult] = Field(default_factory=list)


class SyncTargetInput(Model):
    """The workflow's config and schedule, mirrored into `monitor_targets`."""

    config: TargetConfig
    next_slot: UtcDatetime
    enabled: bool
    skipped: list[UtcDatetime] = Field(default_factory=list)
    """Slots that came due and were never checked: before a pause took effect, or after the
    workflow was started but before its first task ran."""


class RecordFailureInput(Model):
    check: CheckInput
    error_message: str


class RemoveTargetInput(Model):
    target_id: str


class UnnotifiedQuery(Model):
    """Slots the schedule passed without seeing their results (from `first` to `last`)."""

    target_id: str
    first: UtcDatetime
    last: UtcDatetime


class PruneProgress(Model):
    """Where a retention pass stands: targets are pruned in id order, after `after`."""

    after: str = ""
    deleted: int = 0
    done: bool = False
