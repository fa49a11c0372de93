"""The idle reaper: releases provider runtimes nobody has used for ``idle_seconds`` (L9.3, L9.5).

Releasing goes through the production lifecycle (adapter ``close()``, a ``SessionStopped`` with reason
``idle``); the provider thread and its native ref stay, so the next message resumes the same thread.
A session is idle when no turn plays on it and nothing touched it (placement, a verb, a turn ending)
for the idle time, measured on the injected clock.

A session is unresponsive when a turn plays on it but has reported nothing, waits for no answer and got no
verb for ``unresponsive_seconds`` (issue 36: a runtime whose every model request hangs, a sandbox wedged at
its pids limit). It is released the same way with reason ``unresponsive``: the runtime and everything in its
sandbox end, and the run gets a recovery attempt, or fails once recovery is spent (L9.3).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from treadle.runtime.clock import Clock

log = logging.getLogger(__name__)

IDLE = "idle"
UNRESPONSIVE = "unresponsive"


class Reapable(Protocol):
    last_active: float

    @property
    def busy(self) -> bool: ...

    @property
    def quiet_since(self) -> float | None:
        """While a turn plays and no request of it waits for an answer: when it was last heard from."""
        ...


class IdleReaper:
    def __init__(
        self,
        sessions: Mapping[str, Reapable],
        clock: Clock,
        idle_seconds: float,
        release: Callable[[str, str], Awaitable[None]],
        unresponsive_seconds: float = 0.0,
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self._idle = idle_seconds
        self._unresponsive = unresponsive_seconds  # 0: a playing turn is never released
        self._release = release
        # Look often enough that a session never outlives its idle (or unresponsive) time by more than half of it.
        self._period = max(min(idle_seconds, unresponsive_seconds or idle_seconds) / 2, 0.05)

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

    def unresponsive(self) -> list[str]:
        if not self._unresponsive:
            return []
        now = self._clock.now()
        return [
            sid
            for sid, s in self._sessions.items()
            if (quiet := s.quiet_since) is not None and now - quiet >= self._unresponsive
        ]

    async def sweep(self) -> list[str]:
        """Release every idle and every unresponsive session; returns their ids."""
        released = []
        for session_id, reason in [
            *((s, IDLE) for s in self.idle()),
            *((s, UNRESPONSIVE) for s in self.unresponsive()),
        ]:
            session = self._sessions.get(session_id)
            # Re-checked after every await: a turn may have started on it (or reported) meanwhile.
            if session is None or not self._still(session, reason):
                continue
            log.info("releasing %s session %s", reason, session_id)
            await self._release(session_id, reason)
            released.append(session_id)
        return released

    def _still(self, session: Reapable, reason: str) -> bool:
        now = self._clock.now()
        if reason == IDLE:
            return not session.busy and now - session.last_active >= self._idle
        quiet = session.quiet_since
        return quiet is not None and now - quiet >= self._unresponsive
