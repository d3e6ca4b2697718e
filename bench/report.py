"""The benchmark's output: one table row per design plus the ratios, or the same as JSON."""

import json
import subprocess
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from bench.measure import ROLES, Result

# (header, the result field it shows; dotted for one process): the table's columns, in order.
COLUMNS: list[tuple[str, str]] = [
    ("checks/s", "checks_per_s"),
    ("missed", "slots_missed"),
    ("late p50", "lateness_p50_s"),
    ("p95", "lateness_p95_s"),
    ("p99", "lateness_p99_s"),
    ("max", "lateness_max_s"),
    ("events/chk", "history_events_per_check"),
    ("wf tasks/chk", "workflow_tasks_per_check"),
    ("SQL rt/chk", "sql_round_trips_per_check"),
    ("store B/chk", "storage_bytes_per_check"),
    *((f"cpu ms/chk {role}", f"cpu_seconds_per_check.{role}") for role in ROLES),
    *((f"MiB {role}", f"peak_rss_mib.{role}") for role in ROLES),
]
LEGEND = (
    "late: commit minus due slot, seconds (p50 p95 p99 max); missed: slots due in the "
    "window with no row one interval after it; rt: round trips on the wire; store: growth "
    "of the dev server's SQLite file and WAL; cpu: per process tree, ms per check; MiB: "
    "peak proportional set size in the window"
)
# The scale figures, a second table under the first.
SCALE_COLUMNS: list[tuple[str, str]] = [
    ("registration s", "registration_s"),
    ("warm-up s", "warm_up_s"),
    ("worker gc ms/chk", "worker_gc_seconds_per_check"),
    ("cache hits/chk", "cache_hits_per_check"),
    ("misses/chk", "cache_misses_per_check"),
    ("chk/run at start", "checks_per_run_at_window_start"),
    ("run events at wake-up", "run_events_at_wake_up"),
    ("replayed/wake-up", "events_replayed_per_wake_up"),
    ("rows", "database_rows"),
    ("source_checks MiB", "source_checks_mib"),
    ("database MiB", "database_mib"),
    ("worker MiB 1st fifth", "worker_peak_mib_first_fifth"),
    ("last fifth", "worker_peak_mib_last_fifth"),
]
SCALE_LEGEND = (
    "registration: first start to every target registered; gc: the worker's garbage-"
    "collection pauses (part of its cpu); cache: the workers' workflow "
    "cache, per check (Prometheus); chk/run at start: checks the current run held at its "
    "first wake-up in the window; run events at wake-up: events the run held when its timer "
    "fired (histories), replayed: that times the share of cache misses; rows and MiB: the "
    "design's database at the window's end; worker MiB: its peak in the window's first and "
    "last fifth"
)


def value(result: Result, key: str) -> float | None:
    data = asdict(result)
    for part in key.split("."):
        data = data[part]
    return None if data is None else float(data)  # type: ignore[arg-type]


def ratios(results: list[Result]) -> dict[str, dict[str, float | None]]:
    """pricewatch over each other design, column by column."""
    by_name = {result.design: result for result in results}
    if "pricewatch" not in by_name:
        return {}
    ours = by_name["pricewatch"]
    out: dict[str, dict[str, float | None]] = {}
    for other in results:
        if other.design == "pricewatch":
            continue
        row: dict[str, float | None] = {}
        for _, key in COLUMNS + SCALE_COLUMNS:
            mine, theirs = value(ours, key), value(other, key)
            row[key] = mine / theirs if mine is not None and theirs else None
        out[f"pricewatch/{other.design}"] = row
    return out


def _cell(key: str, number: float | None) -> str:
    if number is None:
        return "-"
    if key.startswith(("cpu_seconds", "worker_gc_seconds")):
        number *= 1000
    if key == "slots_missed":
        return f"{number:.0f}"
    return f"{number:.3g}" if abs(number) < 1000 else f"{number:.0f}"


def _grid(results: list[Result], columns: list[tuple[str, str]]) -> list[str]:
    """One row per design, then the ratios, right-aligned."""
    headers = ["design", *(header for header, _ in columns)]
    rows = [[r.design, *(_cell(key, value(r, key)) for _, key in columns)] for r in results]
    for name, row in ratios(results).items():
        rows.append([name, *(_ratio(row[key]) for _, key in columns)])
    widths = [max(len(line[i]) for line in [headers, *rows]) for i in range(len(headers))]
    return [
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True))
        for line in [headers, *rows]
    ]


def table(results: list[Result], heading: str) -> str:
    lines = [heading, LEGEND, "", *_grid(results, COLUMNS), "", SCALE_LEGEND, ""]
    lines += _grid(results, SCALE_COLUMNS)
    lines += ["", "late p99 per interval of due slots, seconds (warm-up | window):"]
    width = max(len(result.design) for result in results)
    for result in results:
        timeline = result.lateness_p99_per_interval_s
        cells = [
            " ".join(_cell("", p99) for p99 in timeline[part]) for part in ("warm-up", "window")
        ]
        lines.append(f"{result.design.rjust(width)}  {' | '.join(cells)}")
    for result in results:
        if stages := result.lateness_p99_by_stage_s:
            split = ", ".join(f"{stage} {_cell('', p99)}" for stage, p99 in stages.items())
            lines.append(f"{result.design}: p99 s per stage of a wake-up (histories): {split}")
    return "\n".join(lines)


def _ratio(number: float | None) -> str:
    return "-" if number is None else f"{number:.2g}x"


def as_json(results: list[Result], workload: dict[str, object]) -> str:
    """The run, dated and with the commit it measured (`python -m bench.figures` tables it)."""
    return json.dumps(
        {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": commit_name(),
            "workload": workload,
            "designs": [asdict(result) for result in results],
            "ratios": ratios(results),
        },
        indent=2,
    )


def commit_name() -> str | None:
    """The checkout's commit (with `+` if it has uncommitted changes), if it is one."""
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "describe", "--always", "--dirty=+"], cwd=repo, capture_output=True,
            text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head or None
