"""Checkpoints off the node: the port (``CheckpointArchive``, exported by ``treadle.ports``) and its JetStream
implementation, an Object Store bucket holding each thread's packs and manifest. The bucket is created with
the streams (``eventlog.streams.ensure``), at the shared replica count, so a checkpoint is as durable as the
event log that records it; the in-memory twin is ``memory.MemoryArchive``."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import uuid
from collections import OrderedDict
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Protocol, TypeVar, cast

from nats.errors import Error as NatsError
from nats.js import JetStreamContext, api
from nats.js.errors import ObjectDeletedError, ObjectNotFoundError
from nats.js.kv import MSG_ROLLUP_SUBJECT
from nats.js.object_store import ObjectStore

from ..eventlog.streams import CHECKPOINTS_BUCKET as BUCKET

__all__ = ["BUCKET", "ArchiveUnavailable", "CheckpointArchive", "JetStreamArchive"]


T = TypeVar("T")


class ArchiveUnavailable(Exception):
    """The archive did not answer, or refused: nothing can be made durable (or read back) now."""


class CheckpointArchive(Protocol):
    """Named blobs off the node (git packs and manifests of checkpoints): as durable as the event log. Writes
    are whole and last-write-wins; a name never written, or deleted, reads as None. A store that does not
    answer raises ``ArchiveUnavailable``."""

    async def put(self, name: str, data: bytes, *, new: bool = False) -> None:
        """``new``: the caller knows of no earlier object under ``name`` (a pack of a commit its manifest does not
        list), so the archive need not look for one to replace; one left by a write that failed before its
        manifest named it (another node's, rarely) then stays as unreferenced bytes, never as a wrong read."""
        ...

    async def get(self, name: str) -> bytes | None: ...

    async def delete(self, name: str) -> None:
        """Idempotent: deleting a name that is not there is no error."""
        ...

    async def digest(self, name: str) -> str | None:
        """The SHA-256 (hex) of what ``name`` holds (None: nothing), without reading it: a cached copy is
        checked with this."""
        ...


class JetStreamArchive:
    """Named blobs in one Object Store bucket. Names are plain strings (`<tenant>/<workspace key>/<thread>/…`);
    every call is bounded by ``timeout`` and fails as ``ArchiveUnavailable``."""

    def __init__(self, js: JetStreamContext, bucket: str = BUCKET, timeout: float = 30.0) -> None:
        self._js = js
        self._name = bucket
        self._timeout = timeout
        self._bucket: ObjectStore | None = None
        # The chunks' nuid of names this process last read the meta of or wrote (None: no object), so that a
        # rewrite needs no look-up of the version it replaces: a manifest's is read by its digest check just
        # before (durable.py), which is as recent as the look-up was. Bounded; a miss looks it up as before.
        self._nuids: OrderedDict[str, str | None] = OrderedDict()

    async def put(self, name: str, data: bytes, *, new: bool = False) -> None:
        async def put() -> None:
            known = self._nuids.pop(
                name, None if new else _UNKNOWN
            )  # forgotten until this write is known to have landed
            nuid = await _put(self._js, await self._store(), self._name, name, data, known)
            self._remember(name, nuid)

        await self._bounded("put", name, put())

    async def get(self, name: str) -> bytes | None:
        async def get() -> bytes | None:
            try:
                got = await (await self._store()).get(name)
            except (ObjectNotFoundError, ObjectDeletedError):
                return None
            return bytes(got.data or b"")

        return await self._bounded("get", name, get())

    async def delete(self, name: str) -> None:
        async def delete() -> None:
            self._nuids.pop(name, None)
            try:
                await (await self._store()).delete(name)
            except (ObjectNotFoundError, ObjectDeletedError):
                return

        await self._bounded("delete", name, delete())

    async def digest(self, name: str) -> str | None:
        async def digest() -> str | None:
            self._nuids.pop(name, None)
            try:
                info = await (await self._store()).get_info(name)
            except (ObjectNotFoundError, ObjectDeletedError):
                self._remember(name, None)
                return None
            self._remember(name, None if info.deleted else info.nuid)
            if info.deleted or not info.digest:
                return None
            return base64.urlsafe_b64decode(info.digest.removeprefix("SHA-256=")).hex()  # the Object Store's

        return await self._bounded("digest", name, digest())

    def _remember(self, name: str, nuid: str | None) -> None:
        self._nuids[name] = nuid
        self._nuids.move_to_end(name)
        while len(self._nuids) > _NUIDS_KEPT:
            self._nuids.popitem(last=False)

    async def _store(self) -> ObjectStore:
        if self._bucket is None:
            self._bucket = await self._js.object_store(self._name)
        return self._bucket

    async def _bounded(self, verb: str, name: str, step: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self._timeout):
                return await step
        except (TimeoutError, NatsError, OSError) as exc:  # nats.errors.Error: every client and API error
            self._bucket = None  # looked up again next time (the bucket may be re-created)
            self._nuids.clear()
            raise ArchiveUnavailable(f"checkpoint archive {self._name}: {verb} {name} failed: {exc!r}") from None


_CHUNK = 128 * 1024  # the Object Store's default chunk size, as nats-py writes it
_NUIDS_KEPT = 4096
_UNKNOWN = "?"  # not a nuid nats writes


async def _put(
    js: JetStreamContext, store: ObjectStore, bucket: str, name: str, data: bytes, known: str | None = _UNKNOWN
) -> str:
    """An Object Store write as nats-py's ``put`` makes it (chunks on a new subject, then the meta message, then
    the chunks a previous version left are purged), with the look-up of that previous version sent while the
    chunks are (one round trip less per write), or none when ``known`` gives its nuid (None: no object). Returns
    the nuid written."""
    stream, nuid = f"OBJ_{bucket}", uuid.uuid4().hex
    chunks = f"$O.{bucket}.C.{nuid}"

    async def previous() -> str | None:
        if known != _UNKNOWN:
            return known
        try:
            info = await store.get_info(name)
        except (ObjectNotFoundError, ObjectDeletedError):
            return None
        return None if info.deleted else info.nuid

    async def send() -> int:
        for at in range(0, len(data), _CHUNK):
            await js.publish(chunks, data[at : at + _CHUNK])
        return -(-len(data) // _CHUNK)

    try:
        results = await asyncio.gather(previous(), send(), return_exceptions=True)  # both done, then any error
        for failed in results:
            if isinstance(failed, BaseException):
                raise failed
        old, count = cast(tuple[str | None, int], tuple(results))
        info = api.ObjectInfo(
            name=name,
            bucket=bucket,
            nuid=nuid,
            size=len(data),
            chunks=count,
            mtime=datetime.now(UTC).isoformat(),
            digest="SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode(),
            options=api.ObjectMetaOptions(max_chunk_size=_CHUNK),
        )
        meta = f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"
        await js.publish(meta, json.dumps(info.as_dict()).encode(), headers={api.Header.ROLLUP: MSG_ROLLUP_SUBJECT})
    except BaseException:
        with contextlib.suppress(Exception):  # best effort: the broker may be what failed
            await js.purge_stream(stream, subject=chunks)
        raise
    if old is not None and old != nuid:
        await js.purge_stream(stream, subject=f"$O.{bucket}.C.{old}")
    return nuid
