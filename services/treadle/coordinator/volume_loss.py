"""Threads of a lost workspace volume go on elsewhere by themselves (issue 35).

A volume whose ``treadle-volumes`` record has been gone for ``volume_lost_seconds`` (swept by the bucket's TTL
after its checkpoint service's last beat: a record still there is a node that may be alive), or that threads
live on and this watcher has never seen announced, is lost: its threads are moved as ``treadle volumes forget`` moves them (``ops.rehoming``, reason ``lost``), each
workspace hydrated on its new home from the checkpoint archive first. One coordinator replica watches at a time:
the holder of partition 0's lease, as part of that partition's work, so a replica that loses the lease stops
watching before another starts; the moves are fenced on each thread's last event anyway.

The records are looked at in an in-memory view of the bucket (``runtime.kv_view``, which drops a record when the
bucket's TTL does), confirmed against the stream's last sequence at each look: a stalled watch would look like
every volume gone quiet, so a view that is behind answers with a complete read of the bucket instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from nats.aio.client import Client as NATS

from treadle.eventlog.log import EventLog
from treadle.ops import rehoming
from treadle.runtime.kv_view import KvView
from treadle.runtime.volumes import BUCKET

log = logging.getLogger(__name__)

WATCHER_PARTITION = 0


class VolumeLoss:
    """The watch, a partition's unit of work (``start``/``stop``) for ``runtime.leases.PartitionedWork``."""

    def __init__(self, nc: NATS, lost_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._nc, self._lost, self._clock = nc, lost_seconds, clock
        self.period = max(0.2, min(lost_seconds / 4, 5.0))
        self._task: asyncio.Task[None] | None = None
        self._view = KvView(nc.jetstream(), BUCKET)
        self._looked = False
        # volume -> (its record's revision, None when gone; when this watcher first saw it so)
        self._seen: dict[str, tuple[int | None, float]] = {}

    async def start(self) -> None:
        await self._view.start()
        self._task = asyncio.create_task(self._run(), name="coordinator:volume-loss")

    async def stop(self, timeout: float = 10.0) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, timeout)
        await self._view.stop()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as exc:  # the broker away a moment: the next look tries again
                log.warning("volume loss watch: %r", exc)
            await asyncio.sleep(self.period)  # the watch's period: volumes are looked at, not waited on

    async def tick(self) -> list[rehoming.Moved]:
        """Look at the volumes once; move the threads of those silent past the bound. What was moved."""
        now = self._clock()
        if not self._looked:  # first look: the volumes threads live on count even if silent since before
            for volume in set((await rehoming.homes(EventLog(self._nc))).values()):
                self._seen[volume] = (None, now)
            self._looked = True
        records = await self._view.read(confirmed=True)
        revisions = {key: entry.revision for key, entry in records.items()}
        for volume in set(self._seen) | set(revisions):
            revision = revisions.get(volume)
            if volume not in self._seen or self._seen[volume][0] != revision:
                self._seen[volume] = (revision, now)
        moved: list[rehoming.Moved] = []
        for volume, (revision, since) in sorted(self._seen.items()):
            if revision is not None or now - since < self._lost:
                continue
            try:
                done = await rehoming.forget(self._nc, volume, reason="lost", actor="coordinator")
            except rehoming.StillLive:
                continue  # it announced itself again meanwhile
            except rehoming.NoVolumeLeft as exc:
                log.warning("volume %s is lost and its threads wait: %s", volume, exc)
                continue
            log.warning("volume %s gone for %.0f s: %d threads moved", volume, now - since, len(done))
            moved += done
            del self._seen[volume]  # its threads are elsewhere; should it come back, it is a new volume
        return moved
