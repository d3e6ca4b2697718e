"""`python -m bench --targets N --interval S --seconds W --designs pricewatch,bare,...
[--cache N] [--checks-per-run K] [--aged K]`; `--designs pricewatch,pricewatch-calendar
--interval 60` sets interval targets beside calendar ones (`* * * * *`) at the same rate."""

import argparse
import asyncio
import contextlib
import signal
import sys
from dataclasses import asdict

from bench.designs import (
    DEFAULT_DESIGNS,
    DESIGNS,
    PRODUCT_CHECKS_PER_RUN,
    Workload,
    calendar_cron,
)
from bench.measure import Result, run_design
from bench.report import as_json, table
from bench.stack import open_stack


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--targets", type=int, default=400, help="targets (default 400)")
    parser.add_argument(
        "--interval", type=int, default=20,
        help="seconds between a target's checks (default 20; a test-only minimum: the "
        "product refuses less than 15 minutes)",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=60, help="measured window per design")
    parser.add_argument(
        "--workers", type=int, default=1,
        help="worker processes per Temporal design (default 1, as `pricewatch dev` runs)",
    )  # fmt: skip
    parser.add_argument(
        "--cache", type=int,
        help="each worker's max_cached_workflows (default: the product's)",
    )  # fmt: skip
    parser.add_argument(
        "--checks-per-run", type=int, default=PRODUCT_CHECKS_PER_RUN,
        help=f"the loops' max_checks_per_run: the continue-as-new cadence (default "
        f"{PRODUCT_CHECKS_PER_RUN}, the product's)",
    )  # fmt: skip
    parser.add_argument(
        "--aged", type=int, default=0,
        help="checks each loop's current run holds when the window opens (the warm-up runs "
        "them: at least that many intervals)",
    )  # fmt: skip
    parser.add_argument(
        "--designs", default=",".join(DEFAULT_DESIGNS),
        help=f"comma-separated, in order, of {', '.join(DESIGNS)} (default "
        f"{','.join(DEFAULT_DESIGNS)}; pricewatch-calendar needs an --interval of whole "
        "minutes dividing an hour)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="JSON on stdout (the table: stderr)")
    args = parser.parse_args(argv)
    args.designs = [name.strip() for name in args.designs.split(",") if name.strip()]
    if unknown := set(args.designs) - set(DESIGNS):
        parser.error(f"unknown design(s): {', '.join(sorted(unknown))}")
    if "pricewatch-calendar" in args.designs:
        try:
            calendar_cron(args.interval)
        except ValueError as error:
            parser.error(f"pricewatch-calendar: {error}")
    if args.targets < 1 or args.interval < 1 or args.seconds <= 0 or args.workers < 1:
        parser.error("--targets, --interval, --seconds and --workers must be positive")
    if args.checks_per_run < 1 or (args.cache is not None and args.cache < 0):
        parser.error("--checks-per-run must be positive and --cache not negative")
    if not 0 <= args.aged < args.checks_per_run:
        parser.error("--aged must be at least 0 and below --checks-per-run (a run that holds "
                     "that many checks continues as new)")  # fmt: skip
    return args


async def run(workload: Workload, designs: list[str]) -> list[Result]:
    results = []
    async with open_stack() as stack:
        for name in designs:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            results.append(await run_design(name, stack, workload))
    return results


async def main(argv: list[str]) -> None:
    args = parse(argv)
    workload = Workload(
        targets=args.targets, interval=args.interval, seconds=args.seconds, workers=args.workers,
        cache=args.cache, checks_per_run=args.checks_per_run, aged=args.aged,
    )  # fmt: skip
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    results = await run(workload, args.designs)
    heading = (
        f"{workload.targets} targets every {workload.interval} s (test-only interval) = "
        f"{workload.offered_per_second:.3g} checks/s offered, {workload.seconds:g} s per design"
        + (
            f", {workload.workers} worker processes per Temporal design"
            if workload.workers > 1
            else ""
        )
        + (f", cache {workload.cache} workflows per worker" if workload.cache is not None else "")
        + f", {workload.checks_per_run} checks per run"
        + (f", runs aged {workload.aged} checks" if workload.aged else "")
    )
    print(table(results, heading), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(as_json(results, asdict(workload)), flush=True)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
