"""Nothing outlives a killed run: the servers test fixtures start (embedded Postgres, the
Temporal dev server, the time-skipping test server) die with their pytest process even
when it is SIGTERMed or SIGKILLed (a timeout's kill), through the lifeline
(workers/lifeline.py)."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.chaos import procs
from workers import lifeline

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.long
@pytest.mark.timeout(240)
@pytest.mark.parametrize("kill", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_fixtures_servers_die_with_a_killed_pytest(kill: signal.Signals) -> None:
    """SIGTERM is what `timeout` (a `make test` stopped by one) sends first: pytest dies of
    it without running a fixture's teardown; SIGKILL runs nothing at all."""
    scratch = tempfile.mkdtemp(prefix="pwl-")
    up = Path(scratch) / "up"
    env = {**os.environ, "TMPDIR": scratch, "LIFELINE_PROBE_UP": str(up)}
    env.pop("PRICEWATCH_TEST_DATABASE_URL", None)  # the embedded server, not an external one
    log = Path(scratch) / "pytest.log"
    with open(log, "wb") as output:
        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:randomly", "-p",
             "no:cacheprovider", "-q", "tests/lifeline_probe.py"],
            cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 150
        while not up.exists():
            assert run.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the fixtures' servers did not start"
            time.sleep(0.2)
        # Every process of the run: below it, or naming its TMPDIR (Postgres, below init).
        listed = procs.processes()
        servers = {p.key for p in procs.descendants({run.pid}, listed)}
        servers |= {p.key for p in procs.mentioning(scratch, listed)}
        names = [p.cmdline.split(b"\0", 1)[0].rsplit(b"/", 1)[-1] for p in listed
                 if p.key in servers]  # fmt: skip
        assert {b"postgres", b"temporal", b"temporal-test-server"} <= set(names), names
        run.send_signal(kill)
        assert run.wait() == -kill, log.read_text()[-3000:]
        deadline = time.monotonic() + lifeline.GRACE + 20
        while left := [(pid, t) for pid, t in servers if lifeline.start_ticks(pid) == t]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not left, [p.cmdline[:80] for p in procs.processes() if p.key in left]
        # The servers' data directories too: the fixtures' own cleanup never ran.
        while data := sorted(p.name for p in Path(scratch).glob("pricewatch-*")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not data, data
    finally:
        if run.poll() is None:
            run.kill()
        subprocess.run(["rm", "-rf", scratch], check=False)


def test_a_lifeline_stops_what_it_guards_once_its_holder_is_gone() -> None:
    """The watchdog alone: a guarded process is stopped when the pipe closes; one that has
    already gone, or a pid another process took since, is left alone."""
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    watch = lifeline.Lifeline()
    watch.guard(sleeper.pid)
    assert watch.process.stdin is not None
    watch.process.stdin.close()  # what the kernel does when its holder dies
    assert sleeper.wait(timeout=10) == -signal.SIGTERM
    assert watch.process.wait(timeout=10) == 0


def test_a_lifeline_removes_a_directory_once_its_holder_is_gone(tmp_path: Path) -> None:
    """After the processes it guards have stopped (a Postgres writes in its data directory
    until then): what it was given to remove is gone, a path with a space included."""
    data = tmp_path / "server data"
    (data / "pgdata").mkdir(parents=True)
    (data / "pgdata" / "postmaster.pid").write_text("1\n")
    kept = tmp_path / "kept"
    kept.mkdir()
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    watch = lifeline.Lifeline()
    watch.guard(sleeper.pid)
    watch.remove(str(data))
    watch.remove(str(tmp_path / "never made"))
    assert watch.process.stdin is not None
    time.sleep(0.5)
    assert data.exists()  # not while its holder lives
    watch.process.stdin.close()
    assert sleeper.wait(timeout=10) == -signal.SIGTERM
    assert watch.process.wait(timeout=10) == 0
    assert not data.exists() and kept.exists()
    with pytest.raises(ValueError):
        watch.remove("two\nlines")
