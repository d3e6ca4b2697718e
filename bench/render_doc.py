"""The rendering regime's output: its table, its JSON, and with --write the saved run under
docs/bench/ and the "## Rendering (issue 30)" section of docs/performance.md."""

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.report import commit_name
from bench.stack import REPO

if TYPE_CHECKING:
    from bench.render import RenderResult

HEADING = "## Rendering (issue 30)"
# (header, field, format): the table's columns.
COLUMNS: list[tuple[str, str, str]] = [
    ("renders/s", "renders_per_s", ".3g"),
    ("offered", "offered_per_s", ".3g"),
    ("renders/CPU-s", "renders_per_cpu_second", ".3g"),
    ("CPU ms/render", "cpu_ms_per_render", ".0f"),
    ("renders/CPU-s whole stack", "renders_per_cpu_second_whole_stack", ".3g"),
    ("peak PSS MiB", "peak_pss_mib", ".0f"),
    ("RSS MiB", "peak_rss_mib", ".0f"),
    ("at once", "concurrency", "d"),
    ("MiB/render at once", "peak_pss_mib_per_concurrent_render", ".0f"),
    ("due", "slots_due", "d"),
    ("missed", "slots_missed", "d"),
    ("failed", "slots_failed", "d"),
    ("late p50 s", "lateness_p50_s", ".3g"),
    ("p99 s", "lateness_p99_s", ".3g"),
    ("max s", "lateness_max_s", ".3g"),
]
RATIO_KEYS = ("renders_per_cpu_second", "renders_per_cpu_second_whole_stack",
              "cpu_ms_per_render", "peak_pss_mib", "peak_pss_mib_per_concurrent_render",
              "lateness_p99_s")  # fmt: skip
# The designs' rows of the section's table (a Markdown row is one line).
DESIGN_ROWS = "\n".join(
    [
        (
            "| `pricewatch` | bench/stack.py's embedded Postgres and a Temporal dev server, a"
            " plain `pricewatch worker` and a render worker (`PRICEWATCH_RENDER=true`, its "
            "default concurrency: the CPU count); the targets added with `pricewatch add "
            "--render --step 'wait td.price' --price-selector td.price` (test-only "
            "`PRICEWATCH_MIN_INTERVAL=1s`) |"
        ),
        (
            "| `changedetection.io` | its latest release from PyPI (and Playwright, which its"
            " fetcher imports) in a venv of its own; `bench/cdio_driver.py` builds its "
            "`content_fetchers.playwright.fetcher` as its processor does and awaits `run()` "
            "for each due watch, 5 fetch workers (its default), connected over CDP "
            "(`PLAYWRIGHT_DRIVER_URL`) to a Chromium started with the product's launch flags;"
            " all its defaults kept: a 5 s wait before reading, a JPEG screenshot every "
            "check, a Playwright driver process per fetch. Only the fetch runs, not its "
            "filtering, diff or history write: its cost here is a lower bound |"
        ),
    ]
)
TARGETS = {"renders_per_cpu_second": 3.0, "mib_per_concurrent_render": 60.0}


def _cell(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def ratios(results: list["RenderResult"]) -> dict[str, float | None]:
    by_name = {result.design: asdict(result) for result in results}
    if not {"pricewatch", "changedetection.io"} <= by_name.keys():
        return {}
    ours, theirs = by_name["pricewatch"], by_name["changedetection.io"]
    return {
        key: ours[key] / theirs[key] if ours[key] is not None and theirs[key] else None
        for key in RATIO_KEYS
    }


def grid(results: list["RenderResult"]) -> list[str]:
    headers = ["design", *(header for header, _, _ in COLUMNS)]
    rows = [
        [result.design, *(_cell(getattr(result, key), spec) for _, key, spec in COLUMNS)]
        for result in results
    ]
    if ratio := ratios(results):
        rows.append(
            ["pricewatch/changedetection.io"]
            + [f"{ratio[key]:.2g}x" if ratio.get(key) else "" for _, key, _ in COLUMNS]
        )
    widths = [max(len(line[i]) for line in [headers, *rows]) for i in range(len(headers))]
    return [
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True))
        for line in [headers, *rows]
    ]


