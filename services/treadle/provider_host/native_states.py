"""Issue 35: each provider thread's own resume state kept off the node, in the checkpoint archive under
``<tenant>/native/<provider>/<provider thread id>``: a manifest naming the segments that make its files
(``native_manifest``). After every turn the host asks the adapter which files they are (``native_state``) and
stores what changed since it last stored them (``native_delta``: an appended rollout costs its new bytes);
before a resume it lets the adapter put them back when the node lacks them (``restore_native_state``). The
checkpoint is the truth and this an optimisation: a store or archive that does not answer never fails a turn or
a placement; it is logged and counted, and a resume without the state takes the replacement path (L4.2/L9.4)
as it would have."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from treadle.checkpoints.archive import (
    ArchiveConflict,
    ArchiveDamaged,
    ArchiveUnavailable,
    CheckpointArchive,
    Holding,
)
from treadle.eventlog import subjects
from treadle.providers.base import ProviderAdapter
from treadle.providers.native_manifest import (
    Manifest,
    assemble,
    decode,
    is_manifest,
    segment_name,
    stored,
)
from treadle.providers.native_state import MAX_BYTES, NativeStateRefused, members
from treadle.providers.protocol import PlaceSession
from treadle.runtime.metrics import NATIVE_STATE

from .native_delta import Mark, Plan, plan

log = logging.getLogger(__name__)

_KEPT = 4096  # provider threads whose stored state this host remembers (a forgotten one is stored whole next)
_FETCHES = 8  # segments read at once by a restore


def object_name(tenant: str, provider: str, provider_thread_id: str) -> str:
    """Every token checked: a name of the archive is a path in its bucket."""
    return "/".join(
        (
            subjects.token(tenant, "tenant"),
            "native",
            subjects.token(provider, "provider"),
            subjects.token(provider_thread_id, "provider thread id"),
        )
    )


@dataclass(slots=True)
class _Kept:
    """What the archive holds under a name, as far as this host knows: its manifest, the SHA-256 of the
    manifest's bytes (None: nothing), and the files as this host stored them (empty: stored whole next)."""

    manifest: Manifest
    digest: str | None
    marks: dict[str, Mark]


