"""The short seeded chaos run: every fault kind once (a starved CPU and frozen processes
among them), every invariant PASS, and nothing it started left running. The long run is
`make chaos` (see docs/testing.md).

It must pass on a busy machine too (both cores taken by other work: about three minutes
quiet, five beside `../shared/tools/burn.py`). Its checks hold on the product's terms, not
on timing: a target's slots are due from its workflow's start; a fault is judged only
where it hit (a browser kill that came after its render read the page is put back for
another render); an armed window that no work reached while it was armed is named, not
failed, while one that work passed by fails the run; a hang is measured less the time its
client was frozen. No check retries by sleeping longer."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.chaos import procs
from tests.chaos.proxy import Proxy
from tests.chaos.run import ALL_RATES, judge_windows
from tests.chaos.worker import Faults


@pytest.mark.long
@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_a_short_seeded_chaos_run_passes_every_invariant() -> None:
    # Everything the run starts inherits this TMPDIR, or names it (its render workers'
    # Chromium): any process that still does afterwards is a stray. Short: Chromium's socket
    # lives below it (tests/chaos/stack.py, `render_scratch`).
    scratch = tempfile.mkdtemp(prefix="pwc-", dir="/tmp")
    try:
        run = subprocess.run(
            [sys.executable, "-m", "tests.chaos", "--targets", "10", "--minutes", "1",
             "--interval", "3", "--seed", "7", "--rendered-every", "5"],
            # The run's own bounds: set-up, a minute of faults, up to two of armed windows,
            # three of settling, then the checks.
            capture_output=True, text=True, timeout=540, env={**os.environ, "TMPDIR": scratch},
        )  # fmt: skip
        report = run.stdout[run.stdout.index("pricewatch chaos:") :]
        if run.returncode != 0:
            report = keep_data(report)
        assert run.returncode == 0, report + run.stderr[-3000:]
        for kind in ALL_RATES:
            assert kind in report
        assert "FAIL" not in report
        assert report.rstrip().endswith("PASS")
        for _ in range(25):  # a process the run stopped may take a moment to be gone
            if not (left := procs.mentioning(scratch)):
                break
            time.sleep(0.2)
        assert not left, [p.cmdline[:100] for p in left]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def keep_data(report: str) -> str:
    """A failed run keeps its data folder (logs, databases, hits) below the scratch dir this
    test removes: move it out, to the test's own temporary directory, and say where."""
    kept = "data kept for inspection"
    for line in report.splitlines():
        if line.strip().startswith(kept):
            folder = line.strip().removeprefix(kept).strip()
            moved = shutil.move(folder, tempfile.mkdtemp(prefix="pricewatch-chaos-failed-"))
            return report.replace(folder, moved)
    return report


async def test_the_proxy_measures_a_hang_until_the_client_gives_up() -> None:
    """A connection that was live when the hole opened: its hang ends when the client
    closes, although the upstream (which never hears of it) keeps its end open."""

    async def upstream_keeps_open(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await reader.read()

    server = await asyncio.start_server(upstream_keeps_open, "127.0.0.1", 0)
    proxy = Proxy("postgres", ("127.0.0.1", server.sockets[0].getsockname()[1]))
    await proxy.start()
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        hole = asyncio.create_task(proxy.fault("blackhole", 3))
        await asyncio.sleep(0.1)
        writer.write(b"Q statement")
        await writer.drain()
        await asyncio.sleep(1)
        writer.close()  # the client's own timeout
        await hole
        [hang] = proxy.hangs
        # No timing window (this machine's timing noise under xdist is wider than one):
        # it hung (the client waited its 1 s, less at most half of it in scheduling), and
        # the hang ended at the client's close, not when the hole closed 2 s later.
        assert hang.ended is not None and hang.ended < hang.hole_ended, hang
        assert hang.waited > 0.5, hang
        assert hang.first_bytes == b"Q statement"
    finally:
        await proxy.stop()
        server.close()


def test_a_window_reached_is_a_figure_and_one_never_tried_fails() -> None:
    """The judgement of windows never hit. A fresh-clone `make test` failed on 'browser
    killed (13 render while armed)': its hook had taken the arm, killed the browser and
    waited for the render to fail, when a render beside it took 'render worker killed' and
    the process died before it could record either outcome."""
    armed = [(100.0, k) for k in ("browser killed", "after_send", "mid_fetch", "zombie")]
    chances = {"render": [101.0, 105.0, 150.0], "webhook send": [], "fetch": [102.0, 110.0]}
    judged = judge_windows(
        ["browser killed", "after_send", "mid_fetch", "zombie"],
        armed,
        {"zombie": 111.0},  # disarmed at 111: the fetch at 110 came within the margin
        chances,
        Counter({"browser killed": 4}),
        {"browser killed": Counter({"too late": 2, "no browser": 1})},
        now=200.0,
    )
    assert judged.reached == [
        "browser killed (taken 4: 2 too late, 1 no browser, 1 its process killed first)"
    ]
    assert judged.no_chance == ["after_send (no webhook send while armed)"]
    assert judged.untried == ["mid_fetch (2 fetch while armed)", "zombie (1 fetch while armed)"]


def test_a_take_is_noted_before_anything_else_and_a_miss_puts_the_arm_back(
    tmp_path: Path,
) -> None:
    """What `judge_windows` reads: every take in takes.jsonl (written before the fault, so a
    process killed meanwhile still told), every put-back arm in misses.jsonl with its reason."""
    for folder in ("armed", "taken"):
        (tmp_path / folder).mkdir()
    (tmp_path / "armed" / "browser killed.1").touch()
    faults = Faults(tmp_path)
    assert faults.take("mid_fetch") is None
    window, arm = faults.take("browser killed", "render worker killed") or ("", "")
    assert (window, arm) == ("browser killed", "browser killed.1")
    faults.missed(window, arm, "too late", url="http://page")
    assert [p.name for p in (tmp_path / "armed").iterdir()] == ["browser killed.1"]
    [take] = [json.loads(line) for line in (tmp_path / "takes.jsonl").read_text().splitlines()]
    [miss] = [json.loads(line) for line in (tmp_path / "misses.jsonl").read_text().splitlines()]
    assert take["window"] == miss["window"] == "browser killed" and take["pid"] == os.getpid()
    assert miss["reason"] == "too late" and miss["url"] == "http://page"
