"""Tenant policies served from memory, kept current by a KV watch (``runtime.kv_follow``, opened again when it
ends), with a bound on staleness: a policy change applies to every command accepted more than ``BOUND`` seconds
after its ``PUT`` answered, and at once on the replica that took the ``PUT``.

The watch alone cannot promise that (a stalled watch looks like a quiet one), so a probe asks the bucket every
``PROBE`` seconds, with a direct get when the bucket allows it, whether any record follows the last revision the
watch delivered. Only "none" confirms the cache: every ``PUT`` answered before the probe was sent is then in it.
The cache answers while its last confirmation was sent less than ``BOUND`` ago; otherwise each read goes to the
bucket (``PolicyStore.get``) as before, so a stalled watch or a slow broker costs speed, never the bound. Probes
stop while nothing reads the cache (an idle process asks the broker nothing); the next read goes to the bucket
and starts them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import msgspec
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from treadle.core.policy import TenantPolicy
from treadle.runtime import kv_follow
from treadle.runtime.clock import Clock, SystemClock

from .policies import BUCKET, PolicyStore

log = logging.getLogger(__name__)

BOUND = 1.0  # seconds: how late a PUT answered elsewhere may apply (the decision in issue 38)
PROBE = 0.25  # seconds between probes: a few per bound, so a live cache is always confirmed
_STREAM = f"KV_{BUCKET}"


class PolicyCache:
    """``get`` and ``put`` like ``PolicyStore``; ``start`` before use, ``stop`` at the end."""

    def __init__(self, store: PolicyStore, clock: Clock | None = None, bound: float = BOUND) -> None:
        self._store = store
        self._clock = clock or SystemClock()
        self._bound = bound
        self._known: dict[str, tuple[TenantPolicy | None, int]] = {}  # tenant -> (None: read the bucket; revision)
        self._seen = 0  # the last revision the watch delivered: every record up to it is in ``_known``
        self._confirmed: float | None = None  # when the last probe that found nothing newer was sent
        self._delivered = asyncio.Condition()
        self._last_read: float | None = None  # when a read last asked: probes run only while reads come
        self._reading = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> None:
        direct = bool((await self._store.js.stream_info(_STREAM)).config.allow_direct)
        self._tasks.append(
            asyncio.create_task(kv_follow.follow(self._store.js, BUCKET, self._on), name="policies:watch")
        )
        self._tasks.append(asyncio.create_task(self._probe_loop(direct), name="policies:probe"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def fresh(self) -> bool:
        """True while the cache may answer: confirmed by a probe sent less than the bound ago."""
        return self._confirmed is not None and self._clock.now() - self._confirmed < self._bound

    def revision(self, tenant: str) -> int:
        """The revision of ``tenant``'s policy this cache holds (0: none known)."""
        known = self._known.get(tenant)
        return known[1] if known is not None else 0

    async def get(self, tenant: str, at_least: int = 0) -> TenantPolicy:
        """The policy, from memory while confirmed and no older than revision ``at_least`` (a command sent through
        the replica that took a ``PUT`` carries its revision), else from the bucket."""
        self._last_read = self._clock.now()
        self._reading.set()
        known = self._known.get(tenant)
        if at_least > self.revision(tenant):
            return await self._store.get(tenant)
        if self.fresh() and (known is None or known[0] is not None):
            return known[0] if known is not None and known[0] is not None else TenantPolicy()
        return await self._store.get(tenant)  # unconfirmed, or a record the cache could not read: as before

    async def put(self, tenant: str, policy: TenantPolicy, actor: str) -> TenantPolicy:
        stored, revision = await self._store.write(tenant, policy, actor)
        self._apply(tenant, stored, revision)  # at once on this replica, whatever the watch's pace
        return stored

    async def delivered(self, revision: int) -> None:
        """Returns once the watch has delivered ``revision`` (tests wait on this, never on time)."""
        async with self._delivered:
            await self._delivered.wait_for(lambda: self._seen >= revision)

    def _apply(self, tenant: str, policy: TenantPolicy | None, revision: int) -> None:
        known = self._known.get(tenant)
        if known is None or known[1] < revision:  # never an older record over a newer one
            self._known[tenant] = (policy, revision)

    async def _on(self, item: kv_follow.Record | kv_follow.Mark) -> None:
        """A record of the watch (a reopened one delivers the stored records again: ``_apply`` keeps the newest)."""
        if not isinstance(item, kv_follow.Record):
            return
        if item.value is None:
            self._apply(item.key, TenantPolicy(), item.revision)
        else:
            try:
                self._apply(item.key, msgspec.json.decode(item.value, type=TenantPolicy), item.revision)
            except msgspec.MsgspecError:  # the bucket read will raise it to whoever asks
                self._apply(item.key, None, item.revision)
        async with self._delivered:
            self._seen = max(self._seen, item.revision)
            self._delivered.notify_all()

    async def _probe_loop(self, direct: bool) -> None:
        while True:
            try:
                await self._probe(direct)
            except asyncio.CancelledError:
                raise
            except (NatsError, TimeoutError) as exc:  # unconfirmed meanwhile: reads go to the bucket
                log.info("policy cache probe failed: %r", exc)
            await self._clock.sleep(PROBE)
            if self._last_read is None or self._clock.now() - self._last_read >= self._bound:
                self._reading.clear()  # idle: no probe until a read comes (it goes to the bucket meanwhile)
                await self._reading.wait()

    async def _probe(self, direct: bool) -> None:
        """Confirms the cache when nothing follows what the watch delivered; else waits for the watch to bring
        the record found and asks again (more may have followed it)."""
        while True:
            sent = self._clock.now()
            seen = self._seen
            try:
                found = await self._store.js.get_msg(
                    _STREAM, seq=seen + 1, subject=f"$KV.{BUCKET}.>", next=True, direct=direct
                )
            except NotFoundError:
                self._confirmed = sent
                return
            async with asyncio.timeout(self._bound):
                await self.delivered(found.seq or seen + 1)
