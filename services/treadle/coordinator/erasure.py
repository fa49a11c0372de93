"""Erasing a deleted thread's data (issue 39), from its tombstone: every step is idempotent, so a delete
repeated after a step failed resumes where it stopped.

- the event log: every event of the thread before its tombstone (a subject-filtered purge below the tombstone's
  sequence), so the log keeps the tombstone alone and ``treadle check``, rebuilds and replays see a thread
  that was deleted; the provider stream: every message of the thread;
- the durable checkpoints: every object of the thread in ``treadle-checkpoints`` (its manifest and packs);
- the projections go with the tombstone itself (the projector erases them, ``ProjectionStore.erase``)."""

from __future__ import annotations

import logging

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from treadle.eventlog import subjects
from treadle.eventlog.streams import CHECKPOINTS_BUCKET

log = logging.getLogger(__name__)


class ErasureFailed(Exception):
    """A step could not be done now; the tombstone is in the log, and a repeated delete resumes the erasure."""


class Erasure:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def erase(self, tenant: str, thread: str, tombstone_seq: int) -> None:
        try:
            await self._js.purge_stream(
                subjects.EVENTS_STREAM, subject=subjects.thread_events(tenant, thread), seq=tombstone_seq
            )
            await self._js.purge_stream(
                subjects.PROVIDER_STREAM, subject=f"treadle.prov.{subjects.token(tenant)}.{subjects.token(thread)}.>"
            )
            await self._durable(tenant, thread)
        except Exception as exc:
            log.warning("erasing %s/%s stopped: %r", tenant, thread, exc)
            raise ErasureFailed(
                f"the thread is deleted but erasing its data stopped ({exc!r}); delete it again"
            ) from exc

    async def _durable(self, tenant: str, thread: str) -> None:
        """The thread's objects: ``<tenant>/<workspace key>/<thread>/…`` (checkpoints/durable.py)."""
        store = await self._js.object_store(CHECKPOINTS_BUCKET)
        try:
            objects = await store.list(ignore_deletes=True)
        except NotFoundError:
            return
        for info in objects:
            parts = info.name.split("/", 3)
            if len(parts) == 4 and parts[0] == tenant and parts[2] == thread:
                await store.delete(info.name)
