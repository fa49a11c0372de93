"""Workspace volumes as they announce themselves (issue 35).

Each checkpoint service heartbeats its volume into KV ``treadle-volumes`` (free disk, workspaces held, per
tenant); provider hosts heartbeat into ``treadle-hosts`` (their volume, capacity, live sessions); an operator's
drain marks are in ``treadle-volume-drains``. ``Volumes`` reads the three into ``core.placement.Volume``s: a
volume is live while its checkpoint service's record is there (the bucket's TTL sweeps one that stopped
beating, a clean stop deletes it) and has hosts while a host's record names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from nats.js import JetStreamContext

from treadle.core.placement import Volume
from treadle.eventlog.kv_latest import latest

log = logging.getLogger(__name__)

BUCKET = "treadle-volumes"
DRAINS = "treadle-volume-drains"
HOSTS = "treadle-hosts"
HEARTBEAT_SECONDS = 2.0
TTL_SECONDS = 5 * HEARTBEAT_SECONDS  # a volume whose checkpoint service missed this many beats is gone
_encode = msgspec.json.Encoder().encode


class VolumeRecord(msgspec.Struct, kw_only=True):
    """``treadle-volumes`` entry ``<volume>``, written by the volume's checkpoint service."""

    volume: str
    disk_free: int
    disk_total: int
    workspaces: int
    tenants: dict[str, int] = {}  # workspaces per tenant
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    at: datetime  # informative only (the writer's wall clock)


class _HostBeat(msgspec.Struct, kw_only=True):
    """What placement reads of a ``treadle-hosts`` record (provider_host/registry.py writes the whole of it)."""

    volume: str
    capacity: int
    live: int


class Snapshot(msgspec.Struct, kw_only=True):
    volumes: list[Volume]
    tenants: dict[str, dict[str, int]]  # volume -> tenant -> threads (workspaces) there

    def tenant_threads(self, tenant: str) -> dict[str, int]:
        return {volume: counts[tenant] for volume, counts in self.tenants.items() if tenant in counts}


def held_workspaces(root: Path) -> dict[str, int]:
    """Workspaces per tenant under a volume's workspace root (``<tenant>/threads/<thread>`` and the tenant's
    named workspaces beside ``threads``)."""
    found: dict[str, int] = {}
    with contextlib.suppress(FileNotFoundError):
        for tenant in os.scandir(root):
            if not tenant.is_dir(follow_symlinks=False) or tenant.name.startswith("."):
                continue
            n = 0
            for entry in os.scandir(tenant.path):
                if entry.name == "threads" and entry.is_dir(follow_symlinks=False):
                    n += sum(1 for _ in os.scandir(entry.path))
                elif entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                    n += 1
            found[tenant.name] = n
    return found


def record_of(volume: str, root: Path) -> VolumeRecord:
    root.mkdir(parents=True, exist_ok=True)
    disk = shutil.disk_usage(root)
    tenants = held_workspaces(root)
    return VolumeRecord(
        volume=volume,
        disk_free=disk.free,
        disk_total=disk.total,
        workspaces=sum(tenants.values()),
        tenants=tenants,
        at=datetime.now(UTC),
    )


class Announcer:
    """The checkpoint service's heartbeat for its volume: at start, every ``HEARTBEAT_SECONDS``, deleted at stop."""

    def __init__(self, js: JetStreamContext, volume: str, root: Path) -> None:
        self._js, self._volume, self._root = js, volume, root
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._kv = await self._js.key_value(BUCKET)
        await self.beat()
        self._task = asyncio.create_task(self._run(), name=f"volume:{self._volume}")

    async def beat(self) -> None:
        record = await asyncio.to_thread(record_of, self._volume, self._root)
        await self._kv.put(self._volume, _encode(record))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)  # heartbeat period
            try:
                await self.beat()
            except Exception as exc:  # the broker away a moment: the next beat tries again
                log.warning("volume %s heartbeat failed: %r", self._volume, exc)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            with contextlib.suppress(Exception):
                await self._kv.delete(self._volume)


