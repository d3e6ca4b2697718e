"""Snapshots of the normalised text, and the diffs shown to people.

Only checks that set a new state (the baseline and each change) keep a snapshot, compressed
and bounded; the excerpt in a notice and `pricewatch diff` are the same unified diff.
"""

import difflib
import zlib

MAX_SNAPSHOT_CHARS = 256 * 1024
EXCERPT_LINES = 20
EXCERPT_CHARS = 2000


def compress(text: str) -> bytes:
    return zlib.compress(text[:MAX_SNAPSHOT_CHARS].encode(), level=6)


def decompress(snapshot: bytes) -> str:
    return zlib.decompress(snapshot).decode()


def unified_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), fromfile=old_name, tofile=new_name, lineterm=""
    )
    return "\n".join(lines)


def excerpt(old: str, new: str) -> str:
    """The changed lines (`-` old, `+` new), short enough for a webhook or an email."""
    changed = [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), n=0, lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    return "\n".join(changed[:EXCERPT_LINES])[:EXCERPT_CHARS]
