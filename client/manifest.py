"""Targets as a file (`pricewatch apply targets.yaml`, `pricewatch export`), for version
control: one entry per target, in the words of `pricewatch add`'s options.

    targets:
      - id: hetzner
        url: https://www.hetzner.com/cloud
        every: 24h
        webhooks: [https://hooks.example.com/pricing]
        emails: [ops@example.com]
        notify:               # Apprise URLs; `export` writes each as its stored ref
          - slack://T0000/B0000/XXXXXXXX
          - url: ntfy://ntfy.internal/pricing
            title: "{{ target }}: {{ headline }}"
        selector: "#pricing"
        tags: [cloud, eu]     # groups: the list filters by them, /groups/cloud charts them
        timeout: 30s          # a slow page: 5s to 120s (default: 10s per read, 30s in all)
        paused: false
      - id: acme-plans
        url: https://acme.example/pricing
        every: 6h
        prices: {selector: tr.plan, name: th, below: 10}   # price mode; {} = structured data
      - id: acme-weekday-mornings
        url: https://acme.example/enterprise
        at: "08:00"           # or cron: "0 8 * * 1-5"; local times in tz (default UTC)
        on: mon-fri
        tz: Europe/Berlin
        jitter: 10m           # each slot shifted by a fixed amount below 10 minutes

Every entry is read and validated before anything is started; an error names the file and
the line of the entry (or of its bad field) and changes nothing.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from client.channels import apprise_channel
from pricewatch import calendar
from pricewatch.durations import PATTERN, format_duration, parse_duration
from pricewatch.models import (
    Channel,
    ChannelKind,
    PriceSettings,
    RenderSettings,
    TargetConfig,
    in_range,
)

DEFAULTS: dict[str, Any] = {
    name: field.default for name, field in TargetConfig.model_fields.items()
}


# TargetConfig's names for what an entry calls otherwise.
ENTRY_FIELDS = {
    "target_id": "id", "interval_seconds": "every", "channels": "webhooks",
    "timeout_seconds": "timeout", "calendar": "cron",
}  # fmt: skip


# A duration as `add` takes it (`15m`, `1h30m`): the document says so, and so does the parser
# (a number is refused: `--every 3600` is too, and YAML reads `1:30` as 90).
Duration = Annotated[
    timedelta, WithJsonSchema({"type": "string", "pattern": PATTERN, "examples": ["15m", "1h30m"]})
]


# An amount as a string (YAML's `below: "9.50"`): what the document says, and all that is
# read (Decimal itself also takes `1_000`, ` 1 `, other scripts' digits and `NaN`). An
# exponent has at most three digits: Decimal refuses one past 18 (schemathesis found it).
AMOUNT = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$"
PERCENT = r"^\+?([0-9]*[1-9][0-9]*(\.[0-9]*)?|[0-9]*\.[0-9]*[1-9][0-9]*)$"  # above 0


def _amount(pattern: str, minimum: dict[str, int]) -> Any:
    number = {"type": "number", **minimum}
    shape = {"anyOf": [number, {"type": "string", "pattern": pattern}, {"type": "null"}]}
    return Annotated[Decimal | None, WithJsonSchema(shape)]


class PriceEntry(PriceSettings):
    """`prices:` as written: a misspelt rule is an error, not a rule quietly not applied."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    below: _amount(AMOUNT, {}) = None  # type: ignore[valid-type]
    above: _amount(AMOUNT, {}) = None  # type: ignore[valid-type]
    min_change_percent: _amount(PERCENT, {"exclusiveMinimum": 0}) = Field(  # type: ignore[valid-type]
        default=None, gt=0
    )

    @field_validator("below", "above", "min_change_percent", mode="before")
    @classmethod
    def _as_documented(cls, value: object, info: ValidationInfo) -> object:
        percent = info.field_name == "min_change_percent"
        if isinstance(value, str) and not re.fullmatch(PERCENT if percent else AMOUNT, value):
            like = "a percentage above 0 like 5 or 2.5" if percent else "an amount like 9.50"
            raise ValueError(f"write {like}, not {value!r}")
        return value

    def _name_needs_selector(self) -> "PriceEntry":  # type: ignore[override]
        """Not here: which rules go together is `Entry.config`'s to say (a 400, the entry
        well formed), as PriceSettings does it."""
        return self


