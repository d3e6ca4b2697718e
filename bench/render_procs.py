"""The render process trees, from /proc (Linux): CPU over the window and peak memory, split
by component (the Python process, its Playwright driver, Chromium), and the browser to
SIGKILL for `--kill-browser`."""

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench import procs

MEMORY_SAMPLE_EVERY = 1.0  # renderers come and go with each page: sampled often
BROWSERS = {"chromium", "chrome", "headless_shell", "chrome-headless-shell"}
COMPONENTS = ("python", "playwright driver", "chromium")


def _cmdline(pid: int) -> list[str]:
    """The arguments; Chromium's children rewrite theirs into one space-separated string."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return []
    return [arg for part in raw.split("\0") for arg in part.split(" ") if arg]


def component(pid: int) -> str:
    line = _cmdline(pid)
    name = Path(line[0]).name if line else ""
    if name.startswith("python"):
        return "python"
    if name == "node":
        return "playwright driver"
    return "chromium"  # the browser, its zygotes, renderers, GPU and utility processes


def _rss(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _own_cpu(pid: int) -> float | None:
    """The process's own CPU seconds (utime + stime, not its reaped children's)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / procs.CLOCK_TICKS


@dataclass(frozen=True)
class Sample:
    pss: dict[str, int]
    """Per component."""
    rss: int
    """Summed over the tree."""
    own_cpu: dict[int, tuple[str, float]]
    """Each member's component and own CPU seconds."""


def _sample(roots: list[int]) -> Sample:
    members = procs.trees({"render": roots})["render"]
    pss = dict.fromkeys(COMPONENTS, 0)
    own: dict[int, tuple[str, float]] = {}
    for pid in members:
        kind = component(pid)
        pss[kind] += procs._pss(pid)
        if (seconds := _own_cpu(pid)) is not None:
            own[pid] = (kind, seconds)
    return Sample(pss, sum(_rss(pid) for pid in members), own)


def browser_pids(roots: list[int]) -> list[int]:
    """The Chromium browser processes in the tree (not their renderers, GPU or zygotes)."""
    found = []
    for pid in procs.trees({"render": roots})["render"]:
        line = _cmdline(pid)
        if line and Path(line[0]).name in BROWSERS and not any("--type=" in a for a in line):
            found.append(pid)
    return found


def kill_browser(roots: list[int]) -> list[int]:
    pids = browser_pids(roots)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


@dataclass
class Meter:
    """CPU of each role's tree over the window (authoritative: live members plus what they
    reaped), the render tree's CPU split by component (each process's own CPU between its
    first and last sample: a process that lived between two samples is not seen, and is
    left unattributed) and its peak memory."""

    roots: dict[str, list[int]]
    cpu_before: dict[str, float] = field(default_factory=dict)
    cpu_after: dict[str, float] = field(default_factory=dict)
    first_seen: dict[int, float] = field(default_factory=dict)
    last_seen: dict[int, tuple[str, float]] = field(default_factory=dict)
    peak_pss: int = 0
    peak_pss_split: dict[str, int] = field(default_factory=dict)
    peak_rss: int = 0
    killed: list[int] = field(default_factory=list)

    async def measure(self, until: datetime, kill_at: datetime | None = None) -> None:
        """Sample until `until`; SIGKILL the render tree's Chromium once at `kill_at`."""
        render = self.roots["render"]
        self.cpu_before = procs.cpu_seconds(self.roots)
        first = True
        while True:
            sample = await asyncio.to_thread(_sample, render)
            for pid, (kind, seconds) in sample.own_cpu.items():
                self.first_seen.setdefault(pid, seconds if first else 0.0)
                self.last_seen[pid] = (kind, seconds)
            first = False
            if sum(sample.pss.values()) > self.peak_pss:
                self.peak_pss, self.peak_pss_split = sum(sample.pss.values()), sample.pss
            self.peak_rss = max(self.peak_rss, sample.rss)
            if datetime.now(UTC) >= until:
                break
            if kill_at is not None and datetime.now(UTC) >= kill_at:
                kill_at = None
                self.killed = kill_browser(render)
            left = (until - datetime.now(UTC)).total_seconds()
            await asyncio.sleep(max(0.0, min(MEMORY_SAMPLE_EVERY, left)))
        self.cpu_after = procs.cpu_seconds(self.roots)

    def cpu(self, role: str) -> float:
        return self.cpu_after[role] - self.cpu_before[role]

    def cpu_split(self) -> dict[str, float]:
        """CPU seconds per component, and what the samples did not see ("unattributed")."""
        split = dict.fromkeys(COMPONENTS, 0.0)
        for pid, (kind, seconds) in self.last_seen.items():
            split[kind] += seconds - self.first_seen[pid]
        split["unattributed"] = self.cpu("render") - sum(split.values())
        return split
