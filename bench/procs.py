"""CPU time and memory of process trees, read from /proc (Linux).

Each design's processes are measured from outside, as an operator would see them. A tree
counts its live descendants and, through `cutime`/`cstime`, the ones it has reaped (Postgres
backends that came and went).
"""

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """Parent pid and CPU seconds (own plus reaped children), or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "; field 3 is fields[0]
    return int(fields[1]), sum(int(value) for value in fields[11:15]) / CLOCK_TICKS


def _tree(root: int) -> dict[int, float]:
    """CPU seconds of `root` and each live descendant."""
    stats = {pid: stat for pid in _pids() if (stat := _stat(pid)) is not None}
    members: dict[int, float] = {}
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        if pid in stats and pid not in members:
            members[pid] = stats[pid][1]
            frontier += [child for child, (parent, _) in stats.items() if parent == pid]
    return members


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def cpu_seconds(root: int) -> float:
    return sum(_tree(root).values())


def memory_bytes(root: int) -> int:
    """Proportional set size of the tree: shared pages (Postgres's buffers) counted once."""
    total = 0
    for pid in _tree(root):
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * 1024
    return total
