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
    assert report["date"] and report["commit"], "a run is dated and names its commit"
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


def test_figures_are_generated_into_the_docs_block(tmp_path: Path) -> None:
    """`python -m bench.figures` turns saved runs into one dated table between the markers
    of a document, leaving the rest of it alone."""
    from bench import figures

    run = {
        "date": "2026-11-30T22:00:00+00:00",
        "commit": "abc1234",
        "workload": {"targets": 200, "interval": 10, "seconds": 30.0, "workers": 1},
        "designs": [
            {
                "design": "pricewatch",
                "checks_per_s": 20.0,
                "slots_missed": 0,
                "lateness_p50_s": 0.1,
                "lateness_p99_s": 0.4,
                "lateness_max_s": 0.5,
                "history_events_per_check": 6.0,
                "workflow_tasks_per_check": 1.0,
                "sql_round_trips_per_check": 2.0,
                "cpu_seconds_per_check": {"server": 0.0144, "worker": 0.0142, "postgres": None},
                "peak_rss_mib": {"server": 300.0, "worker": 180.0, "postgres": 90.0},
            }
        ],
    }
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(run))
    doc = tmp_path / "performance.md"
    doc.write_text(f"# Performance\n\nbefore\n{figures.START}\nold\n{figures.END}\nafter\n")
    figures.main([str(saved), "--write", str(doc)])
    text = doc.read_text()
    assert text.startswith("# Performance\n\nbefore\n") and text.endswith("\nafter\n")
    assert "old" not in text
    row = next(line for line in text.splitlines() if "pricewatch" in line)
    assert "2026-11-30 `abc1234`" in row and "200 / 10 s, 30 s" in row
    assert "| 20 | 0 | 0.1 / 0.4 / 0.5 | 6 / 1 | 2 | 14.4 / 14.2 / - | 300 / 180 / 90 |" in row