class Volumes:
    """The live volumes, read at most every ``cache_seconds``. A thread placed here counts on its volume at once:
    until the volume's heartbeats have it, the count is at least what it was when placed plus what was placed
    since (a maximum, not a sum: once a heartbeat has it, it is not counted twice), so creations in a burst
    spread too."""

    def __init__(self, js: JetStreamContext, cache_seconds: float = 1.0) -> None:
        self._js = js
        self._cache_seconds = cache_seconds
        self._read: tuple[float, list[Volume], dict[str, dict[str, int]]] | None = None
        # (volume, tenant or "") -> [when last placed, count announced when first placed, placed since]
        self._placed: dict[tuple[str, str], list[float | int]] = {}

    async def read(self) -> tuple[list[Volume], dict[str, dict[str, int]]]:
        """Every volume announced now, placeable or not, and its workspaces per tenant (uncached)."""
        records, hosts, drains = await asyncio.gather(
            latest(self._js, BUCKET), latest(self._js, HOSTS), latest(self._js, DRAINS)
        )
        beats: dict[str, list[_HostBeat]] = {}
        for entry in hosts.values():
            with contextlib.suppress(msgspec.DecodeError):
                beat = msgspec.json.decode(entry.value, type=_HostBeat)
                beats.setdefault(beat.volume, []).append(beat)
        announced: dict[str, VolumeRecord] = {}
        for entry in records.values():
            with contextlib.suppress(msgspec.DecodeError):
                record = msgspec.json.decode(entry.value, type=VolumeRecord)
                announced[record.volume] = record
        volumes = []
        for name in sorted(set(announced) | set(beats) | set(drains)):
            beating, on = announced.get(name), beats.get(name, [])
            volumes.append(
                Volume(
                    name=name,
                    checkpoints=beating is not None,
                    hosts=len(on),
                    capacity=sum(b.capacity for b in on),
                    live=sum(b.live for b in on),
                    disk_free=beating.disk_free if beating else None,
                    workspaces=beating.workspaces if beating else 0,
                    draining=name in drains,
                )
            )
        return volumes, {name: dict(r.tenants) for name, r in announced.items()}

    async def snapshot(self) -> Snapshot:
        now = time.monotonic()
        if self._read is None or now - self._read[0] > self._cache_seconds:
            volumes, tenants = await self.read()
            self._read = (now, volumes, tenants)
        _, volumes, tenants = self._read
        self._placed = {k: v for k, v in self._placed.items() if now - v[0] < TTL_SECONDS}
        counts = {name: dict(per) for name, per in tenants.items()}
        for (volume, tenant), (_, base, since) in self._placed.items():
            if tenant:
                per = counts.setdefault(volume, {})
                per[tenant] = max(per.get(tenant, 0), int(base + since))
        totals = {
            v.name: max(v.workspaces, int(self._placed[(v.name, "")][1] + self._placed[(v.name, "")][2]))
            if (v.name, "") in self._placed
            else v.workspaces
            for v in volumes
        }
        volumes = [msgspec.structs.replace(v, workspaces=totals[v.name]) for v in volumes]
        return Snapshot(volumes=volumes, tenants=counts)

    def placed(self, volume: str, tenant: str) -> None:
        now = time.monotonic()
        read = self._read
        announced = {v.name: v.workspaces for v in read[1]} if read else {}
        per = read[2].get(volume, {}) if read else {}
        for key, base in (((volume, tenant), per.get(tenant, 0)), ((volume, ""), announced.get(volume, 0))):
            entry = self._placed.get(key)
            if entry is None:
                self._placed[key] = [now, base, 1]
            else:
                entry[0], entry[2] = now, entry[2] + 1


async def drain(js: JetStreamContext, volume: str, draining: bool = True) -> None:
    """Mark ``volume`` as taking no new threads (or take the mark off)."""
    kv = await js.key_value(DRAINS)
    if draining:
        await kv.put(volume, b"1")
    else:
        await kv.delete(volume)


def by_name(volumes: list[Volume]) -> Mapping[str, Volume]:
    return {v.name: v for v in volumes}
