"""Spare runtimes: launched per tenant before any thread of theirs exists, for its next thread's first message.

A runtime launched when its thread is created (warm.py) cannot be ready for a message sent at once: its start
(sandbox, process, ``initialize``) takes longer than the message's way to its placement. A spare has done that
start already: when a hint names a new session of its tenant and provider, the pool hands it over and only the
thread's workspace is bound into its sandbox (``Sandbox.attach``) and its provider thread opened.

A spare is its tenant's only (its uid, its runtime home, its sandbox), holds no workspace until it is taken (an
empty placeholder of its own) and is taken once: it leaves the pool for good, and a spare whose process exited is
stopped, never handed over. A tenant whose turn just ended on this host gets one spare (started a moment later,
it slows neither a runtime's start nor a turn, nor that turn's run completing: all would wait on its CPU); at
most ``size`` on a host, one per tenant and provider, each stopped when not taken within ``seconds``. Hosts that give sessions credentials of their own (MCP) launch none: a
credential names its session and thread, which a spare does not have yet."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from treadle.providers import protocol as hp
from treadle.providers.base import ProviderAdapter
from treadle.runtime.cancelling import cancel_and_wait
from treadle.runtime.clock import Clock
from treadle.runtime.metrics import WARM_SESSIONS

log = logging.getLogger(__name__)
# A spare starts this long after the turn that asked for it ended: meanwhile that turn's run completes (its
# checkpoint, its events, the client's answer), which the spare's start (two interpreters and Codex's own, some
# 150 ms of CPU) slowed by as much on a two-core host when it began at once.
SPARE_DELAY = 1.0


@dataclass(eq=False)
class Spare:
    tenant: str
    provider: str
    spare_id: str
    adapter: ProviderAdapter
    since: float  # on the host's clock
    launch: asyncio.Task[None]  # the runtime started, past its handshake

    @property
    def ready(self) -> bool:
        """Started, and its process still runs (a spare that exited is never handed over)."""
        if not self.launch.done() or self.launch.cancelled() or self.launch.exception() is not None:
            return False
        return bool(getattr(self.adapter, "running", False))


class Spares:
    """``make(tenant, provider, spare_id)`` builds a spare's adapter (its placeholder workspace included); ``may``
    says whether the host has room for one more runtime of the tenant; ``workspace_of`` is a placement's
    workspace on the host."""

    def __init__(
        self,
        size: int,
        seconds: float,
        clock: Clock,
        make: Callable[[str, str, str], ProviderAdapter],
        may: Callable[[str], bool],
        workspace_of: Callable[[hp.PlaceSession], Path],
        delay: float = SPARE_DELAY,
    ) -> None:
        self.size = size
        self.seconds = seconds
        self.delay = delay
        self._clock = clock
        self._make, self._may, self._workspace_of = make, may, workspace_of
        self._spares: dict[tuple[str, str], Spare] = {}  # (tenant, provider) -> its one spare
        self._stopping: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._spares)

    def of(self, tenant: str) -> list[Spare]:
        return [s for s in self._spares.values() if s.tenant == tenant]

    def want(self, tenant: str, provider: str) -> bool:
        """Launch a spare of ``tenant`` for ``provider`` unless it has one, the pool is full or the host has no
        room: never at another runtime's expense."""
        key = (tenant, provider)
        if self.size == 0 or key in self._spares or len(self._spares) >= self.size or not self._may(tenant):
            return False
        spare_id = f"spare_{uuid.uuid4().hex[:16]}"
        try:
            adapter = self._make(tenant, provider, spare_id)
        except Exception as exc:  # no sandbox, an unknown provider: no spare, nothing else changes
            log.info("no spare runtime for tenant %s: %r", tenant, exc)
            return False

        async def launch() -> None:
            if self.delay:
                await self._clock.sleep(self.delay)
            await adapter.warm()

        task = asyncio.create_task(launch(), name=f"spare:{spare_id}")
        self._spares[key] = Spare(tenant, provider, spare_id, adapter, self._clock.now(), task)
        WARM_SESSIONS.labels("spare_launched").inc()
        return True

    def take(self, tenant: str, provider: str) -> Spare | None:
        """The tenant's ready spare for ``provider``, out of the pool for good; None when there is none ready. One
        not ready because its process exited (or its start failed) is stopped."""
        spare = self._spares.get((tenant, provider))
        if spare is None or not spare.launch.done():
            return None
        del self._spares[(tenant, provider)]
        if not spare.ready:
            self._stop_later(spare, "spare_failed")
            return None
        WARM_SESSIONS.labels("spare_taken").inc()
        return spare

    async def bind(self, spare: Spare, placement: hp.PlaceSession) -> None:
        """The taken ``spare`` becomes ``placement``'s runtime: its thread's workspace bound into its sandbox."""
        if (placement.tenant, placement.provider) != (spare.tenant, spare.provider):
            raise ValueError("a spare runtime serves its own tenant and provider only")
        await spare.adapter.take_workspace(self._workspace_of(placement), placement)

    async def run(self) -> None:
        """Stops the spares no thread took in time, and those whose process exited."""
        while True:
            await self._clock.sleep(max(0.5, min(self.seconds / 2, 5.0)))
            now = self._clock.now()
            for key, spare in list(self._spares.items()):
                gone = spare.launch.done() and not spare.ready
                if gone or now - spare.since >= self.seconds:
                    del self._spares[key]
                    self._stop_later(spare, "spare_failed" if gone else "spare_expired")

    async def stop(self) -> None:
        spares = list(self._spares.values())
        self._spares.clear()
        await asyncio.gather(*(self._stop(s, "spare_expired") for s in spares), return_exceptions=True)
        await asyncio.gather(*self._stopping, return_exceptions=True)

    def _stop_later(self, spare: Spare, outcome: str) -> None:
        task = asyncio.create_task(self._stop(spare, outcome), name=f"unspare:{spare.spare_id}")
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    @staticmethod
    async def _stop(spare: Spare, outcome: str) -> None:
        WARM_SESSIONS.labels(outcome).inc()
        await cancel_and_wait([spare.launch])
        if not spare.launch.cancelled():
            spare.launch.exception()  # seen: a spare that failed to start is stopped, nothing more
        await spare.adapter.close()
