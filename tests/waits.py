"""Waiting on a condition with a deadline, instead of sleeping a guessed time.

A fixed sleep is either too short on a loaded machine (a flaky test) or too long everywhere
(a slow one); polling the condition is as fast as the system and fails with a clear message.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    within: float = 60.0,
    every: float = 0.1,
    what: str = "the condition",
) -> T:
    """The first truthy value `probe` returns, polling every `every` seconds; an
    AssertionError naming `what` (and the last value seen) after `within` seconds: a
    minute, for a machine as busy as CI's (a fresh clone beside a burner missed 30 s)."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not hold within {within} s (last: {value!r})")
        await asyncio.sleep(every)


async def wait_for(pool: asyncpg.Pool, sql: str, *args: object) -> int:
    """Poll until the count query returns a positive number (within a minute)."""

    async def count() -> int:
        found = int(await pool.fetchval(sql, *args))
        return found if found > 0 else 0  # a negative count (`count(*) - n`) is truthy

    return await eventually(count, within=60, every=0.2, what=f"{sql} {args}")
