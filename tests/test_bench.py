"""Smoke test of the benchmark: a few targets for a few seconds through all four designs,
as a user runs it, with a small cache, short runs aged before the window. It proves the
command works and prints every column; the real runs are on demand (`make bench`)."""

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.report import COLUMNS, SCALE_COLUMNS

DESIGNS = ("pricewatch", "schedules", "poller", "bare")
LOOPS = ("pricewatch", "bare")
AGED = 3
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def scratch() -> Iterator[Path]:
    """The run's own temp dir, so that other runs beside it do not count (short: Postgres's
    socket lives under it)."""
    path = Path(tempfile.mkdtemp(prefix="pwb-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.long
async def test_bench_runs_every_design_and_prints_every_column(scratch: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench", "--targets", "4", "--interval", "1", "--seconds", "3",
        "--workers", "2", "--cache", "1", "--checks-per-run", "5", "--aged", str(AGED),
        "--designs", ",".join(DESIGNS), "--json",
        cwd=REPO, env={**os.environ, "TMPDIR": str(scratch)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=200)
    assert process.returncode == 0, err.decode()[-3000:]
    table = err.decode()
    for header, _ in COLUMNS + SCALE_COLUMNS:
        assert header in table
    assert "late p99 per interval" in table
    assert "fewer than --aged" not in table
    rows = {line.split()[0] for line in table.splitlines() if line.strip()}
    ratios = {f"pricewatch/{name}" for name in DESIGNS[1:]}
    assert {*DESIGNS, *ratios} <= rows

    report = json.loads(out)
    assert report["date"] and report["commit"], "a run is dated and names its commit"
    assert (
        report["workload"] | {"cache": 1, "checks_per_run": 5, "aged": AGED} == report["workload"]
    )
    by_name = {design["design"]: design for design in report["designs"]}
    assert list(by_name) == list(DESIGNS)
    assert by_name["pricewatch"]["worker_gc_seconds_per_check"] > 0
    for name, design in by_name.items():
        assert design["checks_per_s"] > 0, name
        assert design["slots_missed"] >= 0, name
        assert 0 <= design["lateness_p50_s"] <= design["lateness_max_s"], name
        assert design["sql_round_trips_per_check"] >= 1, name
        assert all(value > 0 for value in design["cpu_seconds_per_check"].values() if value), name
        assert design["peak_rss_mib"]["worker"] > 0, name
        assert 0 < design["worker_peak_mib_last_fifth"] <= design["peak_rss_mib"]["worker"], name
        timeline = design["lateness_p99_per_interval_s"]
        assert len(timeline["window"]) == 3 and any(timeline["window"]), name
        assert design["registration_s"] > 0 and design["warm_up_s"] >= AGED - 1, name
        assert design["database_rows"] >= 4 * AGED, name
        assert 0 < design["source_checks_mib"] < design["database_mib"], name
    for name in ("pricewatch", "schedules", "bare"):
        assert by_name[name]["history_events_per_check"] >= 5
        assert by_name[name]["workflow_tasks_per_check"] >= 1
        assert by_name[name]["storage_bytes_per_check"] is not None
        assert by_name[name]["cache_misses_per_check"] is not None, name
    assert by_name["poller"]["history_events_per_check"] is None
    assert by_name["poller"]["cache_misses_per_check"] is None
    for name in LOOPS:
        # Four targets, one cached workflow per worker: most wake-ups replay their run.
        design = by_name[name]
        assert design["cache_misses_per_check"] > 0, name
        assert design["checks_per_run_at_window_start"] >= AGED, name
        assert design["run_events_at_wake_up"] > 6, name  # a check's events at least
        assert 0 < design["events_replayed_per_wake_up"] <= design["run_events_at_wake_up"]
        stages = design["lateness_p99_by_stage_s"]
        assert list(stages) == ["timer fired late", "task waited", "task ran"]
        assert None not in stages.values(), stages
    assert set(report["ratios"]) == ratios
    left = await asyncio.to_thread(lambda: list(scratch.glob("pricewatch-bench-*")))
    assert not left, "the benchmark removes its temporary directory"


def test_the_calendar_design_is_the_interval_workload_on_a_cron_grid() -> None:
    """`pricewatch-calendar` (issue 31): the same rate and spread as `pricewatch`, each
    target on `* * * * *` offset within the minute; an interval cron cannot give is refused
    before anything starts (the run itself takes minutes: `make bench`)."""
    from bench.__main__ import parse
    from bench.designs import Workload
    from bench.stack import Stack

    with pytest.raises(SystemExit):
        parse(["--designs", "pricewatch,pricewatch-calendar", "--interval", "20"])
    assert parse(["--designs", "pricewatch-calendar", "--interval", "300"]).interval == 300
    workload = Workload(targets=4, interval=60, seconds=60)
    unstarted = Stack(Path("unused"), "postgresql://bench@/bench?host=/unused", postgres_pid=0)
    configs = workload.calendar_configs(unstarted)
    assert [c.calendar and c.calendar.cron for c in configs] == ["* * * * *"] * 4
    assert [c.calendar and c.calendar.offset_seconds for c in configs] == [0, 15, 30, 45]
    assert {c.interval_seconds for c in configs} == {60}


def test_figures_are_generated_into_the_docs_block(tmp_path: Path) -> None:
    """`python -m bench.figures` turns saved runs into one dated table between the markers
    of a document, leaving the rest of it alone."""
    from bench import figures

    run = {
        "date": "2026-11-30T22:00:00+00:00",
        "commit": "abc1234",
        "workload": {
            "targets": 200,
            "interval": 10,
            "seconds": 30.0,
            "workers": 1,
            "cache": 100,
            "checks_per_run": 50,
            "aged": 40,
        },
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
                "registration_s": 8.5,
                "worker_gc_seconds_per_check": 0.0004,
                "cache_hits_per_check": 0.5,
                "cache_misses_per_check": 0.5,
                "checks_per_run_at_window_start": 40.5,
                "run_events_at_wake_up": 250.0,
                "events_replayed_per_wake_up": 125.0,
                "database_rows": 12000,
                "source_checks_mib": 3.2,
                "database_mib": 11.0,
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
    assert "2026-11-30 `abc1234`" in row
    assert "200 / 10 s, 30 s, cache 100, 50 chk/run, aged 40" in row
    assert "| 20 | 0 | 0.1 / 0.4 / 0.5 | 6 / 1 | 2 | 14.4 / 14.2 / - | 300 / 180 / 90 |" in row
    assert "| 8.5 | 0.4 | 0.5 / 0.5 | 40.5 / 250 / 125 | 12000 / 3.2 / 11 | - / - |" in row


async def test_the_collector_bench_prints_pauses_and_evicted_cycles() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.collector", "--workflows", "5", cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()[-3000:]
    first, evicted, *types = out.decode().splitlines()
    assert first.startswith("5 cached workflows: ") and "us per cached workflow" in first, first
    cycled = int(evicted.removeprefix("evicting 5 left ").split()[0])
    assert cycled > 50, evicted  # a whole workflow: its loop, tasks and coroutines
    assert any(line.split()[-1] == "coroutine" for line in types), types
