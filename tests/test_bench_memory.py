"""The bench's memory sampler: the window's last fifth always gets a sample, however slow
sampling is (issue 41: `worker_peak_mib_last_fifth` was None on a loaded machine)."""

import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from bench import measure, procs


@pytest.mark.parametrize("sample_seconds", [0.0, 0.45, 1.5])
async def test_every_window_ends_with_a_sample_in_its_last_fifth(
    monkeypatch: pytest.MonkeyPatch, sample_seconds: float
) -> None:
    """A sample that takes longer than a fifth of the window (the kernel walking page tables
    on a busy machine) jumped past the last fifth; the sampler now ends on a sample taken
    at or after the window's end."""
    taken: list[float] = []

    def slow_memory_bytes(roots: dict[str, list[int]]) -> dict[str, int]:
        taken.append(time.monotonic())
        time.sleep(sample_seconds)
        return {"worker": 2**20 * len(taken), "postgres": 2**20}

    monkeypatch.setattr(procs, "memory_bytes", slow_memory_bytes)
    stack: Any = SimpleNamespace(postgres_pid=1)
    running: Any = SimpleNamespace(worker_pids=[2], temporal=None)
    until = datetime.now(UTC) + timedelta(seconds=1)
    memory = await measure.peak_memory(stack, running, until)
    assert memory.worker_fifths[0] > 0
    assert memory.worker_fifths[-1] == 2**20 * len(taken)  # the last sample, in the last fifth
    assert memory.peaks == {"worker": 2**20 * len(taken), "postgres": 2**20}
