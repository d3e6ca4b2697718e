"""What `apply` (and `add`, the form and the API's PUT, through it) does to each target: the
plan's steps, and what a reconfigure changes in the targets file's words."""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from client import manifest
from client.manifest import Located
from pricewatch.models import TargetConfig


class Action(StrEnum):
    ADD = "add"
    RECONFIGURE = "reconfigure"
    PAUSE = "pause"
    RESUME = "resume"
    REMOVE = "remove"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Step:
    """One thing `apply` does to one target (`changes`: what a reconfigure changes)."""

    action: Action
    target_id: str
    located: Located | None = None
    changes: tuple[str, ...] = ()
    start_at: datetime | None = None
    """An add's first slot: its own site's other targets spread apart (`first_slot`)."""


def changes(old: TargetConfig, new: TargetConfig) -> tuple[str, ...]:
    """What differs, in the targets file's words: `every: 5s -> 10s`, `timeout: default ->
    30s`. Any difference counts, also in a setting no file names (then its field name)."""
    if old == new:
        return ()
    before, after = manifest.entry(old), manifest.entry(new)
    said = tuple(
        f"{key}: {_as_said(key, before.get(key))} -> {_as_said(key, after.get(key))}"
        for key in dict.fromkeys([*before, *after])
        if before.get(key) != after.get(key)
    )
    if said:
        return said
    fields = old.model_dump(mode="json"), new.model_dump(mode="json")
    return tuple(name for name in fields[1] if fields[0].get(name) != fields[1][name])


# Settings whose absence is "none" (no channel, no selector, text mode), not a default value.
ABSENT_IS_NONE = ("webhooks", "emails", "selector", "ignore", "json_pointer", "prices")


def _as_said(key: str, value: object) -> str:
    if value is None:
        return "none" if key in ABSENT_IS_NONE else "default"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{key}: {item}" for key, item in value.items()) or "structured data"
    return str(value)


class Added(StrEnum):
    ADDED = "added"
    UNCHANGED = "unchanged"
    RECONFIGURED = "reconfigured"
