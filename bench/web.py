"""`python -m bench.web [--targets 10000] [--history 10000] [--clients 20] [--requests N]
[--json]`: the dashboard and the HTTP API (`pricewatch serve`) under concurrent readers.

Starts its own stack on 127.0.0.1 in a temporary directory (bench/stack.py): an embedded
Postgres, migrated; the benchmark's page server; a Temporal dev server; one `pricewatch
worker` process. One target is real: added through the typed client (`Pricewatch.add`,
every 24h, price mode on the page server's two prices), its workflow running and registered
by the worker, its first check recorded, so its page asks Temporal for its status as in
production. Then, because this measures reads, not writes, the rest is seeded with SQL: the
other targets (every second one in price mode, a few paused or unhealthy, each with
`--rows-per-target` checks, prices on the price-mode ones) and the real target's older
history, up to `--history` rows (every 100th a change of its two prices, some failed and
skipped, the two newest changes with snapshots, so its charts, diff and history paging all
have data). Both tables are analyzed, as autovacuum would have.

`pricewatch serve` runs as its own process (uvicorn, one event loop, the product's client
with its pool of 10 connections), reaching Postgres directly (no counting proxy). Each path
in turn gets a warm-up, then `--clients` concurrent clients (httpx, one keep-alive
connection each, in this process), each sending its next request when the last one is
answered, until `--requests` are answered or `--seconds` pass. Latency is the client's:
request sent to response read. CPU per request is read from /proc for the server process,
Postgres (its backends too), the Temporal dev server, and this process (the clients).
Then a few paths one request at a time, on one kept-alive connection and on a new connection
per request: their medians and ratio (kept-alive / new; the issue's goal is at most 1).
Ctrl-C or a failure stops every process it started, by PID, and removes the directory.
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from temporalio.client import Client

from bench.designs import PRICEWATCH
from bench.procs import cpu_seconds
from bench.report import commit_name
from bench.stack import REPO, TASK_QUEUE, Stack, open_stack, spawn
from client import manifest, plans
from client.pricewatch import Pricewatch
from client.temporal import DATA_CONVERTER
from pricewatch.models import PriceSettings, TargetConfig
from pricewatch.settings import Settings
from readers.snapshots import compress
from workers.embedded import free_port, stop_process

TARGET_ID = "bench-web"  # sorts before the seeded `site-NNNNN`: on the first page
PAGE_SIZE = 50  # the dashboard's (surfaces/web.py)
GOAL_MS = 300.0
READY_TIMEOUT = 60.0
SPACING = timedelta(minutes=15)  # the product's minimum interval: the densest real history
RETENTION = "3650d"  # the seeded rows span more than the default 90 days: keep them
PRICE_SELECTOR = "b"  # the page server's two prices, `price 1` and `price 2`

SEED_TARGETS = """
INSERT INTO monitor_targets (id, url, interval_seconds, enabled, failure_streak, anchor,
                             next_slot, config)
SELECT s.id, s.url, 900, n % 50 <> 0, CASE WHEN n % 40 = 3 THEN 5 ELSE 0 END,
       date_trunc('second', now()) - interval '30 days',
       date_trunc('second', now()) + make_interval(secs => n % 900),
       jsonb_set(jsonb_set(CASE WHEN n % 2 = 0 THEN $1::jsonb ELSE $2::jsonb END,
                           '{target_id}', to_jsonb(s.id)), '{url}', to_jsonb(s.url))
  FROM generate_series(1, $3::integer) n,
       LATERAL (SELECT 'site-' || lpad(n::text, 5, '0') AS id,
                       'https://shop-' || n % 700 || '.example/pricing/' || n AS url) s
"""
# Rows k = 1.. of each chosen target, newest first, `$2` apart, older than `$3`; in each run
# of 100 the oldest is a change (its prices move), one failed, one skipped. `$4`, `$5`: the
# snapshots of the two newest changes. Price amounts by run: e = (k - 1) / 100.
SEED_ROWS = """
INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status, result_hash,
                           previous_hash, http_status, body_bytes, error_message, snapshot,
                           prices)
