"""Runtimes launched ahead of their placement. A new thread's first run waits for its runtime's start (the sandbox,
the process, its handshake): most of its first turn. The supervisor names the session that run will place
(``WarmSession``) when the thread is created (speculative: launched only into free room) and again when it dispatches
the run; one host of the volume launches that session's runtime and opens its fresh provider thread meanwhile, and
the placement naming the same session adopts both.

Nothing is shared: a warmed runtime is launched as its own session (its tenant's uid, workspace, home and MCP
credential), and only the placement of that session id, tenant, thread and settings adopts it. The pool is bounded:
at most ``size`` runtimes on a host, at most half of them (at least one) one tenant's, each stopped when not adopted
within ``seconds``. A tenant starting many threads at once only replaces its own warmed runtimes."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from treadle.providers import protocol as hp
from treadle.providers.base import ProviderAdapter, UnknownProvider
from treadle.providers.registry import adapter_class
from treadle.runtime.cancelling import cancel_and_wait
from treadle.runtime.clock import Clock
from treadle.runtime.metrics import WARM_SESSIONS
from treadle.sandbox.host import SandboxUnavailable

from .spares import Spares

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Warm:
    request: hp.WarmSession
    adapter: ProviderAdapter
    since: float  # on the host's clock
    launch: asyncio.Task[tuple[str, bool]]  # the runtime started and its fresh provider thread opened


class WarmPool:
    def __init__(self, size: int, seconds: float) -> None:
        self.size = size
        self.seconds = seconds
        self._warm: dict[str, Warm] = {}  # session id -> its runtime, oldest first
        # session id -> the stop of its warmed runtime: a placement of that session waits for it (its credential
        # is revoked before the placement mints the session's own)
        self.discarding: dict[str, asyncio.Task[None]] = {}

    @property
    def per_tenant(self) -> int:
        return max(1, self.size // 2)

    def __len__(self) -> int:
        return len(self._warm)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._warm

    def of(self, tenant: str) -> list[Warm]:
        return [w for w in self._warm.values() if w.request.tenant == tenant]

    def has_room(self, tenant: str) -> bool:
        """One more of ``tenant`` fits without stopping anything."""
        return len(self._warm) < self.size and len(self.of(tenant)) < self.per_tenant

    def make_way(self, tenant: str) -> list[Warm]:
        """Taken out of the pool so that one more of ``tenant`` fits: its own oldest when it holds its share, else
        the oldest of the tenant holding the most when the pool is full."""
        own = self.of(tenant)
        if len(own) >= self.per_tenant:
            return [self._warm.pop(own[0].request.session_id)]
        if len(self._warm) < self.size:
            return []
        busiest = Counter(w.request.tenant for w in self._warm.values()).most_common(1)[0][0]
        return [self._warm.pop(self.of(busiest)[0].request.session_id)]

    def add(self, warm: Warm) -> None:
        self._warm[warm.request.session_id] = warm

    def take(self, session_id: str) -> Warm | None:
        return self._warm.pop(session_id, None)

    def expired(self, now: float) -> list[Warm]:
        old = [sid for sid, w in self._warm.items() if now - w.since >= self.seconds]
        return [self._warm.pop(sid) for sid in old]

    def drain(self) -> list[Warm]:
        out = list(self._warm.values())
        self._warm.clear()
        return out


class Warmer:
    """The host's side: launches what the pool admits, hands a placement its session's runtime, stops the rest.
    ``make`` builds a session's adapter (the sandbox check included), ``grant`` gives it its MCP credential before
    it starts, ``revoke`` takes a session's credentials back (if the host grants any), ``may`` says whether the host has room for it."""

    def __init__(
        self,
        pool: WarmPool,
        clock: Clock,
        make: Callable[[hp.PlaceSession], ProviderAdapter],
        grant: Callable[[ProviderAdapter, hp.PlaceSession], Awaitable[None]],
        revoke: Callable[[str], Awaitable[None]],
        may: Callable[[hp.WarmSession], bool],
        spares: Spares | None = None,
    ) -> None:
        self.pool = pool
        self._clock = clock
        self._make, self._grant, self._revoke, self._may = make, grant, revoke, may
        self.spares = spares

    def offer(self, request: hp.WarmSession) -> bool:
        """Launch ``request``'s runtime unless the pool is off, the host or tenant has no room, or the session is
        known here already. Whatever must make way is stopped in the background (never for a speculative one)."""
        if self.pool.size == 0 or request.session_id in self.pool or request.session_id in self.pool.discarding:
            return False
        try:
            warms = getattr(adapter_class(request.provider), "warms", False)
        except UnknownProvider:
            return False
        if not warms or not self._may(request):
            return False
        if request.speculative and not self.pool.has_room(request.tenant):
            return False
        placement = request.placement()
        # A spare of the tenant started already (spares.py): only the workspace is bound and the thread opened
        spares = self.spares
        spare = spares.take(request.tenant, request.provider) if spares is not None else None
        if spare is not None:
            adapter = spare.adapter
        else:
            try:
                adapter = self._make(placement)
            except (SandboxUnavailable, UnknownProvider, ValueError) as exc:
                log.info("session %s not warmed: %s", request.session_id, exc)
                return False
        for old in self.pool.make_way(request.tenant):
            WARM_SESSIONS.labels("evicted").inc()
            self._discard_later(old)

        async def launch() -> tuple[str, bool]:
            if spare is not None and spares is not None:
                await spares.bind(spare, placement)  # spares run on hosts that grant no credentials
            else:
                await self._grant(adapter, placement)
                await adapter.warm()
            # The placement adopting it opens a fresh thread with these very settings (WarmSession.matches)
            return await adapter.open_thread(None, f"scripted-{placement.provider_thread_id}")

        task = asyncio.create_task(launch(), name=f"warm:{request.session_id}")
        self.pool.add(Warm(request, adapter, self._clock.now(), task))
        WARM_SESSIONS.labels("launched").inc()
        return True

    async def adopt(self, request: hp.PlaceSession) -> tuple[ProviderAdapter, tuple[str, bool]] | None:
        """The runtime warmed for this very placement, launched, and what its ``open_thread`` returned (None: there
        is none, or it failed; the session starts as it would have). One warmed under the same session id for
        anything else is stopped."""
        warm = self.pool.take(request.session_id)
        stopping = self.pool.discarding.get(request.session_id)
        if stopping is not None:
            await asyncio.shield(stopping)
        if warm is None:
            return None
        if not warm.request.matches(request):
            await self._discard(warm, "failed")
            return None
        try:
            opened = await asyncio.shield(warm.launch)
        except asyncio.CancelledError:
            self._discard_later(warm)
            raise
        except Exception as exc:
            log.warning("warmed runtime of session %s failed to start: %r", request.session_id, exc)
            await self._discard(warm, "failed")
            return None
        warm.adapter.adopt(request)
        WARM_SESSIONS.labels("adopted").inc()
        return warm.adapter, opened

    async def run(self) -> None:
        """Stops the runtimes no placement adopted in time."""
        while True:
            await self._clock.sleep(max(0.5, min(self.pool.seconds / 2, 5.0)))
            for warm in self.pool.expired(self._clock.now()):
                WARM_SESSIONS.labels("expired").inc()
                self._discard_later(warm)

    async def stop(self) -> None:
        await asyncio.gather(*(self._discard(w, "expired") for w in self.pool.drain()), return_exceptions=True)
        await asyncio.gather(*self.pool.discarding.values(), return_exceptions=True)

    def _discard_later(self, warm: Warm) -> None:
        session_id = warm.request.session_id
        task = asyncio.create_task(self._discard(warm, None), name=f"unwarm:{session_id}")
        self.pool.discarding[session_id] = task
        task.add_done_callback(lambda _: self.pool.discarding.pop(session_id, None))

    async def _discard(self, warm: Warm, outcome: str | None) -> None:
        if outcome is not None:
            WARM_SESSIONS.labels(outcome).inc()
        await cancel_and_wait([warm.launch])
        if not warm.launch.cancelled():
            warm.launch.exception()  # seen: a launch that failed is reported by whoever adopts it, or not at all
        try:
            await warm.adapter.close()
        finally:
            await self._revoke(warm.request.session_id)