def table(results: list["RenderResult"], workload: dict[str, Any]) -> str:
    lines = [
        f"{workload['targets']} targets every {workload['interval']} s (test-only interval) "
        f"of one script-rendered page, {workload['seconds']:g} s window after "
        f"{workload['warm_up_intervals']} intervals of warm-up"
        + (", its Chromium SIGKILLed once mid-window" if workload["kill_browser"] else ""),
        "renders: completed in the window; CPU and MiB: the render process tree (worker or "
        "driver, its Playwright driver, Chromium and its children), PSS peak sampled every "
        "1 s, RSS summed (shared pages counted per process); at once: the concurrency cap; "
        "missed: due in the window, no result one interval after; late: done minus due",
        "",
        *grid(results),
    ]
    for result in results:
        notes = (note.strip().splitlines()[0] for note in result.notes if note.strip())
        lines.append(f"{result.design} {result.version}: " + "; ".join(notes))
        if result.prices_in_every_render is not None:
            seen = "every" if result.prices_in_every_render else "NOT every"
            lines.append(f"  the script's prices were in {seen} render of the window")
        if by_process := result.cpu_ms_per_render_by_component:
            cpus = ", ".join(f"{name} {_cell(ms, '.0f')}" for name, ms in by_process.items())
            mibs = ", ".join(
                f"{name} {mib:.0f}" for name, mib in result.peak_pss_mib_by_component.items()
            )
            lines.append(f"  render tree by process: CPU ms/render {cpus}; MiB at the peak {mibs}")
        if result.browser_kills:
            lines.append(f"  Chromium SIGKILLed {result.browser_kills} time(s) mid-window")
        if other := result.other_cpu_ms_per_render:
            split = ", ".join(f"{role} {_cell(ms, '.1f')}" for role, ms in other.items())
            whole = (result.cpu_ms_per_render or 0) + sum(ms or 0 for ms in other.values())
            lines.append(f"  CPU ms per render in the rest of its stack: {split}; with them "
                         f"{whole:.0f} ms, {1000 / whole:.3g} renders per CPU-second"
                         if whole else "")  # fmt: skip
    return "\n".join(lines)


def as_json(results: list["RenderResult"], workload: dict[str, Any], command: str) -> str:
    return json.dumps(
        {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": commit_name(),
            "command": command,
            "workload": workload,
            "designs": [asdict(result) for result in results],
            "ratios": ratios(results),
        },
        indent=2,
    )


def reading(run: dict[str, Any]) -> str:
    """One paragraph: the run against issue 30's targets."""
    by_name = {design["design"]: design for design in run["designs"]}
    ours = by_name.get("pricewatch")
    if ours is None:
        return "This run did not include pricewatch."
    parts = []
    ratio = run["ratios"].get("renders_per_cpu_second")
    if run["workload"]["kill_browser"]:
        parts.append(
            "pricewatch's CPU figures are not read against the target (a killed browser's "
            "processes take their CPU with them)"
        )
    elif ratio is not None:
        verdict = "meets" if ratio >= TARGETS["renders_per_cpu_second"] else "misses"
        parts.append(
            f"pricewatch's render worker did {ours['renders_per_cpu_second']:.3g} renders per "
            f"CPU-second against changedetection.io's "
            f"{by_name['changedetection.io']['renders_per_cpu_second']:.3g}: {ratio:.2g}x, "
            f"which {verdict} the target of at least 3x"
        )
    per = ours["peak_pss_mib_per_concurrent_render"]
    verdict = "within" if per <= TARGETS["mib_per_concurrent_render"] else "over"
    parts.append(
        f"its render tree peaked at {ours['peak_pss_mib']:.0f} MiB PSS for "
        f"{ours['concurrency']} renders at once, {per:.0f} MiB per concurrent render, "
        f"{verdict} the 60 MiB target"
        + (
            " (at the peak: "
            + ", ".join(f"{name} {mib:.0f} MiB" for name, mib in split.items())
            + ")"
            if (split := ours.get("peak_pss_mib_by_component"))
            else ""
        )
    )
    kill = " with its Chromium SIGKILLed mid-window" if run["workload"]["kill_browser"] else ""
    parts.append(
        f"{ours['slots_missed']} of {ours['slots_due']} due slots were missed{kill} "
        f"(the target is 0) and {ours['slots_failed']} failed"
    )
    if ours["lateness_p99_s"] is not None:
        parts.append(
            f"p99 lateness was {ours['lateness_p99_s']:.2f} s, the render itself included "
            f"(commit minus due)"
        )
    other = by_name.get("changedetection.io")
    if other and other["lateness_p99_s"] is not None:
        parts.append(
            f"changedetection.io's was {other['lateness_p99_s']:.2f} s, 5 s of it its "
            f"default wait before reading the page"
            + (
                f", and {other['slots_missed']} of its slots missed, {other['slots_failed']} failed"
                if other["slots_missed"] or other["slots_failed"]
                else ""
            )
        )
    return "In this run " + "; ".join(parts) + "."


def _wrap(text: str) -> str:
    return textwrap.fill(text, 95, break_on_hyphens=False, break_long_words=False)


def further(run: dict[str, Any], saved: Path) -> str:
    """Another run under the first (`--kill-browser`, say): its table and reading."""
    results = [_result(design) for design in run["designs"]]
    return f"""
{
        _wrap(
            f"Also `{run['command']}` ({run['date']}, commit `{run['commit']}`, saved as "
            f"`{saved.relative_to(REPO)}`):"
        )
    }

```
{table(results, run["workload"])}
```

{_wrap(reading(run))}
"""


