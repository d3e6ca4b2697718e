"""A watchdog that stops the servers a process started once that process is gone, however
it went: SIGKILL and a timeout's kill included, which run no cleanup of its own.

`Lifeline()` starts this file in a session of its own (Ctrl-C on the
terminal does not reach it) with a pipe on its stdin whose write end only this process
holds (not inherited by other children: Python's pipes are non-inheritable). `guard(pid)`
writes the pid and its start time to the pipe. When this process ends, the kernel closes
the write end and the watchdog reads end-of-file; each guarded process still running (with
the same start time: never a process that reused the pid) gets SIGTERM, then SIGKILL after
`GRACE` seconds; then each directory given to `remove(path)` is removed (a server's data: a
test run's embedded Postgres). An orderly stop has done both already: the watchdog finds
them gone.

Why not `PR_SET_PDEATHSIG`: it fires when the *thread* that started the child ends (a
server started from `asyncio.to_thread` would die with that thread), and the embedded
Postgres is started by `pg_ctl`, which exits at once, so its parent is never us.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

GRACE = 10.0


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (None: it is gone, or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


class Lifeline:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)],  # the standard library only
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    def guard(self, pid: int) -> None:
        """Stop `pid` once this process is gone (if it still runs then)."""
        ticks = start_ticks(pid)
        if ticks is not None:
            self._tell(f"{pid} {ticks}".encode())

    def remove(self, path: str) -> None:
        """Remove the directory `path` once this process is gone and what it guards stopped."""
        if "\n" in path:
            raise ValueError(f"a path of one line, not {path!r}")
        self._tell(b"rm " + os.fsencode(os.path.abspath(path)))

    def _tell(self, line: bytes) -> None:
        if self.process.stdin is not None:
            self.process.stdin.write(line + b"\n")
            self.process.stdin.flush()


_lifeline: Lifeline | None = None


def guard(pid: int) -> None:
    """Guard `pid` with this process's lifeline (started on first use)."""
    _this_process().guard(pid)


def remove(path: str) -> None:
    """Have this process's lifeline remove the directory `path` once this process is gone."""
    _this_process().remove(path)


def _this_process() -> Lifeline:
    global _lifeline
    if _lifeline is None or _lifeline.process.poll() is not None:
        _lifeline = Lifeline()
    return _lifeline


def stop(guarded: list[tuple[int, int]], grace: float = GRACE) -> None:
    """SIGTERM each guarded process still running, then SIGKILL whatever is left after
    `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [(pid, ticks) for pid, ticks in guarded if start_ticks(pid) == ticks]
        for pid, _ in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)  # a frozen one (a test's SIGSTOP) must hear it
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = [(pid, ticks) for pid, ticks in alive if start_ticks(pid) == ticks]
        guarded = alive


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the pipe's end stops it
    guarded = []
    removed = []
    for line in sys.stdin.buffer:  # until the parent is gone
        if line.startswith(b"rm "):
            removed.append(os.fsdecode(line[3:].rstrip(b"\n")))
            continue
        pid, ticks = line.split()
        guarded.append((int(pid), int(ticks)))
    stop(guarded)
    for path in removed:  # after its servers: a running Postgres still writes there
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
