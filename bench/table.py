"""`python -m bench.table --rows 10000000 --targets 10000`: the hot path and retention with
`source_checks` that big.

Fills an embedded Postgres of its own (in a temp dir, removed after) with synthetic rows via
`generate_series`: every target has `rows / targets` checks spread over the last `--days`
(mostly unchanged, some changed, failed and skipped, the newest with a snapshot), so about
half are past the default 90-day retention. Then measures, each step one statement as the
worker runs it:
- the hot path (claim, then commit of the next slot that moves the schedule), one check at a
  time, on distinct due targets: latency p50/p99 per statement;
- retention alone for `--prune-seconds`: rows deleted per second, against the rate new rows
  arrive at (targets / interval);
- the hot path again while retention runs beside it (the batches lock targets briefly).
"""

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg

from activities import store
from activities.migrate import migrate
from activities.retention import Retention, prune_pass
from bench.report import commit_name
from pricewatch.models import CheckKind, CheckStatus, PruneProgress
from pricewatch.slots import work_id
from workers.embedded import start_embedded_postgres

LEASE = timedelta(seconds=45)
GOOD = store.Outcome(status=CheckStatus.UNCHANGED, result_hash="b" * 64, http_status=200)
FILL_TARGETS = """
INSERT INTO monitor_targets (id, url, interval_seconds, anchor, next_slot)
SELECT 'fill-' || lpad(t::text, 6, '0'), 'http://127.0.0.1/page', $1::integer,
       date_trunc('second', now()) - make_interval(secs => $1::integer),
       now() - interval '1 second'
  FROM generate_series(0, $2 - 1) t
"""
# Rows n = 1..per_target of each target, newest first, `step` apart; statuses by n.
FILL_ROWS = """
INSERT INTO source_checks (work_id, target_id, scheduled_for, checked_at, status, result_hash,
                           previous_hash, http_status, body_bytes, error_message, snapshot)
SELECT t.id || ':fill-' || n, t.id, now() - n * $3::interval, now() - n * $3::interval,
       s.status,
       CASE WHEN s.status IN ('unchanged', 'changed') THEN md5(t.id || n) END,
       CASE WHEN s.status = 'changed' THEN md5(t.id || (n + 1)) END,
       CASE WHEN s.status = 'failed' THEN 503 WHEN s.status = 'skipped' THEN NULL ELSE 200 END,
       CASE WHEN s.status IN ('unchanged', 'changed') THEN 2048 END,
       CASE WHEN s.status = 'failed' THEN 'HTTP 503 Service Unavailable'
            WHEN s.status = 'skipped' THEN 'not checked: the schedule was behind' END,
       CASE WHEN n = 1 THEN decode(repeat('ab', 512), 'hex') END
  FROM (SELECT id FROM monitor_targets ORDER BY id OFFSET $1 LIMIT $2) t,
       generate_series(1, $4) n,
       LATERAL (SELECT CASE WHEN n = 1 THEN 'unchanged' WHEN n % 100 = 7 THEN 'changed'
                            WHEN n % 100 = 13 THEN 'failed' WHEN n % 100 = 29 THEN 'skipped'
                            ELSE 'unchanged' END AS status) s
"""


@dataclass
class Latency:
    checks: int
    claim_p50_ms: float
    claim_p99_ms: float
    commit_p50_ms: float
    commit_p99_ms: float