SELECT slot_work_id(t.id, r.slot), t.id, r.slot, r.slot + interval '0.4 seconds', r.status,
       CASE WHEN r.status IN ('unchanged', 'changed') THEN md5(t.id || r.e) END,
       CASE WHEN r.status = 'changed' THEN md5(t.id || (r.e + 1)) END,
       CASE r.status WHEN 'failed' THEN 503 WHEN 'skipped' THEN NULL ELSE 200 END,
       CASE WHEN r.status IN ('unchanged', 'changed') THEN 2048 END,
       CASE r.status WHEN 'failed' THEN 'HTTP 503 Service Unavailable'
                     WHEN 'skipped' THEN 'not checked: the schedule was behind' END,
       CASE WHEN r.status = 'changed' AND r.k = 100 THEN $4::bytea
            WHEN r.status = 'changed' AND r.k = 200 THEN $5::bytea END,
       CASE WHEN t.priced AND r.status IN ('unchanged', 'changed') THEN jsonb_build_array(
           jsonb_build_object('name', 'price 1', 'currency', 'EUR',
                              'amount', (12 + (r.e * 37 % 50) / 10.0)::numeric(8, 2)::text),
           jsonb_build_object('name', 'price 2', 'currency', 'EUR',
                              'amount', (29 + (r.e * 13 % 40) / 10.0)::numeric(8, 2)::text))
       END
  FROM (SELECT id, jsonb_typeof(config -> 'prices') = 'object' AS priced
          FROM monitor_targets WHERE id = ANY ($1::text[])) t,
       generate_series(1, $6::integer) k,
       LATERAL (SELECT k, (k - 1) / 100 AS e, $3::timestamptz - k * $2::interval AS slot,
                       CASE WHEN k % 100 = 0 THEN 'changed' WHEN k % 100 = 37 THEN 'failed'
                            WHEN k % 100 = 61 THEN 'skipped' ELSE 'unchanged' END AS status
               ) r