def section(run: dict[str, Any], text: str, saved: Path) -> str:
    return f"""{HEADING}

`.venv/bin/python -m bench.render` (`--targets N --interval S --seconds W`, default 10
targets every 30 s for 90 s; `--json` prints JSON on stdout and the table on stderr;
`--write` saves the run as `docs/bench/DATE-render-NxSs.json` and rewrites this section;
`--kill-browser` SIGKILLs each design's Chromium once mid-window; `--venv-cache` keeps
changedetection.io's venv in `~/.cache/pricewatch-bench/changedetection.io-venv`, upgraded on
each run, instead of installing it into the run's temporary directory). It serves one
script-rendered pricing page on 127.0.0.1 (`bench/spa.py`: a 3 KiB shell whose plan table a
small script file fills 100 ms after load), and measures in turn, in one run:

| design | what runs |
| --- | --- |
{DESIGN_ROWS}

Both get the same offered schedule (each target's slots spread over the interval as the main
bench spreads them), two intervals of warm-up (the first render launches the browser, the
first check is a baseline) and the window, then one more interval for late slots to land.

- **renders/s**: renders completed in the window (a check row committed, a fetch returned),
  per second; **offered**: targets over interval.
- **renders/CPU-s, CPU ms/render**: CPU of the render process tree from `/proc` (the worker
  or driver, its Playwright driver, Chromium and its renderers, the reaped ones included)
  over the window, per render. pricewatch's other processes are under the table.
- **peak PSS MiB**: the tree's peak proportional set size (shared pages counted once),
  sampled every second; **RSS MiB**: RSS summed over the tree (an upper bound);
  **MiB/render at once**: the PSS peak over the concurrency cap (**at once**). At the
  default rate renders seldom overlap, so the peak is mostly fixed cost (the browser, its
  zygotes, GPU and network processes, the Playwright driver, the worker): what one more
  render at once adds is not measured here.
- **missed**: slots due in the window with no result one interval after it; **failed**: a
  result that is an error. **late**: done (commit, or the fetch returning) minus due.

Read a ratio within one run: the two designs run minutes apart on the same machine, whose
speed moves between runs (and other work may share its two cores). Under each table: each
design's CPU and memory by process (a process that lived between two one-second samples is
"unattributed"), pricewatch's CPU in the rest of its stack, and the errors of failed slots.

{
        _wrap(
            f"The run below (`{run['command']}`, {run['date']}, commit `{run['commit']}`, "
            f"saved as `{saved.relative_to(REPO)}`):"
        )
    }

```
{text}
```

{_wrap(reading(run))}
"""


def save(document: str) -> Path:
    """The run as docs/bench/DATE-render-NxSs[-kill-browser][-K].json."""
    run = json.loads(document)
    workload = run["workload"]
    name = f"{run['date'][:10]}-render-{workload['targets']}x{workload['interval']}s"
    name += "-kill-browser" if workload["kill_browser"] else ""
    saved = REPO / "docs" / "bench" / f"{name}.json"
    n = 1
    while saved.exists():
        n += 1
        saved = saved.with_name(f"{name}-{n}.json")
    saved.write_text(document + "\n")
    return saved


def update_doc(
    run: dict[str, Any], saved: Path, doc: Path, more: Sequence[tuple[dict[str, Any], Path]] = ()
) -> None:
    """Replace (or append) the section of docs/performance.md with this run's (and more)."""
    results = [_result(design) for design in run["designs"]]
    new = section(run, table(results, run["workload"]), saved)
    new += "".join(further(other, path) for other, path in more)
    current = doc.read_text()
    if HEADING in current:
        before, _, rest = current.partition(HEADING)
        after = rest.find("\n## ")
        current = before + new + ("\n" + rest[after + 1 :] if after >= 0 else "")
    else:
        current = current.rstrip("\n") + "\n\n" + new
    doc.write_text(current)


def _result(design: dict[str, Any]) -> "RenderResult":
    from bench.render import RenderResult

    return RenderResult(**design)


def write(document: str) -> list[Path]:
    saved = save(document)
    doc = REPO / "docs" / "performance.md"
    update_doc(json.loads(document), saved, doc)
    return [saved, doc]


def main(argv: list[str]) -> None:
    """`python -m bench.render_doc RUN.json [MORE.json ...] [--write]`: saved runs' tables;
    with --write, the section of docs/performance.md rewritten from them (the first in full,
    the others' tables and readings under it)."""
    parser = argparse.ArgumentParser(prog="python -m bench.render_doc", description=main.__doc__)
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    runs = [(json.loads(path.read_text()), path.resolve()) for path in args.runs]
    for run, _ in runs:
        print(table([_result(design) for design in run["designs"]], run["workload"]) + "\n")
    if args.write:
        (first, saved), *more = runs
        update_doc(first, saved, REPO / "docs" / "performance.md", more)


if __name__ == "__main__":
    main(sys.argv[1:])
