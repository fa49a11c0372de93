"""The disk budget of the tenants with a live session on this host (issue 36, rule in ``treadle.core.disk``).

One loop measures the workspaces and runtimes' homes (``treadle.sandbox.disk``) of every tenant with a live
session every ``disk_check_seconds``, a tenant whose walk takes long less often, and ends every live session
of a tenant over its ceiling with reason ``disk_quota``: the runtime and everything in its sandbox stop writing, and the run playing
on it fails with that reason (``core/run/supervision.py``). The ceiling is refreshed when a session is placed
and when a turn starts: usage already over the budget then may stay, never grow.
"""

from __future__ import annotations

import asyncio
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
        self._allowed: dict[str, DiskUsage] = {}  # tenant -> its usage when a session or turn began over budget
        self._last: dict[str, DiskUsage] = {}
        self._due: dict[str, float] = {}  # tenant -> when its next check is due (a long walk: later)

    async def begin(self, tenant: str) -> None:
        """A session was placed or a turn starts: what the tenant holds now over its budget may stay."""
        budget = await self._budget(tenant)
        if not budget.limited:
            return
        last = self._last.get(tenant)
        if last is None or over(last, ceiling(budget, None)):
            last, _ = await self._measure(tenant, budget)
            self._last[tenant] = last
        if over(last, ceiling(budget, None)):
            self._allowed[tenant] = last
        else:
            self._allowed.pop(tenant, None)

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._min_interval)
            await self.sweep()

    async def sweep(self) -> None:
        tenants = {s.tenant for s in self._sessions.values()}
        for gone in [t for t in (*self._last, *self._allowed, *self._due) if t not in tenants]:
            self._last.pop(gone, None)
            self._allowed.pop(gone, None)
            self._due.pop(gone, None)
        for tenant in sorted(tenants):
            if self._due.get(tenant, 0.0) > self._clock.now():
                continue
            try:
                await self._check(tenant)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("disk check of tenant %s failed; the next one retries", tenant)

    async def _check(self, tenant: str) -> None:
        budget = await self._budget(tenant)
        if not budget.limited:
            return
        usage, took = await self._measure(tenant, budget)
        self._last[tenant] = usage
        # A check ran every min_interval at most; a long walk pushes its tenant's next one further out.
        self._due[tenant] = self._clock.now() + next_check(self._min_interval, took) - self._min_interval
        reason = over(usage, ceiling(budget, self._allowed.get(tenant)))
        if reason is None:
            return
        log.warning("tenant %s is over its disk budget: %s", tenant, reason)
        for session_id in [sid for sid, s in list(self._sessions.items()) if s.tenant == tenant]:
            await self._end(session_id, DISK_QUOTA, reason)

    async def _measure(self, tenant: str, budget: DiskBudget) -> tuple[DiskUsage, float]:
        started = time.monotonic()
        usage = await asyncio.to_thread(measure, self._roots(tenant), budget.files)
        return usage, time.monotonic() - started
