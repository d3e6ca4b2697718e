"""`python -m bench.render [--json] [--seconds W] [--targets N] [--interval S] [--write]
[--kill-browser] [--venv-cache] [--like-for-like]`: the rendering regime (issue 30).

One script-rendered pricing page on 127.0.0.1 (bench/spa.py), N targets due every S seconds,
measured for W seconds after a warm-up, in turn:

1. pricewatch as shipped: embedded Postgres, a Temporal dev server, a plain `pricewatch
   worker` and a render worker (PRICEWATCH_RENDER=true, its default concurrency), the targets
   added with `pricewatch add --render --step 'wait td.price' --price-selector td.price`;
2. changedetection.io's Playwright fetcher (bench/cdio_driver.py) in a venv of its own,
   connected over CDP to a Chromium started here with the product's launch flags.

With --like-for-like (issue 42) both read the page as soon as it can be: pricewatch's targets
have no step (the render waits for the price selector itself), and changedetection.io waits
LIKE_FOR_LIKE_WAIT (its wait is whole seconds: the least it takes) with no screenshot where its
fetcher allows it. CPU is also counted over each whole stack (pricewatch's Temporal server,
Postgres and plain worker too).

Everything started here is stopped by its PID and the temporary directory removed, also on
Ctrl-C or a failure.
"""

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx

from bench.designs import PRICEWATCH, Workload
from bench.render_doc import as_json, table, write
from bench.render_procs import Meter
from bench.spa import PLANS, PRICE_SELECTOR, STEP, serve_spa
from bench.stack import REPO, Stack, open_stack
from pricewatch.settings import Settings
from workers.chromium import chromium_args, find_chromium
from workers.embedded import free_port, stop_process

WARMUP_INTERVALS = 2  # the first render launches the browser; the first check is a baseline
CDIO_WORKERS = 5  # changedetection.io's default (settings.requests.workers, FETCH_WORKERS)
CDIO_PACKAGES = ["changedetection.io", "playwright"]  # its Playwright fetcher needs the second
# changedetection.io's wait before reading in the like-for-like regime: whole seconds, and
# the page's price is there 100 ms after load (pricewatch's render waits for it).
LIKE_FOR_LIKE_WAIT = "1"
VENV_CACHE = Path.home() / ".cache" / "pricewatch-bench" / "changedetection.io-venv"
# Written by the script: a render that has it ran the script (the rows keep the amount).
MARKER = f"EUR {PLANS[1][1]}"

FAILED_ROWS = """
SELECT status, attempt_count, error_message, count(*) AS slots FROM source_checks
 WHERE kind = 'scheduled' AND scheduled_for >= $1 AND scheduled_for < $2
   AND status IN ('failed', 'retrying')
 GROUP BY 1, 2, 3 ORDER BY 4 DESC
"""
WINDOW_ROWS = """
SELECT count(*) FILTER (WHERE checked_at >= $1 AND checked_at < $2
                          AND status IN ('unchanged', 'changed')) AS renders,
       count(*) FILTER (WHERE scheduled_for >= $1 AND scheduled_for < $2
                          AND status <> 'skipped') AS recorded,
       count(*) FILTER (WHERE scheduled_for >= $1 AND scheduled_for < $2
                          AND status IN ('failed', 'retrying')) AS failed,
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY late)
           FILTER (WHERE scheduled_for >= $1 AND scheduled_for < $2 AND status <> 'skipped')
           AS lateness,
       max(late) FILTER (WHERE scheduled_for >= $1 AND scheduled_for < $2
                           AND status <> 'skipped') AS worst,
       bool_and(prices::text LIKE '%' || $3 || '%')
           FILTER (WHERE checked_at >= $1 AND checked_at < $2
                     AND status IN ('unchanged', 'changed')) AS saw_prices
  FROM (SELECT *, extract(epoch FROM checked_at - scheduled_for)::float8 AS late
          FROM source_checks WHERE kind = 'scheduled') AS rows
"""


