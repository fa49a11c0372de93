"""Time as the host's lifecycle loops see it (heartbeats, the idle reaper, host expiry).

Production uses ``SystemClock``. ``ManualClock`` only moves when told to, so the reaper and the host
watcher can be driven step by step (L9.5) through the same loops production runs, with no test hooks.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Any, Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (only differences mean anything)."""

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # a loop's period, not synchronisation


class ManualClock:
    """A clock that stands still until ``advance``; sleepers wake in deadline order when their time comes."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[Any]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + max(seconds, 0.0), next(self._order), future))
        await future

    @property
    def sleepers(self) -> int:
        """How many loops are waiting on this clock (a test waits for its loops to be parked)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def advance(self, seconds: float) -> None:
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
