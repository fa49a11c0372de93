"""The idle reaper: releases provider runtimes nobody has used for ``idle_seconds`` (L9.3, L9.5).

Releasing goes through the production lifecycle (adapter ``close()``, a ``SessionStopped`` with reason
``idle``); the provider thread and its native ref stay, so the next message resumes the same thread.
A session is idle when no turn plays on it and nothing touched it (placement, a verb, a turn ending)
for the idle time, measured on the injected clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from treadle.runtime.clock import Clock

log = logging.getLogger(__name__)

IDLE = "idle"


class Reapable(Protocol):
    last_active: float

    @property
    def busy(self) -> bool: ...


class IdleReaper:
    def __init__(
        self,
        sessions: Mapping[str, Reapable],
        clock: Clock,
        idle_seconds: float,
        release: Callable[[str, str], Awaitable[None]],
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self._idle = idle_seconds
        self._release = release
        # Look often enough that a session never outlives its idle time by more than half of it.
        self._period = max(idle_seconds / 2, 0.05)

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._period)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("idle sweep failed; the next one retries")

    def idle(self) -> list[str]:
        now = self._clock.now()
        return [sid for sid, s in self._sessions.items() if not s.busy and now - s.last_active >= self._idle]

    async def sweep(self) -> list[str]:
        """Release every idle session; returns their ids."""
        released = []
        for session_id in self.idle():
            session = self._sessions.get(session_id)
            # Re-checked after every await: a turn may have started on it meanwhile.
            if session is None or session.busy or self._clock.now() - session.last_active < self._idle:
                continue
            log.info("releasing idle session %s", session_id)
            await self._release(session_id, IDLE)
            released.append(session_id)
        return released