@dataclass
class RenderResult:
    design: str
    version: str
    concurrency: int
    """Renders at once, at most: the render worker's cap, changedetection.io's workers."""
    offered_per_s: float
    renders_per_s: float
    """Renders that completed (a row committed, a fetch returned) in the window, per second."""
    slots_due: int
    slots_missed: int
    """Due in the window, no result one interval after it (no row, a `skipped` row)."""
    slots_failed: int
    renders_per_cpu_second: float | None
    cpu_ms_per_render: float | None
    """The render process tree: the worker (driver) and its Playwright driver and Chromium."""
    peak_pss_mib: float
    peak_rss_mib: float
    """RSS summed over the tree: shared pages counted in every process (an upper bound)."""
    peak_pss_mib_per_concurrent_render: float
    lateness_p50_s: float | None
    lateness_p99_s: float | None
    lateness_max_s: float | None
    prices_in_every_render: bool | None
    renders_per_cpu_second_whole_stack: float | None = None
    """pricewatch: with its plain worker, Temporal server and Postgres; changedetection.io:
    its fetch's process tree (it has no other process here)."""
    cpu_ms_per_render_by_component: dict[str, float | None] = field(default_factory=dict)
    """The render tree's CPU by process: the Python worker (driver), the Playwright driver,
    Chromium (browser, renderers, GPU, zygotes)."""
    peak_pss_mib_by_component: dict[str, float] = field(default_factory=dict)
    """The tree's PSS at its peak, by process as above."""
    other_cpu_ms_per_render: dict[str, float | None] = field(default_factory=dict)
    """pricewatch's other processes: the plain worker, the Temporal server, Postgres."""
    browser_kills: int = 0
    notes: list[str] = field(default_factory=list)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.render", description=__doc__)
    parser.add_argument("--targets", type=int, default=10, help="watched pages (default 10)")
    parser.add_argument(
        "--interval", type=int, default=30,
        help="seconds between a target's checks (default 30; a test-only minimum)",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=90, help="measured window per design")
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table: stderr)")
    parser.add_argument(
        "--write", action="store_true",
        help="save the JSON under docs/bench/ and the section in docs/performance.md",
    )  # fmt: skip
    parser.add_argument(
        "--kill-browser", action="store_true",
        help="SIGKILL pricewatch's render Chromium once mid-window (and changedetection.io's)",
    )  # fmt: skip
    parser.add_argument(
        "--venv-cache", action="store_true",
        help=f"keep changedetection.io's venv in {VENV_CACHE} (upgraded each run) instead of "
        "the temporary directory",
    )  # fmt: skip
    parser.add_argument(
        "--like-for-like", action="store_true",
        help="no wait step for pricewatch (it waits for the selector), changedetection.io's "
        "shortest wait and no screenshot (issue 42)",
    )  # fmt: skip
    parser.add_argument(
        "--designs", default="pricewatch,changedetection.io", help="comma-separated, in order"
    )
    args = parser.parse_args(argv)
    args.designs = [name.strip() for name in args.designs.split(",") if name.strip()]
    if unknown := set(args.designs) - {"pricewatch", "changedetection.io"}:
        parser.error(f"unknown design(s): {', '.join(sorted(unknown))}")
    if args.targets < 1 or args.interval < 1 or args.seconds <= 0:
        parser.error("--targets, --interval and --seconds must be positive")
    return args


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def lead_seconds(targets: int) -> float:
    """Until the first slot: each `pricewatch add` is a process of its own (about 1.5 s on
    two cores, two at a time)."""
    return 8 + 1.0 * targets


async def add_target(
    env: dict[str, str], target_id: str, url: str, every: int, at: datetime, step: bool = True
) -> None:
    process = await asyncio.create_subprocess_exec(
        PRICEWATCH, "add", target_id, url, "--every", f"{every}s",
        "--start-at", at.isoformat(timespec="milliseconds"), "--render",
        *(["--step", STEP] if step else []), "--price-selector", PRICE_SELECTOR, env=env,
        stdin=subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"pricewatch add {target_id} failed: {out.decode()[-1000:]}")


def _python_path() -> list[str]:
    return [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]


def render_concurrency() -> int:
    configured = os.environ.get("PRICEWATCH_RENDER_CONCURRENCY")
    factory = Settings.model_fields["render_concurrency"].default_factory
    assert factory is not None
    return int(configured) if configured else int(factory())  # type: ignore[call-arg]


