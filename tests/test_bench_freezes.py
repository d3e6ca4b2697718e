"""bench.freezes: a freeze stops a process and everything below it and always continues
them, the warnings counted are what an operator is shown, and (its Postgres freeze, the whole
stack) the product's recovery bound holds. All three kinds take minutes: on demand,
`python -m bench.freezes`."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import procs
from bench.freezes import frozen, warnings

REPO = Path(__file__).resolve().parent.parent


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


# The bound docs/failures.md states: after a database freeze, every target is checked again
# within one interval of the thaw plus this (measured 3.7-3.8 s at a 5 s interval on a quiet
# machine; 46 s before issue 48, when attempts that met the outage waited out their backoff
# and the leases their run's earlier attempts had left).
RECOVERY_BOUND_S = 10.0


@pytest.mark.long
async def test_after_a_20_s_database_freeze_every_target_is_checked_within_one_interval(
    tmp_path: Path,
) -> None:
    """The whole stack, real processes (bench.freezes): Postgres's postmaster and every
    backend stopped for 20 s, as a paused VM stops them, then continued."""
    interval = 5
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.freezes", "--kinds", "postgres", "--targets", "8",
        "--interval", str(interval), "--freeze", "20", "--settle", str(2 * interval), "--json",
        cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    finally:
        if process.returncode is None:  # SIGTERM: the run continues Postgres and stops its stack
            process.terminate()
            await process.wait()
    assert process.returncode == 0, err.decode()[-3000:]
    [postgres] = json.loads(out)["results"]
    assert postgres["unchecked"] == 0, err.decode()
    assert postgres["last_s"] <= interval + RECOVERY_BOUND_S, err.decode()
