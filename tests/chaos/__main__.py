"""`python -m tests.chaos`: run the chaos run once and exit non-zero on any FAIL."""

import asyncio
import dataclasses
import os
import sys

import typer

from tests.chaos.run import SOAK, ChaosOptions, run_chaos


def chaos(
    targets: int = typer.Option(
        100, min=1, help="Targets, each with two webhooks, two Apprise channels and an email."
    ),
    minutes: float = typer.Option(5.0, min=0.5, help="Run length; faults in the first half."),
    interval: int = typer.Option(10, min=1, help="Seconds between a target's slots (test-only)."),
    seed: int = typer.Option(1, help="Same seed, same fault moments."),
    workers: int = typer.Option(2, min=2, help="Worker processes."),
    faults_per_minute: float | None = typer.Option(
        None, min=1, help="All fault kinds together, per minute of the run."
    ),
    rendered_every: int = typer.Option(
        10, min=1, help="Every n-th target (the first included) is rendered in Chromium."
    ),
    soak: bool = typer.Option(
        False, "--soak", help="The soak preset: 1,100 faults in 23 minutes (only --seed applies)."
    ),
) -> None:
    """Run a real stack under seeded faults and check the promise from the outside."""
    if soak:
        options = dataclasses.replace(SOAK, seed=seed)
    else:
        options = ChaosOptions(
            targets, minutes, interval, seed, workers, faults_per_minute,
            rendered_every=rendered_every,
        )  # fmt: skip
    try:
        report = asyncio.run(run_chaos(options))
    except KeyboardInterrupt:
        print("pricewatch chaos: interrupted; every process it started is stopped", flush=True)
        os._exit(130)
    print(report.render(), flush=True)
    sys.stdout.flush()
    # temporalio can abort a finalising interpreter (sdk-python#300): leave without it.
    os._exit(0 if report.passed else 1)


if __name__ == "__main__":
    typer.run(chaos)
