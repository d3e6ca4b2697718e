"""`python -m bench.freezes [--targets 20] [--interval 5] [--freeze 20] [--settle 60]
[--kinds worker,temporal,postgres] [--json] [--logs DIR]`: recovery from a frozen process
(issue 48).

One stack (bench/stack.py: embedded Postgres, a Temporal dev server, two `pricewatch worker`
processes, a local page server), N targets; then, in turn, one worker, the Temporal server
and Postgres are frozen as a paused VM or a throttled container is: SIGSTOP to the process
and every process below it (for Postgres the postmaster and all its backends, which is what a
frozen database is: connections are still accepted by the kernel and nothing answers),
SIGCONT after `--freeze` seconds, then `--settle` seconds before the next. Each freeze is
measured on the check rows:
- from the thaw to the first and to the last target's next check: per target, the earliest
  `checked_at` of an `unchanged`/`changed` row after the thaw (the commit, on Postgres's
  clock; the rows have no claim time, and a local page's fetch takes milliseconds);
- `skipped` rows for slots due inside the outage, per second of outage, and those due from
  the freeze until the next freeze (the recovery's own skips included);
- the workers' log lines at WARNING or above from the freeze until the next.
Every process signalled is one this run started; SIGCONT is sent in a `finally`.
"""

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

from bench import procs
from bench.designs import Workload, pricewatch
from bench.stack import REPO, Stack, open_stack

KINDS = ("worker", "temporal", "postgres")
CHECKED = "status IN ('unchanged', 'changed') AND kind = 'scheduled'"
FIRST_CHECKS = f"""
SELECT min(checked_at) FROM source_checks
 WHERE {CHECKED} AND checked_at > $1 AND checked_at < $2 GROUP BY target_id
"""
SKIPPED = """
SELECT count(*) FILTER (WHERE scheduled_for < $2) AS in_outage, count(*) AS to_next
  FROM source_checks WHERE status = 'skipped' AND scheduled_for >= $1 AND scheduled_for < $3
"""


@dataclass(frozen=True)
class Freeze:
    kind: str
    frozen_at: datetime
    thawed_at: datetime
    warnings: int
    """Worker log lines at WARNING or above from the freeze until the next."""