class NativeStates:
    def __init__(self, archive: CheckpointArchive, max_bytes: int = MAX_BYTES) -> None:
        self._archive = archive
        self._max_bytes = max_bytes
        self._kept: OrderedDict[str, _Kept] = OrderedDict()

    async def keep(self, request: PlaceSession, adapter: ProviderAdapter) -> None:
        """After a turn: store what changed of the adapter's files since the archive last got them."""
        if request.ephemeral:
            return
        name = object_name(request.tenant, request.provider, request.provider_thread_id)
        try:
            native = await adapter.native_state()
            if native is None:
                return
            for attempt in (1, 2):  # another writer since: known again, and stored whole
                kept = await self._known(name)
                try:
                    planned = await asyncio.to_thread(plan, native, kept.manifest, kept.marks, self._max_bytes)
                except NativeStateRefused:
                    # Grown past the bound: an earlier, shorter conversation must not be resumed as if it were this one
                    await self._drop(name, kept)
                    raise
                if planned is None:
                    return
                if not planned.changes(kept.manifest):
                    kept.marks = planned.marks
                    NATIVE_STATE.labels("unchanged").inc()
                    await self._delete(name, kept, kept.manifest.drop)
                    return
                try:
                    await self._write(name, kept, planned)
                except ArchiveConflict:
                    if attempt == 2:
                        raise
                    continue
                NATIVE_STATE.labels("stored").inc()
                return
        except (ArchiveUnavailable, ArchiveConflict, NativeStateRefused, ValueError, OSError) as exc:
            NATIVE_STATE.labels("store_failed").inc()
            log.warning("native state of provider thread %s not stored: %s", request.provider_thread_id, exc)
        except Exception:  # an adapter's own failure: still never the turn's
            NATIVE_STATE.labels("store_failed").inc()
            log.exception("native state of provider thread %s not stored", request.provider_thread_id)

    async def _known(self, name: str) -> _Kept:
        kept = self._kept.get(name)
        if kept is not None:
            self._kept.move_to_end(name)
            return kept
        try:
            data = await self._archive.get(name)
        except ArchiveDamaged as exc:  # its bytes are lost: replaced whole, like a broken one
            kept = _Kept(Manifest(), exc.digest, {})
            self._remember(name, kept)
            return kept
        manifest = Manifest()
        if data is not None and is_manifest(data):
            with contextlib.suppress(NativeStateRefused):  # a broken one is replaced whole
                manifest = decode(data, self._max_bytes)
        # an earlier release's single tar (or nothing): its files are stored whole, and the manifest replaces it
        kept = _Kept(manifest, hashlib.sha256(data).hexdigest() if data is not None else None, {})
        self._remember(name, kept)
        await self._delete(name, kept, manifest.drop)  # a writer stopped before deleting what it let go of
        return kept

    async def _write(self, name: str, kept: _Kept, planned: Plan) -> None:
        """The new segments, then the manifest, written only over the one ``kept`` knows (``ArchiveConflict``:
        another writer's since; forgotten and the new segments deleted), then what it no longer names deleted."""
        await asyncio.gather(
            *(self._archive.put(segment_name(name, i), data, new=True) for i, data in planned.segments.items())
        )
        encoded = planned.encoded
        self._kept.pop(name, None)  # not known until the manifest's put answers
        try:
            await self._archive.put(name, encoded, holding=Holding(kept.digest))
        except ArchiveConflict:
            with contextlib.suppress(ArchiveUnavailable):
                await self._delete_segments(name, planned.segments)
            raise
        written = _Kept(planned.manifest, hashlib.sha256(encoded).hexdigest(), planned.marks)
        self._remember(name, written)
        await self._delete(name, written, planned.manifest.drop)

    async def _delete(self, name: str, kept: _Kept, indices: Iterable[int]) -> None:
        """Segments no manifest names any more; what is not deleted now stays listed for the next write."""
        indices = tuple(indices)
        if not indices:
            return
        try:
            await self._delete_segments(name, indices)
        except ArchiveUnavailable:
            return
        kept.manifest = msgspec.structs.replace(kept.manifest, drop=())

    async def _delete_segments(self, name: str, indices: Iterable[int]) -> None:
        await asyncio.gather(*(self._archive.delete(segment_name(name, i)) for i in indices))

    async def _drop(self, name: str, kept: _Kept) -> None:
        """No state at all under ``name`` (the manifest first, so no reader finds it half gone)."""
        self._kept.pop(name, None)
        await self._archive.delete(name)
        self._remember(name, _Kept(Manifest(), None, {}))
        with contextlib.suppress(ArchiveUnavailable):
            await self._delete_segments(name, [*stored(kept.manifest), *kept.manifest.drop])

    def _remember(self, name: str, kept: _Kept) -> None:
        self._kept[name] = kept
        self._kept.move_to_end(name)
        while len(self._kept) > _KEPT:
            self._kept.popitem(last=False)

    async def fetch(self, name: str) -> dict[str, bytes] | None:
        """The kept files under ``name``, every byte checked against the manifest (an earlier release's single
        tar too); None when nothing is kept. ``NativeStateRefused``: not whole, or not what was written."""
        data = await self._archive.get(name)
        if data is None:
            return None
        if not is_manifest(data):
            return await asyncio.to_thread(members, data, self._max_bytes)
        manifest = decode(data, self._max_bytes)
        indices = stored(manifest)
        slots = asyncio.Semaphore(_FETCHES)

        async def one(index: int) -> tuple[int, bytes | None]:
            async with slots:
                return index, await self._archive.get(segment_name(name, index))

        got = await asyncio.gather(*(one(i) for i in indices))
        segments = {index: stored for index, stored in got if stored is not None}
        return await asyncio.to_thread(assemble, manifest, segments)

    async def restore(self, request: PlaceSession, adapter: ProviderAdapter) -> None:
        """Before ``open_thread(request.native_ref)``: the adapter fetches the kept state only when it lacks its
        own. A failure leaves the node as it was (the open then resumes, or fails over, as without this)."""
        if request.native_ref is None:
            return
        try:
            name = object_name(request.tenant, request.provider, request.provider_thread_id)
            restored = await adapter.restore_native_state(request.native_ref, lambda: self.fetch(name))
        except (ArchiveUnavailable, NativeStateRefused, ValueError, OSError) as exc:
            NATIVE_STATE.labels("restore_failed").inc()
            log.warning("native state of provider thread %s not restored: %s", request.provider_thread_id, exc)
            return
        except Exception:  # an adapter's own failure: the open goes on as without the state
            NATIVE_STATE.labels("restore_failed").inc()
            log.exception("native state of provider thread %s not restored", request.provider_thread_id)
            return
        if restored:
            NATIVE_STATE.labels("restored").inc()
            log.info("restored the native state of provider thread %s", request.provider_thread_id)
