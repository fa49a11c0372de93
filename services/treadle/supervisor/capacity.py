"""Freed provider capacity, as the supervisor hears it. Hosts announce on ``treadle.freed.<volume>`` (with
the tenant concerned) when a session or a turn ends or a host starts; the supervisor hears every volume and
wakes the runs held on that one (a run's thread lives on one volume). Runs held (L9.3) try again at once:
for ``tenant_quota`` on their own tenant's announcements, for any other reason (``capacity``,
``sandbox_unavailable``: a host that can sandbox may start) on any."""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from treadle.eventlog import nats_patches, subjects


class Ticket:
    """Taken before asking for room, so an announcement between the refusal and the wait is not missed."""

    def __init__(self, any_: asyncio.Event, tenant: asyncio.Event) -> None:
        self.any, self.tenant = any_, tenant


class FreedCapacity:
    def __init__(self, nc: NATS) -> None:
        self._nc = nc
        self._subject = subjects.HOST_FREED_ALL
        self._any: dict[str, asyncio.Event] = {}  # per volume, only volumes with a run waiting since it was set
        # (volume, tenant) -> set at that tenant's next announcement on that volume
        self._tenants: dict[tuple[str, str], asyncio.Event] = {}
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await nats_patches.subscribe(self._nc, self._subject, self._on_freed)  # one per turn

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    def _on_freed(self, msg: Msg) -> None:
        volume = msg.subject.rsplit(".", 1)[-1]
        room = self._any.pop(volume, None)
        if room is not None:
            room.set()
        tenant = self._tenants.pop((volume, msg.data.decode(errors="replace")), None)
        if tenant is not None:
            tenant.set()

    def ticket(self, volume: str, tenant: str) -> Ticket:
        return Ticket(
            self._any.setdefault(volume, asyncio.Event()), self._tenants.setdefault((volume, tenant), asyncio.Event())
        )

    @staticmethod
    async def wait(ticket: Ticket, reason: str, timeout: float, also: tuple[asyncio.Event, ...] = ()) -> None:
        """Until room is announced for ``reason`` after the ticket was taken, one of ``also`` is set, or ``timeout``."""
        events = [ticket.tenant if reason == "tenant_quota" else ticket.any, *also]
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
