"""Run a function whose cost a user decides (a notice template) in a child process with a
deadline and a memory cap, killed when it overruns.

A thread cannot be stopped and shares the GIL, so pure-Python work in one still slows the
worker's event loop; a child process can be killed, and its CPU is its own. Children are
forked from a small `forkserver` that has imported `preload` once, not from the caller (a
worker full of threads and sockets), so starting one costs a fork and a pickle: a few ms
(docs/notifications.md has the measurement).

The forkserver imports the main module once (a script's `if __name__ == "__main__"` keeps
it from running), so children do not each import it again; a main module read from stdin
has no file to import, and there children fail to start.

The deadline is the child's CPU time from the moment it is ready, not the wall clock: on a
busy machine (or a worker stopped and continued) the child waits for a core, and that is not
the function's cost. A child that has not used its CPU when WALL_SECONDS have passed, or that
dies by no limit of ours, is `Unfinished`: the machine's fault, worth another try, never the
user's.
"""

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import time
from collections.abc import Callable
from typing import Any

# The child's address space may grow this much past what it starts with (its Python and the
# preloaded modules): plenty for a 4000-character message, too little for `"x" * 10**9`.
MEMORY_BYTES = 256 * 2**20
# A child that cannot even start in this long says so (a machine out of processes).
START_SECONDS = 60.0
# A child still short of its CPU after this long is starved by its machine.
WALL_SECONDS = 30.0
# The forkserver imports these once. `__main__` among them, so that a child does not run
# the main module again (multiprocessing does, for every child, unless its forkserver has).
_PRELOAD = ["__main__", "pricewatch.notices", "readers.normalise"]


class Overrun(ValueError):
    """The function did not finish within its bounds; the message says which and where."""


class Unfinished(Exception):
    """The child did not finish for a reason of the machine's: it got too little CPU within
    WALL_SECONDS, could not start, or died by no limit of ours (killed, or it could not import
    what it runs). No verdict on the function (it is no ValueError): another try may do."""


class Failed(ValueError):
    """The function raised: its message (the child's exception is not sent back itself,
    since not every exception survives a pickle)."""


Note = Callable[[str], None]
"""What a function tells its caller about where it is, for the overrun's message."""


def _context() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def run(
    function: Callable[..., Any],
    *args: Any,
    seconds: float,
    memory_bytes: int = MEMORY_BYTES,
) -> Any:
    """`function(note, *args)` in a child process; its result, `Failed` if it raised,
    `Overrun` if it took more than `seconds` of CPU or more than `memory_bytes`,
    `Unfinished` if the machine kept it from finishing (the child is killed). Blocking: from
    async code, call it in a thread (`asyncio.to_thread`)."""
    context = _context()
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(  # type: ignore[attr-defined]
        target=_child, args=(sending, function, args, seconds, memory_bytes), daemon=True
    )
    child.start()
    sending.close()
    doing = ""
    try:
        if not receiving.poll(START_SECONDS):
            raise Unfinished(f"the child process did not start in {START_SECONDS:.0f} s")
        receiving.recv()  # ready: the deadline starts now
        spent = _cpu_clock(child.pid)
        while True:
            used = spent()
            if used >= seconds:
                raise Overrun(f"{doing} took longer than {seconds:g} s".strip())
            if spent.waited >= WALL_SECONDS:
                raise Unfinished(
                    f"{doing or 'the child process'} had {used:.1f} s of CPU in "
                    f"{spent.waited:.0f} s: the machine is too busy"
                )
            # The child's CPU cannot grow faster than the wall clock: no overrun meanwhile.
            if not receiving.poll(max(seconds - used, 0.05)):
                continue
            kind, value = receiving.recv()
            if kind == "note":
                doing = value
            elif kind == "done":
                return value
            elif kind == "memory":
                raise Overrun(f"{doing} needs more than {memory_bytes // 2**20} MiB".strip())
            else:
                raise Failed(value)
    except EOFError:  # the child died without a word: its CPU limit, or not ours
        child.join(1)
        said = f"{doing} stopped the child process (exit {child.exitcode})".strip()
        if child.exitcode == -signal.SIGXCPU:
            raise Overrun(said) from None
        raise Unfinished(said) from None
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receiving.close()


class _cpu_clock:
    """The CPU seconds a child has used since this was made (its /proc stat: utime and
    stime), or, where the kernel does not say, the wall clock's; `waited`: wall seconds."""

    def __init__(self, pid: int) -> None:
        self.path = f"/proc/{pid}/stat"
        self.started = time.monotonic()
        self.at_start = self._read()

    @property
    def waited(self) -> float:
        return time.monotonic() - self.started

    def __call__(self) -> float:
        now = self._read()
        if now is None or self.at_start is None:
            return self.waited
        return now - self.at_start

    def _read(self) -> float | None:
        try:
            with open(self.path, "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None


def _child(
    sending: multiprocessing.connection.Connection,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    seconds: float,
    memory_bytes: int,
) -> None:
    _limit(memory_bytes, seconds)

    def note(doing: str) -> None:
        sending.send(("note", doing))

    try:
        sending.send(("ready", None))
        try:
            result: tuple[str, Any] = ("done", function(note, *args))
        except MemoryError:
            result = ("memory", None)
        except Exception as err:
            result = ("failed", str(err))
        sending.send(result)
    except BrokenPipeError:
        # The parent is gone (a worker killed mid-render): nobody to tell, and a traceback
        # would land in the dead worker's log as if something had failed here.
        raise SystemExit(1) from None


def _limit(memory_bytes: int, seconds: float) -> None:
    """The child's own bounds, in case its parent is gone and cannot kill it: an address
    space cap (a MemoryError, not the machine's swap) and a CPU-time cap."""
    with contextlib.suppress(OSError, ValueError):  # not on this platform
        with open("/proc/self/statm") as statm:
            used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (used + memory_bytes, used + memory_bytes))
    with contextlib.suppress(OSError, ValueError):
        cpu = int(seconds) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
