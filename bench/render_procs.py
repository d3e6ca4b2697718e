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
COMPONENTS = ("python", "playwright driver", "chromium")


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def component(pid: int) -> str:
    line = _cmdline(pid)
    name = Path(line[0]).name if line and line[0] else ""
    if name in {"chromium", "chrome", "headless_shell", "chrome-headless-shell"}:
        return "chromium"
    if name == "node" or any("playwright" in arg and "cli.js" in arg for arg in line):
        return "playwright driver"
    return "python"


def _rss(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _split_cpu(roots: list[int]) -> dict[str, float]:
    split = dict.fromkeys(COMPONENTS, 0.0)
    for pid, seconds in procs.trees({"render": roots})["render"].items():
        split[component(pid)] += seconds
    return split


def _memory(roots: list[int]) -> tuple[dict[str, int], int]:
    """PSS per component, and RSS summed over the tree."""
    members = procs.trees({"render": roots})["render"]
    pss = dict.fromkeys(COMPONENTS, 0)
    for pid in members:
        pss[component(pid)] += procs._pss(pid)
    return pss, sum(_rss(pid) for pid in members)


def browser_pids(roots: list[int]) -> list[int]:
    """The Chromium browser processes in the tree (not their renderers, GPU or zygotes)."""
    return [
        pid
        for pid in procs.trees({"render": roots})["render"]
        if component(pid) == "chromium"
        and not any(arg.startswith("--type=") for arg in _cmdline(pid))
    ]


def kill_browser(roots: list[int]) -> list[int]:
    pids = browser_pids(roots)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


@dataclass
class Meter:
    """CPU of each role's tree over the window (role "render": also split by component) and
    the render tree's peak memory."""

    roots: dict[str, list[int]]
    cpu_before: dict[str, float] = field(default_factory=dict)
    cpu_after: dict[str, float] = field(default_factory=dict)
    split_before: dict[str, float] = field(default_factory=dict)
    split_after: dict[str, float] = field(default_factory=dict)
    peak_pss: int = 0
    peak_pss_split: dict[str, int] = field(default_factory=dict)
    peak_rss: int = 0
    killed: list[int] = field(default_factory=list)

    async def measure(self, until: datetime, kill_at: datetime | None = None) -> None:
        """Sample until `until`; SIGKILL the render tree's Chromium once at `kill_at`."""
        render = self.roots["render"]
        self.cpu_before, self.split_before = procs.cpu_seconds(self.roots), _split_cpu(render)
        while datetime.now(UTC) < until:
            pss, rss = await asyncio.to_thread(_memory, render)
            if sum(pss.values()) > self.peak_pss:
                self.peak_pss, self.peak_pss_split = sum(pss.values()), pss
            self.peak_rss = max(self.peak_rss, rss)
            if kill_at is not None and datetime.now(UTC) >= kill_at:
                kill_at = None
                self.killed = kill_browser(render)
            left = (until - datetime.now(UTC)).total_seconds()
            await asyncio.sleep(max(0.0, min(MEMORY_SAMPLE_EVERY, left)))
        self.cpu_after, self.split_after = procs.cpu_seconds(self.roots), _split_cpu(render)

    def cpu(self, role: str) -> float:
        return self.cpu_after[role] - self.cpu_before[role]

    def cpu_split(self) -> dict[str, float]:
        return {c: self.split_after[c] - self.split_before[c] for c in COMPONENTS}
