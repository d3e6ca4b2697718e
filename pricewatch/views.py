"""What the client returns and the CLI prints, human or `--json`. Each `--json` output is one
of these (or a list of them), and its JSON Schema is committed in docs/schemas/: a change to
a field shows there, and `tests/test_views.py` fails until the schema is regenerated with
`python -m pricewatch.views`. Add fields freely; renaming or removing one breaks scripts."""

import json
import sys
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, TypeAdapter

from pricewatch.models import CheckResult, MonitorStatus


class View(BaseModel):
    model_config = ConfigDict(frozen=True)


class TargetSummary(View):
    """`list`: one per target."""

    id: str
    url: str
    interval_seconds: int
    enabled: bool
    unhealthy: bool
    next_slot: datetime
    last_status: str | None
    """The newest recorded result other than `skipped`; None before the first check."""


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
}
SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schemas"


def schema(command: str) -> str:
    return json.dumps(OUTPUTS[command].json_schema(mode="serialization"), indent=2) + "\n"


def dump(command: str, value: object) -> str:
    """The command's `--json` output."""
    return OUTPUTS[command].dump_json(value, indent=2).decode()


def write_schemas(folder: Path = SCHEMAS) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for command in OUTPUTS:
        (folder / f"{command}.json").write_text(schema(command))
        print(f"wrote {folder / command}.json", file=sys.stderr)


if __name__ == "__main__":
    write_schemas()