async def run_pricewatch(stack: Stack, spa: str, args: argparse.Namespace) -> RenderResult:
    workload = Workload(targets=args.targets, interval=args.interval, seconds=args.seconds)
    database = await stack.database("bench_render")
    pool = await asyncpg.create_pool(database.direct_url, min_size=1, max_size=4)
    try:
        with stack.temporal("pricewatch") as temporal:
            # TEST-ONLY: the product refuses intervals under 15 minutes.
            env = {
                **stack.design_env(database, temporal),
                "PRICEWATCH_MIN_INTERVAL": "1s",
                # The code of this checkout (a worktree, say), not the editable install's.
                "PYTHONPATH": os.pathsep.join([str(REPO), *_python_path()]),
            }
            render_env = {**env, "PRICEWATCH_RENDER": "true"}
            async with (
                stack.process("pricewatch-worker", [PRICEWATCH, "worker"], env) as plain,
                stack.process("pricewatch-render", [PRICEWATCH, "worker"], render_env) as render,
            ):
                base = datetime.now(UTC).replace(microsecond=0) + timedelta(
                    seconds=round(lead_seconds(args.targets))
                )
                anchors = workload.anchors(base)
                gate = asyncio.Semaphore(2)

                async def add(target_id: str, anchor: datetime) -> None:
                    async with gate:
                        await add_target(
                            env, target_id, f"{spa}/pricing/{target_id}", args.interval, anchor,
                            step=not args.like_for_like,
                        )  # fmt: skip

                started = time.monotonic()
                await asyncio.gather(
                    *(add(t, a) for t, a in zip(workload.target_ids, anchors, strict=True))
                )
                ahead = (base - datetime.now(UTC)).total_seconds()
                took = time.monotonic() - started
                say(f"  pricewatch: {args.targets} targets added in {took:.1f} s, "
                    f"{ahead:.1f} s before the first slot")  # fmt: skip
                start = base + timedelta(seconds=WARMUP_INTERVALS * args.interval)
                end = start + timedelta(seconds=args.seconds)
                await asyncio.sleep((start - datetime.now(UTC)).total_seconds())
                meter = Meter(
                    {
                        "render": [render.pid],
                        "worker": [plain.pid],
                        "server": [temporal.process.pid],
                        "postgres": [stack.postgres_pid],
                    }
                )
                kill_at = start + (end - start) / 2 if args.kill_browser else None
                await meter.measure(end, kill_at)
                await asyncio.sleep(args.interval)  # the window's last slots may still land
                rows = await pool.fetchrow(WINDOW_ROWS, start, end, PLANS[1][1])
                errors = await pool.fetch(FAILED_ROWS, start, end)
    finally:
        await pool.close()
    assert rows is not None
    due = workload.slots_due(anchors, start, end)
    renders = int(rows["renders"])
    lateness = rows["lateness"] or [None, None]
    concurrency = render_concurrency()
    cpu = meter.cpu("render")
    whole = cpu + sum(meter.cpu(role) for role in ("worker", "server", "postgres"))
    return RenderResult(
        design="pricewatch",
        version=_pricewatch_version(),
        concurrency=concurrency,
        offered_per_s=workload.offered_per_second,
        renders_per_s=renders / args.seconds,
        slots_due=due,
        slots_missed=due - int(rows["recorded"]),
        slots_failed=int(rows["failed"]),
        renders_per_cpu_second=renders / cpu if cpu else None,
        cpu_ms_per_render=1000 * cpu / renders if renders else None,
        peak_pss_mib=meter.peak_pss / 2**20,
        peak_rss_mib=meter.peak_rss / 2**20,
        peak_pss_mib_per_concurrent_render=meter.peak_pss / 2**20 / concurrency,
        lateness_p50_s=lateness[0],
        lateness_p99_s=lateness[1],
        lateness_max_s=rows["worst"],
        prices_in_every_render=rows["saw_prices"],
        renders_per_cpu_second_whole_stack=renders / whole if whole else None,
        other_cpu_ms_per_render={
            role: 1000 * meter.cpu(role) / renders if renders else None
            for role in ("worker", "server", "postgres")
        },
        browser_kills=len(meter.killed),
        cpu_ms_per_render_by_component=_per_render(meter.cpu_split(), renders),
        peak_pss_mib_by_component={k: v / 2**20 for k, v in meter.peak_pss_split.items()},
        notes=[
            "no wait step: the render waits for td.price itself"
            if args.like_for_like
            else f"a --step '{STEP}'",
            "a screenshot only for a new state (the baseline is in the warm-up): none in "
            "the window, every check is unchanged",
            *(
                f"{row['slots']} slot(s) {row['status']} after {row['attempt_count']} "
                f"attempt(s): {row['error_message']}"
                for row in errors
            ),
            *_kill_note(meter),
        ],
    )


def _pricewatch_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pricewatch")
    except metadata.PackageNotFoundError:
        return "checkout"


def spawn(
    args: list[str], log: Path, env: dict[str, str] | None = None, group: bool = False
) -> subprocess.Popen[bytes]:
    """A process whose output goes to `log`; the caller stops it by its PID (`group`: in a
    process group of its own, to stop with what it started: Debian's Chromium wrappers are
    shell scripts whose browser outlives them)."""
    with open(log, "ab") as out:  # the child keeps its own copy
        return subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=group,
        )  # fmt: skip


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group `spawn(group=True)` made; after its leader exits (10 s
    at most), SIGKILL to whatever of the group is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def tail(log: Path, whole: bool = False) -> str:
    text = log.read_text(errors="replace")
    return text if whole else text[-2000:]


