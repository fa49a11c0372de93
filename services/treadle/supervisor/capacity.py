"""Freed provider capacity, as the supervisor hears it: hosts announce on ``treadle.freed.<volume>`` when a
session or a turn ends or a host starts, and runs held for capacity (L9.3) try again at once."""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.client import Client as NATS

from treadle.eventlog import subjects


class FreedCapacity:
    def __init__(self, nc: NATS, volume: str) -> None:
        self._nc = nc
        self._subject = subjects.host_freed(volume)
        self._now = asyncio.Event()
        self._sub = None

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(self._subject, cb=self._on_freed)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def _on_freed(self, _msg) -> None:
        self._now.set()
        self._now = asyncio.Event()  # later waiters wait for the next announcement

    def ticket(self) -> asyncio.Event:
        """Taken before asking for room: an announcement between the refusal and the wait is not missed."""
        return self._now

    @staticmethod
    async def wait(ticket: asyncio.Event, timeout: float) -> None:
        """Until room was announced after ``ticket`` was taken, or ``timeout`` (a lost announcement)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(ticket.wait(), timeout)
