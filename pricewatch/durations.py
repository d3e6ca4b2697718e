"""Human durations for the CLI and the targets file: `90s`, `15m`, `24h`, `1d`, `1h30m`."""

import re
from datetime import timedelta

_PART = re.compile(r"([0-9]+)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
PATTERN = "^([0-9]{1,6}[smhdSMHD]){1,4}$"
"""What `parse_duration` reads, as the API's document declares it: ASCII digits (`\\d` would
take other scripts' digits, which `int` reads too), few enough that every match is a
timedelta (999999d is 2,700 years; the largest setting takes one)."""


def parse_duration(text: str, strict: bool = False) -> timedelta:
    """Surrounding space ignored (the command line's) unless `strict`: a targets file and
    the API take the document's pattern alone."""
    if not re.fullmatch(PATTERN, text if strict else text.strip()):
        raise ValueError(f"invalid duration {text!r}: use forms like 90s, 15m, 24h, 1d or 1h30m")
    parts = _PART.findall(text.strip().lower())
    return sum((timedelta(**{_UNITS[u]: int(n)}) for n, u in parts), timedelta(0))


def format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out or "0s"
