"""What a server read of a target a moment ago, reused for a second: 20 people on one
target page ask Temporal for its status and Postgres for its charts once a second, not 20
times, and requests that arrive together share one reading. An action through the same
client forgets the target, so it is read anew at once."""

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

Value = TypeVar("Value")

REUSE_SECONDS = 1.0
KEPT = 1024  # entries at most: past it all are forgotten (a server reads them again)


class Recent:
    def __init__(self, seconds: float = REUSE_SECONDS) -> None:
        self.seconds = seconds
        # (target, what) -> (when it was asked, by the loop's clock; the reading)
        self._read: dict[tuple[str, Hashable], tuple[float, asyncio.Future[Any]]] = {}

    async def get(
        self, target_id: str, what: Hashable, read: Callable[[], Awaitable[Value]]
    ) -> Value:
        """`read()`'s value for the target, or that of the reading asked less than `seconds`
        ago, or in flight (the loop's clock: how old a reading is, nothing the schedule
        depends on). A reading that fails is not kept."""
        key = (target_id, what)
        now = asyncio.get_running_loop().time()
        kept = self._read.get(key)
        if kept is None or now - kept[0] >= self.seconds:
            if len(self._read) >= KEPT:
                self._read.clear()
            reading = asyncio.ensure_future(read())
            reading.add_done_callback(lambda done: done.cancelled() or done.exception())
            kept = self._read[key] = (now, reading)
        try:
            value: Value = await asyncio.shield(kept[1])  # a request's timeout is its own
        except Exception:
            if self._read.get(key) is kept:
                del self._read[key]
            raise
        return value

    def knows(self, target_id: str) -> bool:
        """Whether the target's workflow answered a moment ago (its status was read)."""
        kept = self._read.get((target_id, "status"))
        if kept is None or asyncio.get_running_loop().time() - kept[0] >= self.seconds:
            return False
        reading = kept[1]
        return reading.done() and not reading.cancelled() and reading.exception() is None

    def forget(self, target_id: str) -> None:
        for key in [key for key in self._read if key[0] == target_id]:
            del self._read[key]
