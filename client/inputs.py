"""What every client call checks of its input before it asks Temporal or Postgres, and the
errors a surface turns into one line (BadInput: exit 2, the API's 400; Unknown: its 404)."""

import re
from collections.abc import Iterator
from datetime import datetime

from pricewatch.models import TAG_PATTERN, TargetConfig, in_range


def unreachable_database(url: str, err: OSError | TimeoutError) -> ConnectionError:
    """One line for a Postgres that did not answer: where (host:port, or the socket
    directory; never the password) and what the OS said."""
    # Not at the top: activities.outages loads temporalio.worker, which only a worker needs.
    from activities.outages import postgres_address

    why = getattr(err, "strerror", None) or str(err) or "no answer in time"
    return ConnectionError(f"cannot reach Postgres at {postgres_address(url)}: {why}")


class BadInput(Exception):
    """The caller asked for something invalid or unknown: nothing was changed."""


class Unknown(BadInput):
    """No such target, work id or recorded check (the API's 404)."""


# What Postgres' text and jsonb refuse: NUL, and a lone UTF-16 surrogate (JSON's `\ud800`).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(name: str, text: str) -> str:
    """`text`, or BadInput naming `name` if Postgres cannot hold or compare it (a search or
    a setting that would otherwise come back as "Postgres: invalid byte sequence", an
    outage, or stop a target's workflow at its registration)."""
    if found := UNSTORABLE.search(text):
        what = "a NUL character" if found[0] == "\x00" else "a lone surrogate (half a character)"
        raise BadInput(f"{name}: holds {what}, which no text here may")
    return text


def moment(name: str, value: datetime) -> datetime:
    """`value` in UTC, or BadInput naming `name` if it is outside the times pricewatch
    reads and writes (`pricewatch.models.in_range`)."""
    try:
        return in_range(value)
    except ValueError as err:
        raise BadInput(f"{name}: {err}") from err


def texts(value: object, name: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a dumped model, with where it is (`channels.0.title`)."""
    if isinstance(value, str):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from texts(item, f"{name}.{key}" if name else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from texts(item, f"{name}.{index}")


def valid_tag(tag: str) -> str:
    if not TAG_PATTERN.fullmatch(tag):
        raise BadInput(
            f"tag: {tag[:40]!r} is not a tag (lowercase letters, digits and inner hyphens, "
            "1-32 chars)"
        )
    return tag


def valid_id(target_id: str) -> str:
    """The id if it is a slug (the rule `TargetConfig` enforces), else a ValidationError."""
    TargetConfig(target_id=target_id, url="http://example.com", interval_seconds=1)
    return target_id
