"""Notices provider hosts that died without saying so (kill -9, a lost machine) and reports their sessions
stopped (L9.3), so the supervisor resumes the work elsewhere from the threads' durable cursors.

Every host runs one. A host is dead when its heartbeat revision has not moved for ``expiry`` seconds on this
watcher's clock (a record the bucket's TTL already removed counts as not moving) while this host's own
heartbeat kept moving: when its own stands still too, the broker is failing (a node's loss moves the bucket's
leader), every heartbeat stalls, and judging then would report every host's sessions lost at once. So the
watcher judges nobody while its own heartbeat is stale, and starts every count afresh once it moves again.
Several watchers reporting the same session is harmless: the stop event's id is derived from the session and
its boot, so the stream drops the copies, and the supervisor ignores a stop for a session no longer live.

Each look reads the registry's in-memory views (``registry.py``), confirmed against the streams' last sequences:
what it judges on is the buckets as of a moment during the look, never a partial read or a stalled watch.

It also reports this host's own sessions left by an earlier boot, which the restarted host reports at its
start: a session that start missed would leave its run waiting for ever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from treadle.runtime.clock import Clock

from .registry import Registry, SessionRecord

log = logging.getLogger(__name__)

HOST_LOST = "host_lost"
HOST_RESTARTED = "host_restarted"
STALE_BEATS = 3  # own heartbeat periods without a move after which this watcher stops judging others
REPORTS_IN_FLIGHT = 32
Report = Callable[[str, SessionRecord, str], Awaitable[None]]  # (session id, record, reason)


async def report_all(sessions: Iterable[tuple[str, SessionRecord]], report: Report, reason: str) -> None:
    """Report many sessions stopped, several at a time: one by one, a host's idle sessions held up the report
    (and so the recovery) of the one whose run was waiting, for seconds per hundred sessions."""
    gate = asyncio.Semaphore(REPORTS_IN_FLIGHT)

    async def one(session_id: str, record: SessionRecord) -> None:
        async with gate:
            await report(session_id, record, reason)

    await asyncio.gather(*(one(session_id, record) for session_id, record in sessions))


class HostWatcher:
    def __init__(
        self,
        registry: Registry,
        own_host_id: str,
        own_boot_id: str,
        clock: Clock,
        expiry: float,
        period: float,
        report: Report,
    ) -> None:
        self._registry = registry
        self._own = own_host_id
        self._boot = own_boot_id
        self._clock = clock
        self._expiry = expiry
        self._period = period
        self._report = report
        self._seen: dict[str, tuple[int, float]] = {}  # host id -> (heartbeat revision, when it last moved)
        self._blind = False  # this host's own heartbeat stood still: others' counts restart when it moves again

    async def run(self) -> None:
        while True:
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker may be away; the next period tries again
                log.warning("host watch failed: %r", exc)
            await self._clock.sleep(self._period)

    async def scan(self) -> list[str]:
        """One look at the registry; returns the hosts found dead (whose sessions were reported)."""
        now = self._clock.now()
        revisions = await self._registry.host_revisions()
        for host_id, revision in revisions.items():
            seen = self._seen.get(host_id)
            if seen is None or seen[0] != revision:
                self._seen[host_id] = (revision, now)
        own = self._seen.get(self._own)
        if own is None or now - own[1] > STALE_BEATS * self._period:
            self._blind = True
            return []
        if self._blind:
            self._blind = False
            self._seen = {host_id: (revision, now) for host_id, (revision, _) in self._seen.items()}
        dead: list[str] = []
        for host_id, sessions in (await self._registry.sessions_by_host()).items():
            if host_id == self._own:
                earlier = [(sid, record) for sid, record in sessions.items() if record.boot_id != self._boot]
                await report_all(earlier, self._forget(host_id), HOST_RESTARTED)
                continue
            seen = self._seen.setdefault(host_id, (revisions.get(host_id, 0), now))
            if now - seen[1] < self._expiry:
                continue
            dead.append(host_id)
            log.warning(
                "host %s missed its heartbeats for %.1fs: reporting %d sessions stopped",
                host_id,
                now - seen[1],
                len(sessions),
            )
            await report_all(sessions.items(), self._forget(host_id), HOST_LOST)
        return dead

    def _forget(self, host_id: str) -> Report:
        async def forget(session_id: str, record: SessionRecord, reason: str) -> None:
            await self._report(session_id, record, reason)
            await self._registry.forget_session(host_id, session_id)

        return forget
