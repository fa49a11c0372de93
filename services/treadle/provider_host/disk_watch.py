"""The disk budget of the tenants with a live session on this host (issue 36, rule in ``treadle.core.disk``).

One watch per such tenant measures its workspaces and its runtimes' homes (``treadle.sandbox.disk``) every
``disk_check_seconds``, or less often when the walk takes long, and ends every live session of a tenant over its
ceiling with reason ``disk_quota``: the runtime and everything in its sandbox stop writing, and the run playing
on it fails with that reason (``core/run/supervision.py``). The ceiling is refreshed when a session is placed
and when a turn starts: usage already over the budget then may stay, never grow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Protocol

from treadle.core.disk import DISK_QUOTA, DiskBudget, DiskUsage, ceiling, next_check, over
from treadle.runtime.clock import Clock
from treadle.sandbox.disk import measure

log = logging.getLogger(__name__)


class Tenanted(Protocol):
    @property
    def tenant(self) -> str: ...


class DiskWatch:
    def __init__(
        self,
        sessions: Mapping[str, Tenanted],
        clock: Clock,
        roots: Callable[[str], list[Path]],
        budget: Callable[[str], Awaitable[DiskBudget]],
        end: Callable[[str, str, str | None], Awaitable[None]],
        min_interval: float,
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self._roots = roots
        self._budget = budget
        self._end = end
        self._min_interval = min_interval
        self._watches: dict[str, asyncio.Task] = {}
        self._allowed: dict[str, DiskUsage] = {}  # tenant -> its usage when a session or turn began over budget
        self._last: dict[str, DiskUsage] = {}

    async def begin(self, tenant: str) -> None:
        """A session was placed or a turn starts: what the tenant holds now over its budget may stay."""
        budget = await self._budget(tenant)
        if not budget.limited:
            return
        last = self._last.get(tenant)
        if last is None or over(last, ceiling(budget, None)):
            usage, _ = await self._measure(tenant, budget)
            self._last[tenant] = usage
            last = usage
        if over(last, ceiling(budget, None)):
            self._allowed[tenant] = last
        else:
            self._allowed.pop(tenant, None)
        if tenant not in self._watches or self._watches[tenant].done():
            self._watches[tenant] = asyncio.create_task(self._watch(tenant), name=f"disk:{tenant}")

    async def close(self) -> None:
        tasks = list(self._watches.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _live(self, tenant: str) -> list[str]:
        return [sid for sid, s in self._sessions.items() if s.tenant == tenant]

    async def _measure(self, tenant: str, budget: DiskBudget) -> tuple[DiskUsage, float]:
        started = time.monotonic()
        usage = await asyncio.to_thread(measure, self._roots(tenant), budget.files)
        return usage, time.monotonic() - started

    async def _watch(self, tenant: str) -> None:
        interval = self._min_interval
        while True:
            await self._clock.sleep(interval)
            if not self._live(tenant):
                self._allowed.pop(tenant, None)
                self._last.pop(tenant, None)
                return
            try:
                budget = await self._budget(tenant)
                if not budget.limited:
                    continue
                usage, took = await self._measure(tenant, budget)
                self._last[tenant] = usage
                interval = next_check(self._min_interval, took)
                reason = over(usage, ceiling(budget, self._allowed.get(tenant)))
                if reason is None:
                    continue
                log.warning("tenant %s is over its disk budget: %s", tenant, reason)
                for session_id in self._live(tenant):
                    await self._end(session_id, DISK_QUOTA, reason)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("disk check of tenant %s failed; the next one retries", tenant)