"""


@dataclass
class PathResult:
    path: str
    what: str
    clients: int
    requests: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    requests_per_s: float
    meets_goal: bool
    """p99 at most GOAL_MS, and every answer a 200."""
    cpu_ms_per_request: dict[str, float] = field(default_factory=dict)
    first_error: str | None = None


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.web",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--targets", type=int, default=10_000, help="targets in all")
    parser.add_argument("--history", type=int, default=10_000, help="the real target's rows")
    parser.add_argument("--rows-per-target", type=int, default=20, help="each other target's")
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients")
    parser.add_argument("--requests", type=int, default=1000, help="answered requests per path")
    parser.add_argument("--seconds", type=float, default=60, help="at most this long per path")
    parser.add_argument("--warmup", type=int, default=40, help="requests per path first")
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table: stderr)")
    parser.add_argument(
        "--markdown", type=Path, metavar="RUN.json",
        help="print a saved `--json` run as docs/performance.md's table, and run nothing",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if min(args.targets, args.history, args.clients, args.requests) < 1 or args.seconds <= 0:
        parser.error("--targets, --history, --clients, --requests and --seconds must be positive")
    if args.rows_per_target < 0 or args.warmup < 0:
        parser.error("--rows-per-target and --warmup must not be negative")
    return args


def paths(targets: int, clients: int) -> list[tuple[str, str, int]]:
    """(path, what it is, clients at once): the pages and API calls measured; the target page
    also alone, one request at a time."""
    deep = max(0, targets - PAGE_SIZE)
    page = min(100, max(1, -(-targets // PAGE_SIZE)))
    target = f"/targets/{TARGET_ID}"
    return [
        ("/", "targets page, first page", clients),
        (f"/?page={page}", f"targets page {page} (offset {(page - 1) * PAGE_SIZE})", clients),
        (f"/api/v1/targets?limit={PAGE_SIZE}", "API targets, first page", clients),
        (f"/api/v1/targets?limit={PAGE_SIZE}&offset={deep}", f"API targets, offset {deep}",
         clients),
        (target, "target page (status via Temporal, history, charts, diff)", clients),
        (f"/api/v1/targets/{TARGET_ID}/history?limit={PAGE_SIZE}", "API history, first page",
         clients),
        (target, "target page, one request at a time", 1),
        ("/failures", "failures page (grouped, first page)", clients),
        ("/health", "health page", clients),
        ("/static/style.css", "the style sheet", clients),
        ("/api/v1/openapi.json", "the OpenAPI document", clients),
    ]  # fmt: skip


# Kept-alive against new connections: each path one request at a time, `REUSE_REQUESTS`
# times each way. The stall (Nagle's algorithm and the client's delayed ACK) cost
# a reused connection about 40 ms a request, where a new one paid nothing.
REUSE_REQUESTS = 100
REUSED = [f"/targets/{TARGET_ID}", "/static/style.css", "/api/v1/targets?limit=1"]


async def reuse(base: str, path: str) -> dict[str, float]:
    """Median latency (ms) on one kept-alive connection and on a new connection per request
    (httpx keeping none), and their ratio (kept-alive / new: at most 1 is the goal)."""
    medians = {}
    for way, kept in [("kept_alive_ms", 1), ("new_connection_ms", 0)]:
        limits = httpx.Limits(max_keepalive_connections=kept)
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as http:
            took = []
            for _ in range(REUSE_REQUESTS):
                started = time.perf_counter()
                (await http.get(path)).raise_for_status()
                took.append(time.perf_counter() - started)
        medians[way] = round(statistics.median(took) * 1000, 2)
    medians["ratio"] = round(medians["kept_alive_ms"] / medians["new_connection_ms"], 2)
    return medians


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def settings_for(stack: Stack, database_url: str) -> Settings:
    return Settings(
        database_url=database_url, task_queue=TASK_QUEUE, allow_networks="127.0.0.1/32",
        data_dir=stack.root, check_retention=RETENTION, change_retention=RETENTION,
    )  # fmt: skip


def real_target(stack: Stack) -> TargetConfig:
    return TargetConfig(
        target_id=TARGET_ID, url=stack.page_url(TARGET_ID), interval_seconds=86_400,
        price_mode=PriceSettings(selector=PRICE_SELECTOR),
    )  # fmt: skip


async def add_real_target(
    stack: Stack, settings: Settings, address: str, pool: asyncpg.Pool
) -> None:
    """Through the typed client, as `pricewatch add` does; then waits until the worker has
    registered it and recorded its first check (the baseline)."""
    temporal = await Client.connect(address, data_converter=DATA_CONVERTER)
    async with Pricewatch(settings, temporal=temporal) as pricewatch:
        entry = manifest.Entry.model_validate(manifest.entry(real_target(stack)))
        await plans.put(pricewatch, entry)
    deadline = time.monotonic() + READY_TIMEOUT
    while not await pool.fetchval(
        "SELECT count(*) FROM source_checks WHERE target_id = $1 "
        "AND status IN ('unchanged', 'changed')",
        TARGET_ID,
    ):
        if time.monotonic() > deadline:
            rows = await pool.fetch("SELECT * FROM source_checks WHERE target_id = $1", TARGET_ID)
            raise RuntimeError(f"{TARGET_ID}: no first check in {READY_TIMEOUT:g} s: {rows}")
        await asyncio.sleep(0.2)


def template(priced: bool) -> str:
    """A seeded target's config, as the worker mirrors one (`config` jsonb)."""
    return TargetConfig(
        target_id="template", url="https://example.com/pricing", interval_seconds=900,
        price_mode=PriceSettings(selector=".plan .price") if priced else None,
        selector=None if priced else "main",
    ).model_dump_json()  # fmt: skip