@dataclass(frozen=True)
class Recovery:
    kind: str
    outage_s: float
    first_s: float | None
    """Thaw to the first target's next check."""
    last_s: float | None
    """Thaw to the last target's next check; None if one had none before the next freeze."""
    unchecked: int
    """Targets with no check between the thaw and the next freeze."""
    slots_due: int
    """Slots of all targets due inside the outage."""
    skipped: int
    """Skipped rows for slots due inside the outage."""
    skipped_per_s: float
    skipped_to_next: int
    """Skipped rows for slots due from the freeze until the next freeze."""
    warnings: int


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def frozen(root: int) -> Iterator[None]:
    """The process and every one below it stopped (SIGSTOP), continued (SIGCONT) on the way
    out whatever happens. The root first: a stopped postmaster forks no new backend."""
    stopped: list[int] = []
    try:
        os.kill(root, signal.SIGSTOP)
        stopped.append(root)
        for pid in procs.trees({"tree": [root]})["tree"]:
            if pid != root:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def warnings(stack: Stack) -> int:
    """The workers' log lines at WARNING or above, and any that is not JSON (the SDK's raw
    output): what an operator is shown. Not tracebacks as such: each attempt that met an
    outage logs its own at INFO (`pricewatch.faults`), before and after alike."""
    count = 0
    for log in stack.root.glob("pricewatch-worker-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            try:
                level = json.loads(line).get("level")
            except (ValueError, AttributeError):
                level = "RAW"
            count += level in {"WARNING", "ERROR", "CRITICAL", "RAW"}
    return count


async def all_checked(pool: asyncpg.Pool, targets: int, within: float) -> None:
    query = f"SELECT count(DISTINCT target_id) FROM source_checks WHERE {CHECKED}"
    deadline = time.monotonic() + within
    while await pool.fetchval(query) < targets:
        if time.monotonic() > deadline:
            raise TimeoutError("not every target was checked in time")
        await asyncio.sleep(0.5)


async def freezes(
    stack: Stack, workload: Workload, kinds: list[str], freeze_s: float, settle_s: float
) -> list[Recovery]:
    database = await stack.database("freezes")
    pool = await asyncpg.create_pool(database.direct_url, min_size=1, max_size=4)
    try:
        async with pricewatch(stack, workload, database, pool) as running:
            assert running.temporal is not None
            say(f"{workload.targets} targets every {workload.interval} s on 2 workers ...")
            await all_checked(pool, workload.targets, within=120 + workload.interval)
            await asyncio.sleep(2 * workload.interval)  # in their stride
            roots = {
                "worker": running.worker_pids[0],
                "temporal": running.temporal.process.pid,
                "postgres": stack.postgres_pid,
            }
            done: list[Freeze] = []
            for kind in kinds:
                say(f"freezing {kind} for {freeze_s:g} s, then {settle_s:g} s to settle")
                logged = warnings(stack)
                frozen_at = datetime.now(UTC)
                with frozen(roots[kind]):
                    await asyncio.sleep(freeze_s)
                thawed_at = datetime.now(UTC)
                await asyncio.sleep(settle_s)
                done.append(Freeze(kind, frozen_at, thawed_at, warnings(stack) - logged))
            ends = [freeze.frozen_at for freeze in done[1:]] + [datetime.now(UTC)]
            return [
                await recovery(pool, workload, running.anchors, freeze, end)
                for freeze, end in zip(done, ends, strict=True)
            ]
    finally:
        await pool.close()


async def recovery(
    pool: asyncpg.Pool,
    workload: Workload,
    anchors: list[datetime],
    freeze: Freeze,
    end: datetime,
) -> Recovery:
    firsts = [row[0] for row in await pool.fetch(FIRST_CHECKS, freeze.thawed_at, end)]
    waits = sorted((first - freeze.thawed_at).total_seconds() for first in firsts)
    skipped = await pool.fetchrow(SKIPPED, freeze.frozen_at, freeze.thawed_at, end)
    assert skipped is not None
    outage = (freeze.thawed_at - freeze.frozen_at).total_seconds()
    return Recovery(
        kind=freeze.kind,
        outage_s=outage,
        first_s=waits[0] if waits else None,
        last_s=waits[-1] if len(waits) == workload.targets else None,
        unchecked=workload.targets - len(waits),
        slots_due=workload.slots_due(anchors, freeze.frozen_at, freeze.thawed_at),
        skipped=skipped["in_outage"],
        skipped_per_s=skipped["in_outage"] / outage,
        skipped_to_next=skipped["to_next"],
        warnings=freeze.warnings,
    )


COLUMNS = (
    ("frozen", "kind", "{}"),
    ("outage s", "outage_s", "{:.1f}"),
    ("first s", "first_s", "{:.1f}"),
    ("last s", "last_s", "{:.1f}"),
    ("unchecked", "unchecked", "{}"),
    ("due in outage", "slots_due", "{}"),
    ("skipped in outage", "skipped", "{}"),
    ("skipped/s", "skipped_per_s", "{:.2f}"),
    ("skipped to next", "skipped_to_next", "{}"),
    ("warnings", "warnings", "{}"),
)


def table(results: list[Recovery]) -> str:
    rows = [[header for header, _, _ in COLUMNS]]
    for result in results:
        values = [getattr(result, field) for _, field, _ in COLUMNS]
        rows.append(
            ["-" if value is None else form.format(value)
             for value, (_, _, form) in zip(values, COLUMNS, strict=True)]
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    legend = (
        "first/last: thaw to the first/last target's next check (checked_at), s; '-': a "
        "target had none before the next freeze (unchecked); skipped: skipped rows for "
        "slots due inside the outage (per second of it), and from the freeze to the next; "
        "warnings: worker log lines at WARNING or above from the freeze to the next"
    )
    return "\n".join([*lines, legend])


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.freezes", description=__doc__)
    parser.add_argument("--targets", type=int, default=20, help="targets (default 20)")
    parser.add_argument(
        "--interval", type=int, default=5,
        help="seconds between a target's checks (default 5; test-only, below the product's "
        "minimum)",
    )  # fmt: skip
    parser.add_argument("--freeze", type=float, default=20, help="seconds frozen (default 20)")
    parser.add_argument(
        "--settle", type=float, default=60, help="seconds after each thaw (default 60)"
    )
    parser.add_argument(
        "--kinds", default=",".join(KINDS),
        help=f"what to freeze, in order, comma-separated of {', '.join(KINDS)} (default all)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table: stderr)")
    parser.add_argument(
        "--logs", type=Path, help="copy the workers' and the server's logs into this directory"
    )
    args = parser.parse_args(argv)
    args.kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    if not args.kinds or set(args.kinds) - set(KINDS):
        parser.error(f"--kinds: one or more of {', '.join(KINDS)}")
    if args.targets < 1 or args.interval < 1 or args.freeze <= 0 or args.settle <= 0:
        parser.error("--targets, --interval, --freeze and --settle must be positive")
    return args


def commit() -> str:
    """The product measured: the commit of the tree this script runs from."""
    git = ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]
    return subprocess.run(git, capture_output=True, text=True, check=False).stdout.strip()


async def main(argv: list[str]) -> None:
    args = parse(argv)
    workload = Workload(targets=args.targets, interval=args.interval, seconds=0, workers=2)
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    async with open_stack() as stack:
        try:
            results = await freezes(stack, workload, args.kinds, args.freeze, args.settle)
        finally:
            if args.logs is not None:
                args.logs.mkdir(parents=True, exist_ok=True)
                for log in stack.root.rglob("*.log"):
                    shutil.copy(log, args.logs / log.name)
    heading = (
        f"{args.targets} targets every {args.interval} s on 2 workers, each frozen "
        f"{args.freeze:g} s then {args.settle:g} s to settle; product at {commit()}"
    )
    print(f"{heading}\n{table(results)}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        report = {
            "commit": commit(),
            "targets": args.targets,
            "interval_s": args.interval,
            "freeze_s": args.freeze,
            "settle_s": args.settle,
            "results": [asdict(result) for result in results],
        }
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
