"""Erasing a deleted thread's data (L1.4) from its tombstone: every step is idempotent, so a delete
repeated after a step failed resumes where it stopped.

- the event log: every event of the thread before its tombstone (a subject-filtered purge below the tombstone's
  sequence), so the log keeps the tombstone alone and ``treadle check``, rebuilds and replays see a thread
  that was deleted; the provider stream: every message of the thread;
- its volume: the checkpoint service deletes its checkpoint refs, and its own workspace with its git dir
  (``checkpoints/erase.py``);
- the durable store (``treadle-checkpoints``): the thread's checkpoint objects (its manifest and packs) and the
  native state of its provider threads (``<tenant>/native/<provider>/<provider thread>``);
- the projections go with the tombstone itself (the projector erases them, ``ProjectionStore.erase``)."""

from __future__ import annotations

import logging

from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from treadle.checkpoints.erase import Erase, request_erase
from treadle.core.thread.model import Thread
from treadle.eventlog import subjects
from treadle.eventlog.streams import CHECKPOINTS_BUCKET

log = logging.getLogger(__name__)


class ErasureFailed(Exception):
    """A step could not be done now; the tombstone is in the log, and a repeated delete resumes the erasure."""


class Erasure:
    def __init__(self, nc: NATS, timeout: float = 60.0) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._timeout = timeout

    async def erase(self, tenant: str, deleted: Thread, tombstone_seq: int) -> None:
        """``deleted``: the thread as its tombstone left it (its workspace, home and provider threads)."""
        thread = deleted.id
        try:
            where = Erase(tenant=tenant, thread=thread, workspace=deleted.workspace)
            await request_erase(self._nc, deleted.volume, where, self._timeout)
            await self._durable(tenant, thread, set(deleted.erase_provider_threads))
            await self._js.purge_stream(
                subjects.EVENTS_STREAM, subject=subjects.thread_events(tenant, thread), seq=tombstone_seq
            )
            await self._js.purge_stream(
                subjects.PROVIDER_STREAM, subject=f"treadle.prov.{subjects.token(tenant)}.{subjects.token(thread)}.>"
            )
        except Exception as exc:
            log.warning("erasing %s/%s stopped: %r", tenant, thread, exc)
            raise ErasureFailed(
                f"the thread is deleted but erasing its data stopped ({exc!r}); delete it again"
            ) from exc

    async def _durable(self, tenant: str, thread: str, provider_threads: set[str]) -> None:
        """The thread's objects: ``<tenant>/<workspace key>/<thread>/…`` (checkpoints/durable.py) and
        ``<tenant>/native/<provider>/<provider thread>`` (provider_host/native_states.py)."""
        store = await self._js.object_store(CHECKPOINTS_BUCKET)
        try:
            objects = await store.list(ignore_deletes=True)
        except NotFoundError:
            return
        for info in objects:
            parts = info.name.split("/", 3)
            if len(parts) < 4 or parts[0] != tenant:
                continue
            if parts[2] == thread or (parts[1] == "native" and parts[3] in provider_threads):
                await store.delete(info.name)
