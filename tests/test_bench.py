"""Smoke test of the benchmark: a few targets for a few seconds through all three designs,
as a user runs it. It proves the command works and prints every column; the real runs are
on demand (`make bench`)."""

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from bench.report import COLUMNS

DESIGNS = ("pricewatch", "schedules", "poller")
REPO = Path(__file__).resolve().parent.parent


def bench_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("pricewatch-bench-*"))


async def test_bench_runs_every_design_and_prints_every_column() -> None:
    dirs_before = bench_dirs()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench", "--targets", "4", "--interval", "1", "--seconds", "3",
        "--workers", "2",
        "--designs", ",".join(DESIGNS), "--json",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=150)
    assert process.returncode == 0, err.decode()[-3000:]
    table = err.decode()
    for header, _ in COLUMNS:
        assert header in table
    assert "late p99 per interval" in table
    rows = {line.split()[0] for line in table.splitlines() if line.strip()}
    assert {*DESIGNS, "pricewatch/schedules", "pricewatch/poller"} <= rows

    report = json.loads(out)
    by_name = {design["design"]: design for design in report["designs"]}
    assert list(by_name) == list(DESIGNS)
    for name, design in by_name.items():
        assert design["checks_per_s"] > 0, name
        assert design["slots_missed"] >= 0, name
        assert 0 <= design["lateness_p50_s"] <= design["lateness_max_s"], name
        assert design["sql_round_trips_per_check"] >= 1, name
        assert all(value > 0 for value in design["cpu_seconds_per_check"].values() if value), name
        assert design["peak_rss_mib"]["worker"] > 0, name
        timeline = design["lateness_p99_per_interval_s"]
        assert len(timeline["window"]) == 3 and any(timeline["window"]), name
    for name in ("pricewatch", "schedules"):
        assert by_name[name]["history_events_per_check"] >= 5
        assert by_name[name]["workflow_tasks_per_check"] >= 1
        assert by_name[name]["storage_bytes_per_check"] is not None
    assert by_name["poller"]["history_events_per_check"] is None
    stages = by_name["pricewatch"]["lateness_p99_by_stage_s"]
    assert list(stages) == ["timer fired late", "task waited", "task ran"]
    assert None not in stages.values(), stages
    assert set(report["ratios"]) == {"pricewatch/schedules", "pricewatch/poller"}
    assert bench_dirs() <= dirs_before, "the benchmark removes its temporary directory"