async def _run(args: list[str], log: Path) -> None:
    """A command run to its end (15 minutes at most), killed by its PID if cancelled."""
    process = spawn(args, log)
    try:
        code = await asyncio.to_thread(process.wait, 900)
    finally:
        await asyncio.to_thread(stop_process, process, 5)
    if code != 0:
        raise RuntimeError(f"{args[0]} {' '.join(args[1:3])} failed:\n{tail(log)}")


async def cdio_venv(root: Path, cached: bool) -> Path:
    """changedetection.io's own venv (never a project dependency): its latest release and the
    Playwright its fetcher imports. In the temporary directory, or with --venv-cache in
    ~/.cache/pricewatch-bench (upgraded to the latest each run)."""
    venv = VENV_CACHE if cached else root / "cdio-venv"
    python = venv / "bin" / "python"
    log = root / "cdio-install.log"
    started = time.monotonic()
    if not (venv / ".installed").exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        await _run([sys.executable, "-m", "venv", "--clear", str(venv)], log)
    await _run([str(python), "-m", "pip", "install", "-q", "--upgrade", *CDIO_PACKAGES], log)
    (venv / ".installed").touch()
    say(f"  changedetection.io: venv {venv} ready in {time.monotonic() - started:.0f} s")
    return python


@contextlib.asynccontextmanager
async def cdp_chromium(root: Path) -> AsyncIterator[tuple[subprocess.Popen[bytes], str]]:
    """A Chromium listening for CDP on 127.0.0.1, with the flags the product launches with."""
    port = free_port()
    args = [
        str(find_chromium()), *chromium_args(), "--headless",
        f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
        f"--user-data-dir={root / 'cdio-chromium'}", "about:blank",
    ]  # fmt: skip
    process = spawn(
        args, root / "cdio-chromium.log", {**os.environ, "TMPDIR": str(root)}, group=True
    )
    try:
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(trust_env=False) as http:
            for _ in range(100):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{url}/json/version")).status_code == 200:
                        break
                if process.poll() is not None:
                    raise RuntimeError("Chromium for changedetection.io exited at start")
                await asyncio.sleep(0.2)
            else:
                raise RuntimeError("Chromium for changedetection.io never listened for CDP")
        yield process, url
    finally:
        await asyncio.to_thread(stop_group, process)


