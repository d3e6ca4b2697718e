"""`python -m tests.chaos`: run the chaos run once and exit non-zero on any FAIL."""

import asyncio
import os
import sys

import typer

from tests.chaos.run import ChaosOptions, run_chaos


def chaos(
    targets: int = typer.Option(100, min=1, help="Targets, each with two webhook channels."),
    minutes: float = typer.Option(5.0, min=0.5, help="Run length; faults in the first half."),
    interval: int = typer.Option(10, min=1, help="Seconds between a target's slots (test-only)."),
    seed: int = typer.Option(1, help="Same seed, same fault moments."),
    workers: int = typer.Option(2, min=2, help="Worker processes."),
) -> None:
    """Run a real stack under seeded faults and check the promise from the outside."""
    options = ChaosOptions(targets, minutes, interval, seed, workers)
    report = asyncio.run(run_chaos(options))
    print(report.render(), flush=True)
    sys.stdout.flush()
    # temporalio can abort a finalising interpreter (sdk-python#300): leave without it.
    os._exit(0 if report.passed else 1)


if __name__ == "__main__":
    typer.run(chaos)
