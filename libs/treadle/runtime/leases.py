"""Partition leases in KV bucket ``treadle-leases`` and the per-partition work they license.

Records, per worker kind: ``<kind>.member.<replica>`` (a heartbeat) and ``<kind>.lease.<partition>`` (the
holder's replica name). Every ``ttl / 3`` a replica rewrites its heartbeat, renews its leases with OCC on
their revision, and carries out :func:`lease_plan.plan`: a claim is a create (free) or an update fenced on
the abandoned record's revision, so of two claimants one wins. A renewal that fails means another replica
took the partition over: its work stops at once. A replica that cannot renew for two thirds of ``ttl``
(the broker is unreachable) stops the work itself before anyone may take it over, so two replicas never
knowingly consume one partition; should they overlap anyway, OCC on the event log fences the stale one.
On SIGTERM a replica stops its work, then deletes its records, and the others claim at once; a replica
that dies is noticed when its records stand still for ``ttl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from nats.aio.client import Client as NATS
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from . import partitions as parts
from .clock import Clock, SystemClock
from .lease_plan import Liveness, plan
from .partition_migration import OWNER, Legacy, Migration

log = logging.getLogger(__name__)

BUCKET = "treadle-leases"
FENCE = 2 / 3  # of the TTL: a holder that could not renew for this long stops its partition's work
_DELETED = ("DEL", "PURGE")

Gained = Callable[[int], Awaitable[None]]
Lost = Callable[[int, bool], Awaitable[None]]  # (partition, handed back: True when released on purpose)


class PartitionLeases:
    def __init__(
        self,
        kv: KeyValue,
        *,
        kind: str,
        replica: str,
        partitions: int,
        ttl: float,
        gained: Gained,
        lost: Lost,
        clock: Clock | None = None,
    ) -> None:
        self._kv = kv
        self.kind, self.replica, self.partitions, self.ttl = kind, replica, partitions, ttl
        self._gained, self._lost = gained, lost
        self._clock = clock or SystemClock()
        self.period = ttl / 3
        self._liveness = Liveness(ttl)
        self._records: dict[str, tuple[bytes | None, int]] = {}  # key -> (value, None once deleted; revision)
        self.owned: dict[int, int] = {}  # partition -> revision of this replica's lease record
        self._renewed: dict[int, float] = {}  # partition -> when its lease was last written
        self._member_revision = 0
        self._watched = asyncio.Event()
        self._wake = asyncio.Event()  # a record was deleted (a replica handed back or left): act now
        self._tasks: list[asyncio.Task[Any]] = []
        # Set by stop() besides cancelling: Python 3.11's wait_for (inside nats-py's requests) can swallow a
        # cancellation that coincides with its reply, and the loop must end all the same.
        self._closing = False

    def _lease(self, partition: int) -> str:
        return f"{self.kind}.lease.{partition}"

    def _member(self) -> str:
        return f"{self.kind}.member.{self.replica}"

    async def start(self) -> None:
        self._watcher = await self._kv.watch(f"{self.kind}.>")
        self._tasks.append(asyncio.create_task(self._watch(), name=f"leases:{self.replica}:watch"))
        await asyncio.wait_for(self._watched.wait(), 10)
        try:
            await self.tick()  # claim at once: a lone replica consumes as soon as it is up
        except Exception as exc:  # e.g. the bucket's leader not elected yet in a cluster: the loop tries again
            log.warning("%s: first lease round failed: %r", self.replica, exc)
        self._tasks.append(asyncio.create_task(self._run(), name=f"leases:{self.replica}"))

    async def _watch(self) -> None:
        async for entry in self._watcher:
            if entry is None:  # the initial values are all in
                self._watched.set()
                continue
            value = None if entry.operation in _DELETED else entry.value
            self._records[entry.key] = (value, entry.revision or 0)
            self._liveness.observe(entry.key, entry.revision or 0, self._clock.now())
            if value is None and self._watched.is_set():
                self._wake.set()

    async def _nap(self) -> None:
        """One period, cut short when a record is deleted: handed-back partitions are claimed at once."""
        sleep = asyncio.ensure_future(self._clock.sleep(self.period))
        wake = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleep, wake}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleep.cancel()
            wake.cancel()
            self._wake.clear()

    async def _run(self) -> None:
        while not self._closing:
            await self._nap()
            if self._closing:
                return
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker may be away: the fence below decides what that costs
                log.warning("%s: lease round failed: %r", self.replica, exc)
            await self.fence()

    def holders(self) -> dict[int, str]:
        """The live holder of each partition as this replica sees it. A record naming this replica that it
        does not hold (left by its previous life) counts as free, so a restarted replica adopts it at once."""
        now = self._clock.now()
        found: dict[int, str] = {}
        for key, (value, _) in self._records.items():
            kind, what, ident = key.split(".", 2)
            if what != "lease" or value is None or not self._liveness.alive(key, now):
                continue
            holder, partition = value.decode(), int(ident)
            if holder != self.replica or partition in self.owned:
                found[partition] = holder
        for partition in self.owned:
            found[partition] = self.replica
        return found

    def members(self) -> set[str]:
        now = self._clock.now()
        return {
            key.split(".", 2)[2]
            for key, (value, _) in self._records.items()
            if key.split(".", 2)[1] == "member" and value is not None and self._liveness.alive(key, now)
        }

    async def tick(self) -> None:
        """One round: heartbeat, renew, then claim or release what the plan says."""
        me = self.replica.encode()
        member = self._records.get(self._member())
        if self._member_revision and member is not None and member[1] > self._member_revision:
            # Someone else beat under this name since this replica's last heartbeat: two processes share a
            # replica name (TREADLE_REPLICA must be unique per kind), and they will keep taking each other's
            # partitions. OCC keeps the log consistent, but say so loudly.
            log.error(
                "%s: another process heartbeats as %s; give each replica its own TREADLE_REPLICA",
                self.replica,
                self.replica,
            )
        self._member_revision = await self._kv.put(self._member(), me)
        for partition, revision in list(self.owned.items()):
            started = self._clock.now()
            try:
                revision = await self._kv.update(self._lease(partition), me, last=revision)
            except KeyWrongLastSequenceError:
                log.warning("%s: partition %d was taken over", self.replica, partition)
                await self._lose(partition)
                continue
            if partition in self.owned:  # the fence may have given it up meanwhile
                self.owned[partition], self._renewed[partition] = revision, started
        # Claims are fenced on the records as they were when deciding: one that changed since (another
        # replica claimed it while this round worked) fails its OCC check instead of being taken over.
        seen = {p: self._records.get(self._lease(p), (None, 0)) for p in range(self.partitions)}
        decided = plan(self.replica, self.partitions, self.holders(), self.members())
        for partition in decided.release:
            await self.release(partition)
        for partition in decided.claim:
            await self._claim(partition, *seen[partition])

    async def _claim(self, partition: int, value: bytes | None, revision: int) -> None:
        key, me = self._lease(partition), self.replica.encode()
        started = self._clock.now()
        try:
            if value is None:
                revision = await self._kv.create(key, me)
            else:  # abandoned: take it only if it is still exactly as abandoned
                revision = await self._kv.update(key, me, last=revision)
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            # another replica got there first, or the holder came back (nats-py's create() looks the key up
            # after a lost race, and finds nothing if the winner has let go again meanwhile)
            return
        self.owned[partition], self._renewed[partition] = revision, started
        log.info("%s: claimed partition %d", self.replica, partition)
        try:
            await self._gained(partition)
        except Exception:  # its work did not start: give the partition back rather than hold it idle
            log.exception("%s: could not start partition %d", self.replica, partition)
            await self.release(partition)

    async def _lose(self, partition: int, handed_back: bool = False) -> None:
        self.owned.pop(partition, None)
        self._renewed.pop(partition, None)
        await self._lost(partition, handed_back)

    async def release(self, partition: int) -> None:
        revision = self.owned.get(partition)
        await self._lose(partition, True)  # stop the work first: nobody may start it while it still runs here
        if revision is not None:
            with contextlib.suppress(KeyWrongLastSequenceError):
                await self._kv.delete(self._lease(partition), last=revision)
        log.info("%s: released partition %d", self.replica, partition)

    async def fence(self) -> None:
        """Stop the work of every partition whose lease could not be renewed lately: by the time anyone may
        take it over (``ttl`` after they last saw the record move), this replica has let go."""
        now = self._clock.now()
        for partition, renewed in list(self._renewed.items()):
            if now - renewed >= self.ttl * FENCE:
                log.warning(
                    "%s: could not renew partition %d for %.1fs; letting go", self.replica, partition, now - renewed
                )
                await self._lose(partition)

    async def stop(self) -> None:
        """Hand every partition back (SIGTERM): the others claim them without waiting out the TTL."""
        self._closing = True
        self._wake.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for partition in list(self.owned):
            with contextlib.suppress(Exception):
                await self.release(partition)
        with contextlib.suppress(Exception):
            await self._kv.delete(self._member(), last=self._member_revision)
        with contextlib.suppress(Exception):
            await self._watcher.stop()


class Unit(Protocol):
    """The work of one partition (its consumers)."""

    async def start(self) -> None: ...
    async def stop(self, timeout: float) -> None: ...


async def lease_bucket(nc: NATS, replicas: int = 1) -> KeyValue:
    js = nc.jetstream()
    try:
        return await js.key_value(BUCKET)
    except BucketNotFoundError:
        # history 1: only the latest record counts; max_age sweeps records of replicas long gone
        return await js.create_key_value(KeyValueConfig(bucket=BUCKET, history=1, ttl=3600.0, replicas=replicas))


class PartitionedWork:
    """Runs ``make(partition)`` for every partition this replica holds a lease on, and stops it when the
    lease is lost or released."""

    def __init__(
        self,
        nc: NATS,
        *,
        kind: str,
        replica: str,
        ttl: float,
        make: Callable[[int], Unit],
        clock: Clock | None = None,
        stream_replicas: int = 1,
        legacy: Legacy | None = None,
    ) -> None:
        self._nc = nc
        self._kind, self._replica, self._ttl = kind, replica, ttl
        self._make = make
        self._clock = clock
        self._stream_replicas = stream_replicas
        self.units: dict[int, Unit] = {}
        self.leases: PartitionLeases | None = None
        self.partitions = 0
        self._stopping = False
        self._winding_down: set[asyncio.Task[Any]] = set()  # work of lost partitions, stopping in the background
        self._migration = Migration(nc.jetstream(), legacy, self._owns, ttl / 3) if legacy else None
        self._waiting: dict[int, asyncio.Task[Any]] = {}  # partitions held while the migration runs, not started

    def _owns(self, partition: int) -> bool:
        return self.leases is not None and partition in self.leases.owned

    async def start(self) -> None:
        self.partitions = await parts.discover(self._nc)
        if self._migration is not None:
            await self._migration.start()
        kv = await lease_bucket(self._nc, self._stream_replicas)
        self.leases = PartitionLeases(
            kv,
            kind=self._kind,
            replica=self._replica,
            partitions=self.partitions,
            ttl=self._ttl,
            gained=self._gain,
            lost=self._lose,
            clock=self._clock,
        )
        await self.leases.start()

    async def _gain(self, partition: int) -> None:
        unit = self._make(partition)
        if self._migration is None or self._migration.done.is_set():
            await unit.start()
            self.units[partition] = unit
            return
        # Upgrading: the events of before partitions come first (partition_migration.py). The lease is held
        # meanwhile, so the plan stays settled; the unit starts the moment the old consumers are gone.
        self.units[partition] = unit
        self._waiting[partition] = asyncio.create_task(self._start_after_migration(partition, unit))

    async def _start_after_migration(self, partition: int, unit: Unit) -> None:
        assert self._migration is not None
        await self._migration.done.wait()
        self._waiting.pop(partition, None)
        try:
            await unit.start()
        except Exception:
            log.exception("%s: could not start partition %d", self._replica, partition)
            if self.leases is not None:
                await self.leases.release(partition)

    async def _lose(self, partition: int, handed_back: bool) -> None:
        waiting = self._waiting.pop(partition, None)
        if waiting is not None:
            waiting.cancel()
        if partition == OWNER and self._migration is not None:
            await self._migration.let_go()
        unit = self.units.pop(partition, None)
        if unit is None:
            return
        if handed_back:  # the lease is deleted only after this: let in-flight work finish (longer at SIGTERM)
            await unit.stop(10.0 if self._stopping else self._ttl / 3)
            return
        # Taken over, or fenced: another replica may run it already. Its fetching stops at the next turn of the
        # loop; the handlers at work wind down in the background, not holding up the renewal of the others.
        task = asyncio.create_task(unit.stop(self._ttl / 3), name=f"{self._replica}:p{partition}:stop")
        self._winding_down.add(task)
        task.add_done_callback(self._winding_down.discard)

    async def stop(self) -> None:
        self._stopping = True
        if self._migration is not None:
            await self._migration.stop()
        if self.leases is not None:
            await self.leases.stop()
        for partition in list(self.units):
            await self._lose(partition, True)
        await asyncio.gather(*self._winding_down, return_exceptions=True)


class LeaseTable:
    """Who holds which partition, as recorded in KV, kept current by one watcher (for tools, tests and the
    benchmark; the replicas themselves judge liveness too, which this does not)."""

    def __init__(self, nc: NATS) -> None:
        self._nc = nc
        self._held: dict[str, dict[int, str]] = {}
        self._ready = asyncio.Event()

    async def __aenter__(self) -> LeaseTable:
        kv = await lease_bucket(self._nc)
        self._watcher = await kv.watch("*.lease.*")
        self._task = asyncio.create_task(self._follow())
        await asyncio.wait_for(self._ready.wait(), 10)
        return self

    async def _follow(self) -> None:
        async for entry in self._watcher:
            if entry is None:
                self._ready.set()
                continue
            kind, _, partition = entry.key.split(".", 2)
            held = self._held.setdefault(kind, {})
            if entry.operation in _DELETED or not entry.value:
                held.pop(int(partition), None)
            else:
                held[int(partition)] = entry.value.decode()

    def holders(self, kind: str) -> dict[int, str]:
        return dict(self._held.get(kind, {}))

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self._watcher.stop()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