class NotifyEntry(BaseModel):
    """One `notify:` channel with templates: `url` is the Apprise URL, or `apprise-<ref>`
    (a URL stored in this database: what `export` writes, with `masked` for people)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    title: str | None = None
    body: str | None = None
    masked: str | None = None
    """Written by `export`, ignored by `apply`: the service as Apprise masks its URL."""


class ManifestError(ValueError):
    """A targets file that cannot be applied as written; says where."""


class Entry(BaseModel):
    """One target as written in the file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    url: str
    every: Duration | None = None
    """Every so long (default 24h); or a calendar: `cron:`, or `at:` with `on:`."""
    cron: str | None = None
    at: list[str] = []
    """Local times, `08:00` or a list of them."""
    on: str | None = None
    tz: str | None = None
    jitter: Duration | None = None
    start_at: datetime | None = Field(
        default=None, description="The first slot, when added: 1970-01-01 to before 2200 (UTC)."
    )
    """Only when the target is added: the first slot."""
    paused: bool = False
    max_attempts: int = DEFAULTS["max_attempts"]
    unhealthy_after: int = DEFAULTS["unhealthy_after"]
    webhooks: list[str] = Field(default_factory=list)
    emails: list[str] = Field(default_factory=list)
    notify: list[str | NotifyEntry] = Field(default_factory=list)
    """Apprise channels (`--notify`): a URL, or a mapping with templates."""
    selector: str | None = None
    ignore: str | None = None
    json_pointer: str | None = None
    user_agent: str | None = None
    prices: PriceEntry | None = None
    timeout: Duration | None = None
    """How long the page may take (`--timeout`): 5s to 120s."""
    render: bool = False
    """Load the page in Chromium first (`--render`)."""
    steps: list[str] = []
    """With `render`, what runs on the page before it is read (`--step`)."""
    tags: list[str] = []
    """Groups (`--tag`): short slugs, one or a list."""

    @model_validator(mode="before")
    @classmethod
    def _on_as_written(cls, data: object) -> object:
        """YAML 1.1 reads a bare `on:` key as the boolean true: it means `on`."""
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if key is True else key): value for key, value in data.items()}
        return data

    @field_validator("every", "timeout", "jitter", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, str):
            return parse_duration(value, strict=True)
        if value is None or isinstance(value, timedelta):  # a caller's own (the dashboard)
            return value
        raise ValueError(f"write a duration like 90s, 15m, 24h or 1d, not {value!r}")

    @field_validator("at", "tags", mode="before")
    @classmethod
    def _one_or_more(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    def _price_mode(self, said: Callable[[str], str]) -> PriceSettings | None:
        if self.prices is None:
            return None
        try:
            return PriceSettings(**dict(self.prices))
        except ValidationError as err:
            raise ValueError(f"{said('prices')}: {field_error(err)}") from err

    def config(self, said: Callable[[str], str] = str) -> TargetConfig:
        """The target this entry asks for; ValueError (or ValidationError) naming the field
        it cannot take, as written (`said`: a field's name as the user wrote it, `add`'s
        flags): the well-formed entry asking for what cannot be."""
        if self.steps and not self.render:
            raise ValueError(f"{said('steps')} run in the browser: they need {said('render')}")
        if self.every is not None and self.every < timedelta(seconds=1):
            raise ValueError(f"{said('every')}: must be at least 1s (`0s` is not unset)")
        if self.start_at is not None:
            try:
                in_range(self.start_at)
            except ValueError as err:
                raise ValueError(f"{said('start_at')}: {err}") from err
        jitter = None if self.jitter is None else int(self.jitter.total_seconds())
        flag = said("cron").removesuffix("cron")  # `--` on the command line
        grid = calendar.written(self.cron, self.at, self.on, self.tz, jitter, flag=flag)
        if grid is not None and self.every is not None:
            raise ValueError(
                f"{said('every')} and a calendar ({said('cron')}, {said('at')}) are two "
                "schedules: pick one"
            )
        every = timedelta(hours=24) if self.every is None else self.every
        schedule = (
            {"calendar": grid}
            if grid is not None
            else {"interval_seconds": int(every.total_seconds())}
        )
        return TargetConfig(
            target_id=self.id,
            url=self.url,
            **schedule,
            max_attempts=self.max_attempts,
            unhealthy_after=self.unhealthy_after,
            channels=[_channel(said("webhooks"), ChannelKind.WEBHOOK, u) for u in self.webhooks]
            + [_channel(said("emails"), ChannelKind.EMAIL, a) for a in self.emails]
            + [
                apprise_channel(n)
                if isinstance(n, str)
                else apprise_channel(n.url, n.title, n.body)
                for n in self.notify
            ],
            selector=self.selector,
            ignore=self.ignore,
            json_pointer=self.json_pointer,
            user_agent=self.user_agent,
            price_mode=self._price_mode(said),
            timeout_seconds=None if self.timeout is None else int(self.timeout.total_seconds()),
            render=RenderSettings(steps=self.steps) if self.render else None,
            tags=self.tags,
        )


def _channel(field: str, kind: ChannelKind, destination: str) -> Channel:
    """A webhook or email channel; ValueError naming the entry's field, not `destination`."""
    try:
        return Channel(kind=kind, destination=destination)
    except ValidationError as err:
        raise ValueError(f"{field}: {field_error(err).removeprefix('destination: ')}") from err


def _notify_fields(written: "str | NotifyEntry") -> tuple[str, str | None, str | None]:
    if isinstance(written, str):
        return written, None, None
    return written.url, written.title, written.body


@dataclass(frozen=True)
class Located:
    """An entry with where it was written, for errors found later (e.g. by the client)."""

    entry: Entry
    config: TargetConfig
    where: str

    def error(self, message: str) -> ManifestError:
        if not self.where:  # a form's or a request's entry is all there is
            return ManifestError(message)
        return ManifestError(f"{self.where}: {self.entry.id}: {message}")


def load(path: Path) -> list[Located]:
    """Every entry of the file, validated; ManifestError at the first bad one."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ManifestError(f"{path}: {err.strerror or err}") from err
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ManifestError(
            f"{path}{line}: not valid YAML: {getattr(err, 'problem', err)}"
        ) from err
    nodes = _entry_nodes(path, root, data)
    located: list[Located] = []
    seen: dict[str, str] = {}
    for node, raw in zip(nodes, data["targets"], strict=True):
        where = f"{path}:{node.start_mark.line + 1}"
        try:
            entry = Entry.model_validate(raw)
            config = entry.config()
        except ValidationError as err:
            raise ManifestError(_field_error(path, node, where, err)) from err
        except ValueError as err:
            raise ManifestError(f"{where}: {err}") from err
        if entry.id in seen:
            raise ManifestError(f"{where}: duplicate id {entry.id!r} (first at {seen[entry.id]})")
        seen[entry.id] = where
        located.append(Located(entry, config, where))
    return located


def _entry_nodes(path: Path, root: yaml.Node | None, data: Any) -> list[yaml.Node]:
    if not isinstance(data, dict) or set(data) != {"targets"} or root is None:
        raise ManifestError(f"{path}: expected a mapping with one key, `targets`: a list")
    if data["targets"] is None:
        data["targets"] = []
        return []
    targets = data["targets"]
    node = next(value for key, value in root.value if key.value == "targets")
    if not isinstance(targets, list) or not isinstance(node, yaml.SequenceNode):
        raise ManifestError(f"{path}:{node.start_mark.line + 1}: `targets` must be a list")
    return list(node.value)


def _field_error(path: Path, node: yaml.Node, where: str, err: ValidationError) -> str:
    """The first problem, at the line of the field it is about when there is one."""
    field = entry_field(err)
    if field and isinstance(node, yaml.MappingNode):
        for key, _ in node.value:
            if key.value == field:
                where = f"{path}:{key.start_mark.line + 1}"
    return f"{where}: {field_error(err)}"


def entry_field(err: ValidationError) -> str | None:
    """The entry's field the first problem is about, in the file's words (`every`)."""
    first = err.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else None
    return ENTRY_FIELDS.get(field or "", field)


def field_error(err: ValidationError, said: Callable[[str], str] = str) -> str:
    """The first problem as one line, `field: why` in the file's words (`prices.below: ...`):
    what `apply` and the API say of an entry (`said`: in other words, `add`'s flags)."""
    first = err.errors()[0]
    field = entry_field(err)
    message = " ".join(first["msg"].removeprefix("Value error, ").split())
    inner = "".join(f".{_said(part)}" for part in first["loc"][1:])  # e.g. prices.below
    return f"{said(_said(field) + inner)}: {message}" if field is not None else message


def _said(name: str | int) -> str:
    """A field's name as a line may show it: a key someone made up is quoted (`'\\n'`)."""
    text = str(name)
    return text if text.isidentifier() or text.isdigit() else repr(text)


def dump(targets: list[tuple[TargetConfig, bool]]) -> str:
    """The file that `apply` turns into exactly these targets (config, paused)."""
    entries = [entry(config, paused) for config, paused in targets]
    return yaml.safe_dump({"targets": entries}, sort_keys=False, allow_unicode=True)


def entry(config: TargetConfig, paused: bool = False) -> dict[str, object]:
    """One target as a targets file says it: only what differs from the defaults."""
    said: dict[str, object] = {"id": config.target_id, "url": config.url}
    grid = config.calendar
    if grid is None:
        said["every"] = format_duration(config.interval)
    else:
        said |= {"cron": grid.cron} if grid.cron is not None else {}
        said |= {"at": list(grid.at_times), "on": grid.on} if grid.cron is None else {}
        said["tz"] = grid.time_zone
        if grid.jitter_seconds:
            said["jitter"] = format_duration(timedelta(seconds=grid.jitter_seconds))
    webhooks = [c.destination for c in config.channels if c.kind is ChannelKind.WEBHOOK]
    emails = [c.destination for c in config.channels if c.kind is ChannelKind.EMAIL]
    notify = [  # a URL not stored yet (a plan's) by its masked form: never a credential
        {"url": c.channel_id if c.ref else c.destination, "masked": c.destination}
        | ({"title": c.title} if c.title else {})
        | ({"body": c.body} if c.body else {})
        for c in config.channels
        if c.kind is ChannelKind.APPRISE
    ]
    optional = {
        "paused": paused,
        "max_attempts": _unless_default(config, "max_attempts"),
        "unhealthy_after": _unless_default(config, "unhealthy_after"),
        "webhooks": webhooks,
        "emails": emails,
        "notify": notify,
        "selector": config.selector,
        "ignore": config.ignore,
        "json_pointer": config.json_pointer,
        "user_agent": config.user_agent,
        "tags": config.tags,
        "timeout": (
            format_duration(timedelta(seconds=config.timeout_seconds))
            if config.timeout_seconds
            else None
        ),
    }
    said |= {key: value for key, value in optional.items() if value}
    if config.price_mode is not None:
        said["prices"] = config.price_mode.model_dump(mode="json", exclude_defaults=True)
    if config.render is not None:
        said["render"] = True
        said |= {"steps": config.render.steps} if config.render.steps else {}
    return said


def _unless_default(config: TargetConfig, name: str) -> object:
    value = getattr(config, name)
    return None if value == DEFAULTS[name] else value
