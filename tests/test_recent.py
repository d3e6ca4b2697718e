"""A server reuses what it read of a target for a second (client.recent), and forgets it
at an action through the same client."""

import asyncio

import pytest

from client.recent import Recent


async def test_a_reading_is_reused_within_its_seconds_then_read_again() -> None:
    reads: list[int] = []

    async def read() -> int:
        reads.append(len(reads))
        return len(reads)

    recent = Recent(seconds=0.3)
    assert [await recent.get("a", "status", read) for _ in range(3)] == [1, 1, 1]
    assert await recent.get("a", "lines", read) == 2  # another reading of the same target
    assert await recent.get("b", "status", read) == 3  # another target
    assert recent.knows("a") and recent.knows("b") and not recent.knows("c")
    await asyncio.sleep(0.35)
    assert not recent.knows("a")
    assert await recent.get("a", "status", read) == 4


async def test_forgetting_a_target_reads_it_anew_and_keeps_the_others() -> None:
    count = 0

    async def read() -> int:
        nonlocal count
        count += 1
        return count

    recent = Recent(seconds=60)
    await recent.get("a", "status", read)
    await recent.get("b", "status", read)
    recent.forget("a")
    assert not recent.knows("a") and recent.knows("b")
    assert await recent.get("a", "status", read) == 3
    assert await recent.get("b", "status", read) == 2


async def test_a_failed_reading_is_not_kept() -> None:
    async def fails() -> int:
        raise LookupError("no such target")

    async def answers() -> int:
        return 7

    recent = Recent(seconds=60)
    with pytest.raises(LookupError):
        await recent.get("a", "status", fails)
    assert not recent.knows("a")
    assert await recent.get("a", "status", answers) == 7


async def test_requests_that_arrive_together_share_one_reading() -> None:
    reads = 0

    async def read() -> int:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.05)
        return reads

    recent = Recent(seconds=60)
    assert await asyncio.gather(*(recent.get("a", "status", read) for _ in range(20))) == [1] * 20
    assert reads == 1
