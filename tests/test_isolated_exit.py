"""A child of `pricewatch.isolated` whose parent is killed (a worker stopped with SIGKILL
mid-render) exits quietly: no BrokenPipeError traceback in the worker's log (issue 41)."""

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARENT = """
import sys
sys.path.insert(0, {root!r})
from pricewatch import isolated
from tests.test_isolated_exit import outlive_the_parent
if __name__ == "__main__":
    isolated.run(outlive_the_parent, {pidfile!r}, seconds=60)
"""


def outlive_the_parent(note: Callable[[str], None], pidfile: str) -> str:
    """Says where it is, and finishes only after its parent is gone (the test kills it
    once this pid file is there): both the note and the result go to a closed pipe."""
    Path(pidfile).write_text(str(os.getpid()))
    while os.getppid() != 1 and Path(pidfile).exists():
        time.sleep(0.05)
    time.sleep(0.5)
    note("after the parent")
    return "done"


def gone(pid: int) -> bool:
    """Exited (or a zombie nobody reaps: in a container, PID 1 may not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_child_whose_parent_is_killed_leaves_no_traceback(tmp_path: Path) -> None:
    pidfile, script, log = tmp_path / "child.pid", tmp_path / "parent.py", tmp_path / "err"
    script.write_text(PARENT.format(root=str(ROOT), pidfile=str(pidfile)))
    with log.open("wb") as stderr:
        parent = subprocess.Popen([sys.executable, str(script)], stderr=stderr, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()):
            assert parent.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.05)
        child = int(pidfile.read_text())
    finally:
        parent.kill()
        parent.wait()
    pidfile.unlink()  # the child may go on now
    deadline = time.monotonic() + 30
    while not gone(child):
        assert time.monotonic() < deadline, "the child outlived its parent by 30 s"
        time.sleep(0.05)
    assert "Traceback" not in log.read_text(), log.read_text()