async def seed(pool: asyncpg.Pool, args: argparse.Namespace) -> float:
    started = time.monotonic()
    others = args.targets - 1
    await pool.execute(SEED_TARGETS, template(True), template(False), others)
    oldest = await pool.fetchval(
        "SELECT min(scheduled_for) FROM source_checks WHERE target_id = $1", TARGET_ID
    )
    have = await pool.fetchval("SELECT count(*) FROM source_checks WHERE target_id = $1", TARGET_ID)
    old = "\n".join(f"plans: price 1 EUR {12 + i / 10:.2f}, price 2 EUR 29.00" for i in range(40))
    new = old.replace("price 2 EUR 29.00", "price 2 EUR 31.00", 7)
    snapshots = compress(new), compress(old)
    await pool.execute(
        SEED_ROWS, [TARGET_ID], SPACING, oldest, *snapshots, max(0, args.history - have)
    )
    ids = [f"site-{n:05d}" for n in range(1, others + 1)]
    now = datetime.now(UTC)
    for at in range(0, len(ids), 2000):
        chunk = ids[at : at + 2000]
        await pool.execute(SEED_ROWS, chunk, SPACING, now, None, None, args.rows_per_target)
    await pool.execute("VACUUM ANALYZE monitor_targets")
    await pool.execute("VACUUM ANALYZE source_checks")
    return time.monotonic() - started


@contextlib.asynccontextmanager
async def serving(stack: Stack, env: dict[str, str]) -> AsyncIterator[tuple[str, int]]:
    """`pricewatch serve` on a free loopback port: its base URL and PID once it answers."""
    port = free_port()
    log_path = stack.root / "serve.log"
    process = spawn(
        [PRICEWATCH, "serve", "--host", "127.0.0.1", "--port", str(port)], env, log_path
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/api/v1/targets?limit=1")).status_code == 200:
                        break
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"pricewatch serve did not start:\n{tail}")
                await asyncio.sleep(0.2)
        yield base, process.pid
    finally:
        await asyncio.to_thread(stop_process, process, 20)


async def drive(
    clients: list[httpx.AsyncClient], path: str, requests: int, seconds: float
) -> tuple[list[float], int, str | None, float]:
    """The clients in a closed loop (each sends its next request when the last is answered)
    until `requests` are answered or `seconds` pass: the latencies (s), the answers that were
    not 200, the first of them, the elapsed time."""
    issued = itertools.count()
    latencies: list[float] = []
    errors = 0
    first_error: str | None = None
    deadline = time.monotonic() + seconds

    async def one(http: httpx.AsyncClient) -> None:
        nonlocal errors, first_error
        while next(issued) < requests and time.monotonic() < deadline:
            started = time.perf_counter()
            response = await http.get(path)
            latencies.append(time.perf_counter() - started)
            if response.status_code != 200:
                errors += 1
                first_error = first_error or f"{response.status_code} {response.text[:200]}"

    started = time.monotonic()
    await asyncio.gather(*(one(http) for http in clients))
    return latencies, errors, first_error, time.monotonic() - started