async def run_cdio(root: Path, spa: str, python: Path, args: argparse.Namespace) -> RenderResult:
    workload = Workload(targets=args.targets, interval=args.interval, seconds=args.seconds)
    base = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5)
    anchors = workload.anchors(base)
    start = base + timedelta(seconds=WARMUP_INTERVALS * args.interval)
    end = start + timedelta(seconds=args.seconds)
    out = root / "cdio-results.jsonl"
    async with cdp_chromium(root) as (chromium, cdp):
        config = {
            "cdp": cdp,
            "watches": [
                {"url": f"{spa}/pricing/{target_id}", "anchor": anchor.timestamp()}
                for target_id, anchor in zip(workload.target_ids, anchors, strict=True)
            ],
            "interval": args.interval,
            "until": end.timestamp(),
            "workers": CDIO_WORKERS,
            "selector": PRICE_SELECTOR,
            "marker": MARKER,
        }
        (root / "cdio-config.json").write_text(json.dumps(config))
        driver_args = [str(python), str(REPO / "bench" / "cdio_driver.py"),
                       str(root / "cdio-config.json"), str(out)]  # fmt: skip
        log = root / "cdio-driver.log"
        wait = {"WEBDRIVER_DELAY_BEFORE_CONTENT_READY": LIKE_FOR_LIKE_WAIT}
        env = {**os.environ, "TMPDIR": str(root), **(wait if args.like_for_like else {})}
        driver = spawn(driver_args, log, env)
        try:
            await asyncio.sleep((start - datetime.now(UTC)).total_seconds())
            if driver.poll() is not None:
                raise RuntimeError(f"changedetection.io's driver exited:\n{tail(log)}")
            meter = Meter({"render": [driver.pid, chromium.pid]})
            kill_at = start + (end - start) / 2 if args.kill_browser else None
            await meter.measure(end, kill_at)
            with contextlib.suppress(subprocess.TimeoutExpired):  # its last fetches land
                await asyncio.to_thread(driver.wait, args.interval + 60)
        finally:
            await asyncio.to_thread(stop_process, driver)
    lines = [json.loads(line) for line in tail(out, whole=True).splitlines()]
    version = f"{lines[0]['version']} (Playwright {lines[0].get('playwright', '?')})"
    slots = [row for row in lines[1:] if start.timestamp() <= row["due"] < end.timestamp()]
    closes = end.timestamp() + args.interval
    landed = [row for row in slots if row["finished"] is not None and row["finished"] < closes]
    late = sorted(row["finished"] - row["due"] for row in landed)
    renders = [
        row
        for row in lines[1:]
        if row.get("ok") and start.timestamp() <= row["finished"] < end.timestamp()
    ]
    due = workload.slots_due(anchors, start, end)
    cpu = meter.cpu("render")
    return RenderResult(
        design="changedetection.io",
        version=version,
        concurrency=CDIO_WORKERS,
        offered_per_s=workload.offered_per_second,
        renders_per_s=len(renders) / args.seconds,
        slots_due=due,
        slots_missed=due - len(landed),
        slots_failed=sum(not row["ok"] for row in landed),
        renders_per_cpu_second=len(renders) / cpu if cpu else None,
        cpu_ms_per_render=1000 * cpu / len(renders) if renders else None,
        peak_pss_mib=meter.peak_pss / 2**20,
        peak_rss_mib=meter.peak_rss / 2**20,
        peak_pss_mib_per_concurrent_render=meter.peak_pss / 2**20 / CDIO_WORKERS,
        lateness_p50_s=_quantile(late, 0.5),
        lateness_p99_s=_quantile(late, 0.99),
        lateness_max_s=late[-1] if late else None,
        prices_in_every_render=all(row["prices"] for row in renders) if renders else None,
        renders_per_cpu_second_whole_stack=len(renders) / cpu if cpu else None,
        browser_kills=len(meter.killed),
        cpu_ms_per_render_by_component=_per_render(meter.cpu_split(), len(renders)),
        peak_pss_mib_by_component={k: v / 2**20 for k, v in meter.peak_pss_split.items()},
        notes=[
            *_kill_note(meter),
            (
                f"like for like: a {LIKE_FOR_LIKE_WAIT} s wait "
                "(WEBDRIVER_DELAY_BEFORE_CONTENT_READY, whole seconds), no screenshot where "
                "its fetcher allows it"
                if args.like_for_like
                else "its defaults: a 5 s wait (WEBDRIVER_DELAY_BEFORE_CONTENT_READY) and a "
                "JPEG screenshot every check"
            )
            + ", a Playwright driver per fetch; the fetch only (no filtering, diff or "
            "history write)",
            f"{sum(r.get('screenshot_bytes', 0) for r in renders) // max(1, len(renders))} "
            "bytes of screenshot per render",
            *(
                f"{count} slot(s) failed: {error}"
                for error, count in Counter(
                    row["error"].strip().splitlines()[0] for row in slots if not row["ok"]
                ).most_common(3)
            ),
        ],
    )


def _kill_note(meter: Meter) -> list[str]:
    if not meter.killed:
        return []
    return ["CPU undercounted: the killed browser's processes took their CPU with them"]


def _per_render(cpu: dict[str, float], renders: int) -> dict[str, float | None]:
    return {name: 1000 * seconds / renders if renders else None for name, seconds in cpu.items()}


def _quantile(ordered: list[float], q: float) -> float | None:
    """Linear interpolation, as Postgres's percentile_cont."""
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


async def run(args: argparse.Namespace) -> list[RenderResult]:
    results = []
    async with open_stack() as stack, serve_spa() as spa:
        python = None
        if "changedetection.io" in args.designs:  # first: the install would steal CPU later
            python = await cdio_venv(stack.root, args.venv_cache)
        for name in args.designs:
            say(f"running {name} ...")
            if name == "pricewatch":
                results.append(await run_pricewatch(stack, spa, args))
            else:
                assert python is not None
                results.append(await run_cdio(stack.root, spa, python, args))
    return results


async def main(argv: list[str]) -> None:
    args = parse(argv)
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    results = await run(args)
    workload = {
        "targets": args.targets, "interval": args.interval, "seconds": args.seconds,
        "warm_up_intervals": WARMUP_INTERVALS, "kill_browser": args.kill_browser,
    }  # fmt: skip
    command = "python -m bench.render " + " ".join(
        arg for arg in sys.argv[1:] if arg not in {"--json", "--write"}
    )
    text = table(results, workload)
    print(text, file=sys.stderr if args.json else sys.stdout, flush=True)
    document = as_json(results, workload, command.strip())
    if args.json:
        print(document, flush=True)
    if args.write:
        for path in write(document):
            say(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
