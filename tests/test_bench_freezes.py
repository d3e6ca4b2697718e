"""bench.freezes's own parts, without its stack (a whole run takes minutes: on demand,
`python -m bench.freezes`): a freeze stops a process and everything below it and always
continues them, and the warnings counted are what an operator is shown."""

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import procs
from bench.freezes import frozen, warnings


def state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    """A shell with a child of its own, in a process group of their own: both killed here,
    stopped or not."""
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        for _ in range(100):
            if len(procs.trees({"t": [shell.pid]})["t"]) == 2:
                break
            time.sleep(0.05)
        yield shell
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


def test_a_freeze_stops_the_whole_tree_and_continues_it_even_on_failure(
    tree: subprocess.Popen[bytes],
) -> None:
    pids = list(procs.trees({"t": [tree.pid]})["t"])
    assert len(pids) == 2, pids
    with pytest.raises(RuntimeError), frozen(tree.pid):
        for _ in range(100):  # SIGSTOP is delivered asynchronously
            if all(state(pid) == "T" for pid in pids):
                break
            time.sleep(0.01)
        assert [state(pid) for pid in pids] == ["T", "T"]
        raise RuntimeError("the run failed while frozen")
    time.sleep(0.1)
    assert [state(pid) for pid in pids] == ["S", "S"]


def test_warnings_are_lines_at_warning_or_above_and_raw_output(tmp_path: Path) -> None:
    class Stack:
        root = tmp_path

    lines = [
        *(json.dumps({"level": level, "message": "m"}) for level in ("DEBUG", "INFO")),
        json.dumps({"level": "INFO", "message": "attempt", "error": "Traceback (most ..."}),
        *(json.dumps({"level": level, "message": "m"}) for level in ("WARNING", "ERROR")),
        "Traceback (most recent call last):",  # the SDK's raw output
    ]
    (tmp_path / "pricewatch-worker-0.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "temporal.log").write_text("WARNING not a worker's\n")
    assert warnings(Stack()) == 3  # type: ignore[arg-type]
