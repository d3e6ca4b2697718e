"""Processes from /proc: the Chromium a render worker runs, its memory, and what is left.

A render worker launches Chromium through Playwright's driver (a Node.js child), so its
browser process is a grandchild; the zygotes, renderers and helpers are below that, and
Chromium's crash handlers are re-parented to init. The browser process (and, for the full
Chromium, its children) names the render worker's TMPDIR in its command line
(`--user-data-dir`), so `mentioning` finds it wherever it hangs; the headless shell's zygotes
and renderers name nothing, so the run also keeps every Chromium process it saw below a render
worker (`Proc.key`: pid and start time, safe from pid reuse).
"""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    cmdline: bytes
    """The arguments joined by NUL (a zygote's children rewrite theirs as one string)."""
    start: int = 0
    """When it started, in clock ticks since boot."""

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.start

    @property
    def chromium(self) -> bool:
        """Chromium, its headless shell or its crash handler (not the shell script that
        Debian's /usr/bin/chromium-headless-shell runs it from)."""
        first = self.cmdline.split(b"\0", 1)[0].split(b" ", 1)[0]
        name = first.rsplit(b"/", 1)[-1]
        return b"chrom" in name or name == b"headless_shell" or first == b"/proc/self/exe"

    @property
    def browser(self) -> bool:
        """Chromium's browser process: the one without a --type= flag."""
        return self.chromium and b"--type=" not in self.cmdline and not self.crash_handler

    @property
    def crash_handler(self) -> bool:
        return b"crashpad_handler" in self.cmdline.split(b"\0", 1)[0]


def processes() -> list[Proc]:
    """Every process this user can see, live (zombies, exited but not reaped, left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmd:
                cmdline = cmd.read().rstrip(b"\0")
        except OSError:
            continue
        if fields[0] != "Z" and cmdline:
            found.append(Proc(int(entry), int(fields[1]), cmdline, int(fields[19])))
    return found


def descendants(ancestors: set[int], among: list[Proc] | None = None) -> list[Proc]:
    """The processes below any of `ancestors`, the ancestors themselves included."""
    listed = processes() if among is None else among
    parents = {p.pid: p.ppid for p in listed}

    def below(pid: int) -> bool:
        seen = 0
        while pid > 1 and seen < 64:
            if pid in ancestors:
                return True
            pid, seen = parents.get(pid, 0), seen + 1
        return False

    return [p for p in listed if below(p.pid)]


def browsers_under(ancestor: int) -> list[int]:
    """The Chromium browser processes below `ancestor` (normally one)."""
    return [p.pid for p in descendants({ancestor}) if p.browser]


def mentioning(text: str, among: list[Proc] | None = None) -> list[Proc]:
    """The processes whose command line or environment contains `text`."""
    needle = text.encode()
    found = []
    for proc in processes() if among is None else among:
        if needle in proc.cmdline:
            found.append(proc)
            continue
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as environ:
                if needle in environ.read():
                    found.append(proc)
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped by its parent, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pss(pids: list[int]) -> int:
    """Proportional set size in bytes, summed (shared pages counted once across them)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            continue
    return total
