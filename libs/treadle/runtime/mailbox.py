"""Virtual actors: work for one key (an app thread) runs one item at a time, in arrival order; different
keys run concurrently. A key's task exists only while it has work."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


class Mailboxes:
    def __init__(self) -> None:
        self._queues: dict[Hashable, deque[Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._arrivals: dict[Hashable, asyncio.Event] = {}

    def arrival(self, key: Hashable) -> asyncio.Event:
        """Set when the next job for ``key`` is submitted: a job that only waits may leave the rest to it."""
        return self._arrivals.setdefault(key, asyncio.Event())

    def submit(self, key: Hashable, job: Job) -> None:
        if (arrived := self._arrivals.pop(key, None)) is not None:
            arrived.set()
        queue = self._queues.get(key)
        if queue is not None:
            queue.append(job)
            return
        self._queues[key] = deque([job])
        self._idle.clear()
        task = asyncio.create_task(self._run(key), name=f"mailbox:{key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: Hashable) -> None:
        queue = self._queues[key]
        try:
            while queue:
                try:
                    await queue[0]()
                except asyncio.CancelledError:
                    raise
                except Exception:  # jobs own their retries; a bug here must not kill the key's actor
                    log.exception("mailbox %s: unhandled error", key)
                queue.popleft()
        finally:
            del self._queues[key]
            if not self._queues:
                self._idle.set()

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    async def drain(self, timeout: float | None = None) -> None:
        """Wait until every submitted item has been handled."""
        await asyncio.wait_for(self._idle.wait(), timeout)

    async def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
