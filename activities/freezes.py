"""When this worker itself was away: frozen (SIGSTOP, a paused VM, a throttled container)
or its loop stuck. A frozen process wakes believing no time has passed: its leases have
lapsed, Temporal has handed its work elsewhere, and whatever deadline ran out meanwhile ran
out on the worker, not on the page (RELIABILITY.md, "A frozen process is not a dead one").

The worker's watchdog thread (`workers.observability.LoopWatch`) beats `STALLS` every
0.1 s. A beat that comes STALL_AFTER or more late means nothing of the process ran: a
stall. One with little CPU time spent meanwhile was a freeze, told in one line when the
process thaws,

    12:00:31 this worker was frozen for 92 s (stopped, or its machine paused)

and, SUMMARY_AFTER later, in one more if checks it held were given up because of it, or
notices it was about to send were left to another attempt (their sending lease lapsed):

    12:00:41 after the freeze: 3 checks it held were taken over or retried (a, b, c)
    12:00:41 after the freeze: 1 check it held was taken over or retried (a); 1 notice it
             was sending was left to another attempt (b)

on `pricewatch.outages`. The checks ask `stalled_since` before blaming a page for a
deadline that ran out; their own lines about it, and the SDK's (a cancelled activity's
traceback, Core's `Task not found`), go to debug (`quiet_after_a_stall`).
"""

import asyncio
import logging
import re
import threading
import time
from collections import deque

import temporalio.exceptions

OUTAGE_LOG = logging.getLogger("pricewatch.outages")

# A beat this late (0.1 s expected) is a stall: nothing of the process ran for that long.
STALL_AFTER = 2.0
# The second line comes this long after the thaw: the checks given up by then are named.
SUMMARY_AFTER = 10.0
# SDK lines that follow a stall (a completion the server no longer knows) are quiet this
# long after it: a check's start-to-close, and the longest per-target one.
QUIET_FOR = 180.0
# How many checks the summary names (it counts them all).
NAMED = 5


class Stalls:
    """The spans, in monotonic seconds, when this process did not run."""

    def __init__(self) -> None:
        self.last_beat: float | None = None
        self.last_cpu = 0.0
        self.spans: deque[tuple[float, float, bool]] = deque(maxlen=64)
        """(start, end, frozen): frozen if the process spent little CPU time meanwhile."""
        self.given_up: dict[str, float] = {}
        """Checks given up because of a stall, by target, with when (monotonic)."""
        self.notices_given_up: dict[str, float] = {}
        """Notices not sent because of a stall (their lease lapsed), by target, with when."""
        self.summary_due: float | None = None
        self.thawed_after = 0.0  # the start of the last freeze told
        self._lock = threading.Lock()

    def beat(self, now: float | None = None, cpu: float | None = None) -> None:
        """The watchdog ran at `now`: a gap since its last beat is a stall, and one with
        under half its length of CPU time spent was a freeze (a process stuck in its own
        code is busy meanwhile; the event loop's probe names where)."""
        now = time.monotonic() if now is None else now
        cpu = time.process_time() if cpu is None else cpu
        with self._lock:
            last, last_cpu = self.last_beat, self.last_cpu
            self.last_beat, self.last_cpu = now, cpu
            frozen_for = 0.0
            if last is not None and now - last >= STALL_AFTER:
                frozen = cpu - last_cpu < (now - last) / 2
                self.spans.append((last, now, frozen))
                if frozen:
                    frozen_for = now - last
                    self.thawed_after = last
                    self.summary_due = now + SUMMARY_AFTER
            summary: list[list[str]] = []
            if self.summary_due is not None and now >= self.summary_due:
                summary = [
                    [t for t, at in given_up.items() if at >= self.thawed_after]
                    for given_up in (self.given_up, self.notices_given_up)
                ]
                self.given_up, self.notices_given_up, self.summary_due = {}, {}, None
        if frozen_for:
            OUTAGE_LOG.warning(
                "this worker was frozen for %d s (stopped, or its machine paused)",
                round(frozen_for), extra={"state": "frozen", "frozen_seconds": round(frozen_for)},
            )  # fmt: skip
        if any(summary):
            checks, notices = summary
            told = [
                f"{_counted(names, what)} it {held} {'was' if len(names) == 1 else 'were'} "
                f"{then} ({_named(names)})"
                for names, what, held, then in (
                    (checks, "check", "held", "taken over or retried"),
                    (notices, "notice", "was sending", "left to another attempt"),
                )
                if names
            ]
            OUTAGE_LOG.warning(
                "after the freeze: %s", "; ".join(told),
                extra={"state": "thawed", "checks_given_up": len(checks),
                       "notices_given_up": len(notices)},
            )  # fmt: skip

    def stalled_since(self, since: float, now: float | None = None, frozen: bool = False) -> float:
        """How long the stalls that reached past `since` (monotonic) lasted, each whole:
        a check that began mid-freeze was held back by all of it. Counts a stall the
        watchdog has not yet beaten after (the loop may run first after a thaw); `frozen`:
        only the stalls that were freezes (that one not yet told counts)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            spans = list(self.spans)
            if self.last_beat is not None and now - self.last_beat >= STALL_AFTER:
                spans.append((self.last_beat, now, True))
        return sum(
            end - start for start, end, was_frozen in spans
            if end > since and (was_frozen or not frozen)
        )  # fmt: skip

    def stop(self) -> None:
        """The watchdog stops beating: from now on, no beat is a stall."""
        with self._lock:
            self.last_beat = None

    def recently(self, within: float = QUIET_FOR) -> bool:
        """Whether the process stalled in the last `within` seconds (or is stalled now)."""
        return self.stalled_since(time.monotonic() - within) > 0

    def gave_up(self, target_id: str, notice: bool = False) -> None:
        """A check this worker held was given up because of a stall (or, `notice`, a notice
        it was about to send was left to another attempt): the summary names the target."""
        now = time.monotonic()
        with self._lock:
            given_up = self.notices_given_up if notice else self.given_up
            for t, at in list(given_up.items()):
                if at <= now - QUIET_FOR:
                    del given_up[t]
            given_up.setdefault(target_id, now)


def _counted(names: list[str], what: str) -> str:
    return f"{len(names)} {what}{'' if len(names) == 1 else 's'}"


def _named(names: list[str]) -> str:
    return ", ".join(names[:NAMED]) + (", ..." if len(names) > NAMED else "")


STALLS = Stalls()


# What the SDK says when a thawed worker completes what the server has given to another:
# Core's lines, and a cancelled activity's (its traceback) from the Python side.
SDK_AFTER_A_STALL = re.compile(
    r"Task not found when completing|untracked local activity|Activity not found"
    r"|Completing as failure during heartbeat"
)


def quiet_after_a_stall(record: logging.LogRecord) -> bool:
    """A logging filter for the SDK's loggers: what a thawed worker's completions meet (a
    cancelled activity's traceback, `Task not found when completing`, `Tried to complete
    untracked local activity`) is dropped for QUIET_FOR after a stall; the freeze's own
    lines say it. Elsewhen, it is kept: then it means something else."""
    if not STALLS.recently():
        return True
    error = record.exc_info[1] if record.exc_info else None
    cancelled = isinstance(error, (asyncio.CancelledError, temporalio.exceptions.CancelledError))
    return not (cancelled or SDK_AFTER_A_STALL.search(record.getMessage()))
