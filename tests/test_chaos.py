"""The short seeded chaos run (about two minutes): every fault kind once, every invariant
PASS. The long run is `make chaos` (see docs/testing.md)."""

import subprocess
import sys

import pytest

from tests.chaos.run import ALL_RATES

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(480)
def test_a_short_seeded_chaos_run_passes_every_invariant() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tests.chaos", "--targets", "10", "--minutes", "1",
         "--interval", "3", "--seed", "7"],
        capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    report = run.stdout[run.stdout.index("pricewatch chaos:") :]
    assert run.returncode == 0, report + run.stderr[-3000:]
    for kind in ALL_RATES:
        assert kind in report
    assert "FAIL" not in report
    assert report.rstrip().endswith("PASS")
