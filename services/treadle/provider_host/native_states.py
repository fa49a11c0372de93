"""Issue 35: each provider thread's own resume state kept off the node, in the checkpoint archive as
``<tenant>/native/<provider>/<provider thread id>``. After every turn the host asks the adapter for it
(``native_state``) and stores it when it changed; before a resume it lets the adapter put it back when the
node lacks it (``restore_native_state``). The checkpoint is the truth and this an optimisation: a store or
archive that does not answer never fails a turn or a placement; it is logged and counted, and a resume without
the state takes the replacement path (L4.2/L9.4) as it would have."""

from __future__ import annotations

import hashlib
import logging

from treadle.checkpoints.archive import ArchiveUnavailable, CheckpointArchive
from treadle.eventlog import subjects
from treadle.providers.base import ProviderAdapter
from treadle.providers.native_state import NativeStateRefused
from treadle.providers.protocol import PlaceSession
from treadle.runtime.metrics import NATIVE_STATE

log = logging.getLogger(__name__)


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


class NativeStates:
    def __init__(self, archive: CheckpointArchive) -> None:
        self._archive = archive
        self._stored: dict[str, str] = {}  # object name -> SHA-256 of what it holds (as far as this host knows)

    async def keep(self, request: PlaceSession, adapter: ProviderAdapter) -> None:
        """After a turn: store the adapter's state when it differs from what the archive holds."""
        if request.ephemeral:
            return
        name = object_name(request.tenant, request.provider, request.provider_thread_id)
        try:
            try:
                data = await adapter.native_state()
            except NativeStateRefused:
                # Grown past the bound: an earlier, shorter conversation must not be resumed as if it were this one
                await self._archive.delete(name)
                self._stored[name] = ""
                raise
            if data is None:
                return
            digest = hashlib.sha256(data).hexdigest()
            if self._stored.get(name) is None:
                self._stored[name] = await self._archive.digest(name) or ""
            if self._stored[name] == digest:
                NATIVE_STATE.labels("unchanged").inc()
                return
            self._stored.pop(name, None)  # not known until the put answers
            await self._archive.put(name, data)
            self._stored[name] = digest
            NATIVE_STATE.labels("stored").inc()
        except (ArchiveUnavailable, NativeStateRefused, ValueError, OSError) as exc:
            NATIVE_STATE.labels("store_failed").inc()
            log.warning("native state of provider thread %s not stored: %s", request.provider_thread_id, exc)
        except Exception:  # an adapter's own failure: still never the turn's
            NATIVE_STATE.labels("store_failed").inc()
            log.exception("native state of provider thread %s not stored", request.provider_thread_id)

    async def restore(self, request: PlaceSession, adapter: ProviderAdapter) -> None:
        """Before ``open_thread(request.native_ref)``: the adapter fetches the kept state only when it lacks its
        own. A failure leaves the node as it was (the open then resumes, or fails over, as without this)."""
        if request.native_ref is None:
            return
        try:
            name = object_name(request.tenant, request.provider, request.provider_thread_id)
            restored = await adapter.restore_native_state(request.native_ref, lambda: self._archive.get(name))
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
