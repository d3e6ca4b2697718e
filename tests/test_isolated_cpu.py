"""`pricewatch.isolated` charges the child its CPU, not the wall clock: a child stopped or
starved by its machine is not overrunning (the soak under load failed 29 notices
permanently as `the body template took longer than 2 s` while their workers were stopped or
their cores taken), and one the machine starves for long is `Unfinished`, which is no verdict
on the user's template or regex."""

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pricewatch import isolated


def spin(note: Callable[[str], None], seconds: float) -> str:
    note("spinning")
    ends = time.thread_time() + seconds
    while time.thread_time() < ends:
        pass
    return "spun"


def stop_myself(note: Callable[[str], None], pidfile: str) -> str:
    """Stops itself (SIGSTOP) once it is running; the test continues it."""
    note("stopped")
    Path(pidfile).write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)
    return "continued"


@pytest.fixture
def continue_after(tmp_path: Path) -> Iterator[Callable[[float], str]]:
    """A pid file for `stop_myself`, and a thread that continues its process after `delay`
    seconds (and, at the end, in any case)."""
    pidfile = tmp_path / "pid"
    done = threading.Event()

    def start(delay: float) -> str:
        def later() -> None:
            while not pidfile.exists() and not done.wait(0.01):
                pass
            if not done.wait(delay) and pidfile.exists():
                os.kill(int(pidfile.read_text()), signal.SIGCONT)

        threading.Thread(target=later, daemon=True).start()
        return str(pidfile)

    yield start
    done.set()
    if pidfile.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pidfile.read_text()), signal.SIGCONT)


def test_a_child_stopped_past_its_deadline_is_not_an_overrun(
    continue_after: Callable[[float], str],
) -> None:
    started = time.monotonic()
    assert isolated.run(stop_myself, continue_after(1.5), seconds=0.5) == "continued"
    assert time.monotonic() - started >= 1.5


def test_a_child_the_machine_starves_for_long_is_starved_not_overrun(
    continue_after: Callable[[float], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(isolated, "WALL_SECONDS", 1.0)
    with pytest.raises(isolated.Unfinished, match=r"^stopped had 0\.\d s of CPU in 1 s: the "):
        isolated.run(stop_myself, continue_after(30), seconds=0.5)
    assert not issubclass(isolated.Unfinished, ValueError), "callers read ValueError as a verdict"


def test_a_child_that_spends_its_cpu_still_overruns() -> None:
    with pytest.raises(isolated.Overrun, match=r"^spinning took longer than 0\.3 s$"):
        isolated.run(spin, 5.0, seconds=0.3)
    assert isolated.run(spin, 0.05, seconds=1.0) == "spun"


def killed_by_another(note: Callable[[str], None]) -> str:
    note("killed")
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or an operator's kill does
    return "not reached"


def test_a_child_killed_by_no_limit_of_ours_is_unfinished_not_overrun() -> None:
    """The soak failed a notice for good as `the message template failed: stopped the child
    process (exit 1)`: a child that could not import what it runs. Only the CPU limit's
    signal is the function's overrun."""
    with pytest.raises(
        isolated.Unfinished, match=r"^killed stopped the child process \(exit -9\)$"
    ):
        isolated.run(killed_by_another, seconds=5)
