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


def trees(roots: dict[str, list[int]]) -> dict[str, dict[int, float]]:
    """Each role's trees: their live members and CPU seconds, from one scan of /proc."""
    stats = {pid: stat for pid in _pids() if (stat := _stat(pid)) is not None}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    out: dict[str, dict[int, float]] = {}
    for name, pids in roots.items():
        members: dict[int, float] = {}
        frontier = [pid for pid in pids if pid in stats]
        while frontier:
            pid = frontier.pop()
            if pid not in members:
                members[pid] = stats[pid][1]
                frontier += children.get(pid, [])
        out[name] = members
    return out


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def cpu_seconds(roots: dict[str, list[int]]) -> dict[str, float]:
    return {name: sum(tree.values()) for name, tree in trees(roots).items()}


def memory_bytes(roots: dict[str, list[int]]) -> dict[str, int]:
    """Proportional set size of each tree: shared pages (Postgres's buffers) counted once.
    The kernel walks each process's page tables to answer: sampled every few seconds."""
    return {name: sum(_pss(pid) for pid in tree) for name, tree in trees(roots).items()}


def _pss(pid: int) -> int:
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in rollup.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0