@dataclass
class Report:
    rows: int
    targets: int
    days: int
    fill_seconds: float
    table_mib: float
    hot_path: Latency
    prune_rows_per_s: float
    arrival_rows_per_s: float
    prune_over_arrival: float
    hot_path_while_pruning: Latency
    rows_left: int


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--targets", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=180, help="the rows span this many days")
    parser.add_argument("--interval", type=int, default=900, help="targets' interval, seconds")
    parser.add_argument("--checks", type=int, default=2000, help="hot-path checks per phase")
    parser.add_argument("--prune-seconds", type=float, default=30)
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table: stderr)")
    args = parser.parse_args(argv)
    if min(args.rows, args.targets, args.days, args.interval, args.checks) < 1:
        parser.error("--rows, --targets, --days, --interval and --checks must be positive")
    if args.checks * 2 > args.targets:
        parser.error("--checks: each phase needs its own due targets (at most targets / 2)")
    return args


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def fill(pool: asyncpg.Pool, args: argparse.Namespace) -> float:
    started = time.monotonic()
    await pool.execute(FILL_TARGETS, args.interval, args.targets)
    per_target = args.rows // args.targets
    step = timedelta(days=args.days) / per_target
    chunk = max(1, 1_000_000 // per_target)  # about a million rows per statement
    for offset in range(0, args.targets, chunk):
        await pool.execute(FILL_ROWS, offset, chunk, step, per_target)
        say(f"  filled {min(offset + chunk, args.targets) * per_target:,} rows")
    await pool.execute("VACUUM ANALYZE source_checks")
    await pool.execute("VACUUM ANALYZE monitor_targets")
    return time.monotonic() - started


async def hot_path(pool: asyncpg.Pool, targets: list[str]) -> Latency:
    """Each target's next slot: claimed, then committed with the schedule moving on."""
    claims, commits = [], []
    for target_id in targets:
        slot = await pool.fetchval("SELECT next_slot FROM monitor_targets WHERE id = $1", target_id)
        wid, execution_id = work_id(target_id, slot), f"bench/{target_id}"
        started = time.perf_counter()
        claim = await store.claim(
            pool, target_id=target_id, work_id=wid, execution_id=execution_id, lease=LEASE,
            on_schedule=True, slot=slot,
        )  # fmt: skip
        claimed = time.perf_counter()
        assert claim.claimed and claim.previous_hash, target_id
        result = await store.commit(
            pool, target_id=target_id, execution_id=execution_id, work_id=wid, slot=slot,
            kind=CheckKind.SCHEDULED, outcome=GOOD, advance=True,
        )  # fmt: skip
        committed = time.perf_counter()
        assert result is not None, target_id
        claims.append(claimed - started)
        commits.append(committed - claimed)
    return Latency(len(targets), *_ms(claims), *_ms(commits))


def _ms(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49] * 1000, cuts[98] * 1000


async def prune_for(pool: asyncpg.Pool, seconds: float) -> int:
    progress = await prune_pass(pool, Retention(), PruneProgress(), timedelta(seconds=seconds))
    return progress.deleted


async def measure(pool: asyncpg.Pool, args: argparse.Namespace) -> Report:
    say(f"filling {args.rows:,} rows for {args.targets:,} targets over {args.days} days ...")
    fill_seconds = await fill(pool, args)
    table_mib = await pool.fetchval("SELECT pg_total_relation_size('source_checks')") / 2**20
    say(f"  {fill_seconds:.0f} s, source_checks {table_mib:,.0f} MiB with its indexes")
    ids = [r["id"] for r in await pool.fetch("SELECT id FROM monitor_targets")]
    random.Random(1).shuffle(ids)
    alone, beside = ids[: args.checks], ids[args.checks : 2 * args.checks]

    say("hot path ...")
    latency = await hot_path(pool, alone)
    say(f"retention alone for {args.prune_seconds:g} s ...")
    started = time.monotonic()
    deleted = await prune_for(pool, args.prune_seconds)
    prune_rate = deleted / (time.monotonic() - started)
    say("hot path while retention runs ...")
    pruning = asyncio.create_task(prune_for(pool, 3600))
    try:
        while_pruning = await hot_path(pool, beside)
    finally:
        pruning.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pruning
    arrival = args.targets / args.interval
    return Report(
        rows=args.rows, targets=args.targets, days=args.days, fill_seconds=fill_seconds,
        table_mib=table_mib, hot_path=latency, prune_rows_per_s=prune_rate,
        arrival_rows_per_s=arrival, prune_over_arrival=prune_rate / arrival,
        hot_path_while_pruning=while_pruning,
        rows_left=await pool.fetchval("SELECT count(*) FROM source_checks"),
    )  # fmt: skip


def table(report: Report) -> str:
    def line(name: str, lat: Latency) -> str:
        return (
            f"  {name:<24} claim p50 {lat.claim_p50_ms:6.2f} ms  p99 {lat.claim_p99_ms:6.2f} ms"
            f"   commit p50 {lat.commit_p50_ms:6.2f} ms  p99 {lat.commit_p99_ms:6.2f} ms"
        )

    return "\n".join([
        f"source_checks: {report.rows:,} rows of {report.targets:,} targets over "
        f"{report.days} days, {report.table_mib:,.0f} MiB with indexes "
        f"(filled in {report.fill_seconds:.0f} s)",
        line("hot path", report.hot_path),
        line("hot path while pruning", report.hot_path_while_pruning),
        f"  retention: {report.prune_rows_per_s:,.0f} rows/s deleted; new rows arrive at "
        f"{report.arrival_rows_per_s:,.1f}/s ({report.targets:,} targets every "
        f"{report.targets / report.arrival_rows_per_s:g} s): {report.prune_over_arrival:,.0f}x",
    ])  # fmt: skip


async def main(argv: list[str]) -> None:
    args = parse(argv)
    root = Path(tempfile.mkdtemp(prefix="pricewatch-bench-table-"))
    try:
        url, postgres = await asyncio.to_thread(start_embedded_postgres, root / "pgdata")
        try:
            pool = await asyncpg.create_pool(url, min_size=2, max_size=4)
            try:
                async with pool.acquire() as conn:
                    await migrate(conn)
                report = await measure(pool, args)
            finally:
                await pool.close()
        finally:
            await asyncio.to_thread(postgres.cleanup)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table(report), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        stamp = {"date": datetime.now().astimezone().isoformat(), "commit": commit_name()}
        print(json.dumps({**stamp, "table": asdict(report)}, indent=2), flush=True)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