async def check_pages(http: httpx.AsyncClient) -> None:
    """The pages measured show what they are meant to (a 200 could be an empty page)."""
    target = (await http.get(f"/targets/{TARGET_ID}")).text
    for marker, what in [
        ('<table class="diff">', "the newest change's diff"),
        ('<table id="history"', "the history"),
        (f'href="/targets/{TARGET_ID}?before=', "a link to the next history page"),
        ('data-points="500"', "a price chart of 500 slots"),
    ]:
        if marker not in target:
            raise RuntimeError(f"the target page shows no {what}:\n{target[:2000]}")
    if "no prices recorded yet" in target:
        raise RuntimeError("the target page shows no price charts")
    if "site-00001" not in (await http.get("/")).text:
        raise RuntimeError("the targets page does not list the seeded targets")


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (Postgres's percentile_cont)."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


async def measure(
    clients: list[httpx.AsyncClient],
    roles: dict[str, list[int]],
    args: argparse.Namespace,
    path: str,
    what: str,
) -> PathResult:
    if args.warmup:
        await drive(clients, path, args.warmup, args.seconds)
    cpu_before, own_before = cpu_seconds(roles), time.process_time()
    latencies, errors, first_error, elapsed = await drive(
        clients, path, args.requests, args.seconds
    )
    cpu_after, own_after = cpu_seconds(roles), time.process_time()
    ordered = sorted(latencies)
    count = len(ordered)
    cpu = {role: cpu_after[role] - cpu_before[role] for role in roles}
    cpu["clients"] = own_after - own_before
    p99 = _quantile(ordered, 0.99) * 1000
    return PathResult(
        path=path, what=what, clients=len(clients), requests=count, errors=errors,
        p50_ms=statistics.median(ordered) * 1000, p95_ms=_quantile(ordered, 0.95) * 1000,
        p99_ms=p99, max_ms=ordered[-1] * 1000, requests_per_s=count / elapsed,
        meets_goal=p99 <= GOAL_MS and errors == 0,
        cpu_ms_per_request={role: 1000 * s / count for role, s in cpu.items()},
        first_error=first_error,
    )  # fmt: skip


async def run(args: argparse.Namespace) -> tuple[list[PathResult], dict[str, object]]:
    results = []
    async with open_stack() as stack:
        database = await stack.database("bench_web")
        pool = await asyncpg.create_pool(database.direct_url, min_size=1, max_size=4)
        try:
            with stack.temporal("web") as temporal:
                env = {
                    **stack.design_env(database, temporal),
                    "PRICEWATCH_DATABASE_URL": database.direct_url,  # not through the proxy
                    "PRICEWATCH_CHECK_RETENTION": RETENTION,
                    "PRICEWATCH_CHANGE_RETENTION": RETENTION,
                    "PRICEWATCH_DATA_DIR": str(stack.root),
                    # The code of this checkout (a worktree, say), not the editable install's.
                    "PYTHONPATH": os.pathsep.join(
                        [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
                    ),
                }
                async with stack.process("worker", [PRICEWATCH, "worker"], env) as worker:
                    settings = settings_for(stack, database.direct_url)
                    say(f"adding {TARGET_ID} through the client; waiting for its first check")
                    await add_real_target(stack, settings, temporal.address, pool)
                    say(f"seeding {args.targets - 1:,} targets x {args.rows_per_target} rows "
                        f"and {TARGET_ID}'s history to {args.history:,} rows ...")  # fmt: skip
                    seeded = await seed(pool, args)
                    counts = await pool.fetchrow(
                        "SELECT (SELECT count(*) FROM monitor_targets) AS targets, "
                        "(SELECT count(*) FROM source_checks) AS rows, "
                        "(SELECT count(*) FROM source_checks WHERE target_id = $1) AS history, "
                        "pg_database_size(current_database()) AS bytes",
                        TARGET_ID,
                    )
                    assert counts is not None
                    say(f"  {seeded:.1f} s: {counts['targets']:,} targets, {counts['rows']:,} "
                        f"rows, {TARGET_ID} {counts['history']:,} rows")  # fmt: skip
                    async with (
                        serving(stack, env) as (base, serve_pid),
                        contextlib.AsyncExitStack() as opened,
                    ):
                        # Made once, for every path: an httpx client's set-up (its TLS
                        # context) costs more than many requests.
                        clients = [
                            await opened.enter_async_context(
                                httpx.AsyncClient(base_url=base, timeout=60)
                            )
                            for _ in range(args.clients)
                        ]
                        await check_pages(clients[0])
                        roles = {
                            "serve": [serve_pid],
                            "postgres": [stack.postgres_pid],
                            "temporal": [temporal.process.pid],
                            "worker": [worker.pid],
                        }
                        for path, what, at_once in paths(args.targets, args.clients):
                            say(f"  {path}, {at_once} client(s) ...")
                            results.append(
                                await measure(clients[:at_once], roles, args, path, what)
                            )
                        reused = {}
                        for path in REUSED:
                            say(f"  {path}: kept alive against new connections ...")
                            reused[path] = await reuse(base, path)
        finally:
            await pool.close()
    setup = {
        "targets": counts["targets"], "rows": counts["rows"], "history": counts["history"],
        "db_mib": round(counts["bytes"] / 2**20, 1), "seed_s": round(seeded, 1),
        "reuse": reused,
    }  # fmt: skip
    return results, setup


def table(results: list[PathResult], workload: dict[str, object]) -> str:
    lines = [
        f"{workload['targets']:,} targets ({workload['rows']:,} check rows, "
        f"{workload['db_mib']} MiB), {TARGET_ID} with {workload['history']:,} rows; "
        f"{workload['clients']} concurrent clients (unless said), up to "
        f"{workload['requests']} requests (or {workload['seconds']:g} s) per path after "
        f"{workload['warmup']} to warm up; "
        f"goal: p99 <= {GOAL_MS:g} ms",
        f"{'path':<48} {'clients':>7} {'requests':>8} {'errors':>6} {'p50 ms':>7} {'p95 ms':>7} "
        f"{'p99 ms':>7} {'max ms':>7} {'req/s':>6}  {'p99<=300':<8}  cpu ms/req: serve / pg / "
        "temporal / clients",
    ]
    for r in results:
        cpu = r.cpu_ms_per_request
        lines.append(
            f"{r.path:<48} {r.clients:>7} {r.requests:>8} {r.errors:>6} {r.p50_ms:>7.1f} "
            f"{r.p95_ms:>7.1f} {r.p99_ms:>7.1f} {r.max_ms:>7.1f} {r.requests_per_s:>6.1f}  "
            f"{'yes' if r.meets_goal else 'NO':<8}  {cpu['serve']:.1f} / {cpu['postgres']:.1f} / "
            f"{cpu['temporal']:.1f} / {cpu['clients']:.1f}"
        )
    lines += [f"  {r.path}: first error {r.first_error}" for r in results if r.first_error]
    for path, way in workload.get("reuse", {}).items():  # type: ignore[attr-defined]
        lines.append(
            f"  {path}, one at a time: median {way['kept_alive_ms']} ms kept alive, "
            f"{way['new_connection_ms']} ms on a new connection (ratio {way['ratio']})"
        )
    if load := workload.get("load_average_before_after"):
        lines.append(f"  the machine's 1-minute load average: {load} (before, after)")
    return "\n".join(lines)


def markdown(document: dict[str, Any]) -> str:
    """A saved run as the docs show it: one row per path."""
    lines = [
        "| path | clients | requests | errors | p50 / p95 / p99 / max ms | req/s "
        f"| p99 <= {GOAL_MS:g} ms | CPU ms/req: serve / Postgres / Temporal / clients |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in document["results"]:
        cpu = r["cpu_ms_per_request"]
        lines.append(
            f"| `{r['path']}` | {r['clients']} | {r['requests']} | {r['errors']} "
            f"| {r['p50_ms']:.0f} / {r['p95_ms']:.0f} / {r['p99_ms']:.0f} / {r['max_ms']:.0f} "
            f"| {r['requests_per_s']:.0f} | {'yes' if r['meets_goal'] else '**no**'} "
            f"| {cpu['serve']:.1f} / {cpu['postgres']:.1f} / {cpu['temporal']:.1f} / "
            f"{cpu['clients']:.1f} |"
        )
    reuse = document["workload"].get("reuse", {})
    if reuse:
        lines += [
            "",
            "| path, one request at a time | median kept alive ms | median new connection ms "
            "| ratio |",
            "| --- | --- | --- | --- |",
        ]
        lines += [
            f"| `{path}` | {way['kept_alive_ms']:.1f} | {way['new_connection_ms']:.1f} "
            f"| {way['ratio']:.2f} |"
            for path, way in reuse.items()
        ]
    return "\n".join(lines)


async def main(argv: list[str]) -> None:
    args = parse(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    load_before = os.getloadavg()
    results, setup = await run(args)
    setup["load_average_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    workload = {
        **setup, "rows_per_target": args.rows_per_target, "clients": args.clients,
        "requests": args.requests, "seconds": args.seconds, "warmup": args.warmup,
    }  # fmt: skip
    print(table(results, workload), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        command = "python -m bench.web " + " ".join(a for a in sys.argv[1:] if a != "--json")
        document = {
            "date": datetime.now().astimezone().isoformat(), "commit": commit_name(),
            "command": command.strip(), "goal_p99_ms": GOAL_MS, "workload": workload,
            "results": [asdict(r) for r in results],
        }  # fmt: skip
        print(json.dumps(document, indent=2), flush=True)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
