"""What a server read of a target a moment ago, reused for a second: 20 people on one
target page ask Temporal for its status and Postgres for its charts once a second, not 20
times. An action through the same client forgets the target, so it is read anew at once."""

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

Value = TypeVar("Value")

REUSE_SECONDS = 1.0
KEPT = 1024  # entries at most: past it all are forgotten (a server reads them again)


class Recent:
    def __init__(self, seconds: float = REUSE_SECONDS) -> None:
        self.seconds = seconds
        self._read: dict[tuple[str, Hashable], tuple[float, Any]] = {}

    async def get(
        self, target_id: str, what: Hashable, read: Callable[[], Awaitable[Value]]
    ) -> Value:
        """`read()`'s value for the target, or the one it gave less than `seconds` ago (by
        the loop's clock: how old a reading is, nothing the schedule depends on)."""
        key = (target_id, what)
        now = asyncio.get_running_loop().time()
        if (kept := self._read.get(key)) is not None and now - kept[0] < self.seconds:
            value: Value = kept[1]
            return value
        value = await read()
        if len(self._read) >= KEPT:
            self._read.clear()
        self._read[key] = (now, value)
        return value

    def knows(self, target_id: str) -> bool:
        """Whether the target's workflow answered a moment ago (its status was read)."""
        kept = self._read.get((target_id, "status"))
        return kept is not None and asyncio.get_running_loop().time() - kept[0] < self.seconds

    def forget(self, target_id: str) -> None:
        for key in [key for key in self._read if key[0] == target_id]:
            del self._read[key]
