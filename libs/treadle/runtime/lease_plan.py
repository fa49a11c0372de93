"""Partition lease decisions, free of I/O (``leases.py`` carries them out against KV).

Every replica of a worker kind writes a heartbeat record and one record per partition it owns. A record is
alive while its revision keeps moving on the *observer's* clock (as with provider hosts: clock skew between
machines cannot kill a healthy replica). From what it observes, each replica decides alone, and OCC on the
record's revision settles races: two replicas claiming the same partition cannot both win.

The plan converges on an even spread: a replica claims free or abandoned partitions up to its fair share
(``ceil(partitions / live replicas)``) and hands back what it holds above it, so a replica that joins
gets work and the partitions of one that dies are taken over once its records stand still for ``ttl``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass


class Liveness:
    """When each record's revision last moved, on this observer's clock."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._seen: dict[str, tuple[int, float]] = {}

    def observe(self, key: str, revision: int, now: float) -> None:
        seen = self._seen.get(key)
        if seen is None or seen[0] != revision:
            self._seen[key] = (revision, now)

    def forget(self, key: str) -> None:
        self._seen.pop(key, None)

    def alive(self, key: str, now: float) -> bool:
        seen = self._seen.get(key)
        return seen is not None and now - seen[1] < self.ttl


@dataclass(frozen=True)
class Plan:
    claim: tuple[int, ...] = ()  # free or abandoned partitions to take, most wanted first
    release: tuple[int, ...] = ()  # partitions above this replica's fair share, to hand back


def fair_share(partitions: int, replicas: int) -> int:
    return math.ceil(partitions / max(replicas, 1))


def preference(replica: str, partition: int) -> int:
    """Rendezvous order: each replica wants the partitions in its own pseudo-random order, so replicas
    starting together mostly claim different partitions instead of racing for the same ones."""
    return zlib.crc32(f"{replica}/{partition}".encode())


def plan(me: str, partitions: int, holders: Mapping[int, str], replicas: Collection[str]) -> Plan:
    """What ``me`` should do, given the live holder of each partition (free or abandoned ones absent) and
    the live replicas of its kind (``me`` counts even before its own heartbeat is seen)."""
    live = set(replicas) | {me}
    share = fair_share(partitions, len(live))
    mine = sorted((p for p, h in holders.items() if h == me), key=lambda p: preference(me, p), reverse=True)
    if len(mine) > share:
        return Plan(release=tuple(mine[share:]))
    free = [p for p in range(partitions) if p not in holders]
    free.sort(key=lambda p: preference(me, p), reverse=True)
    return Plan(claim=tuple(free[: share - len(mine)]))
