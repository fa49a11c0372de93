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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple, Protocol, TypeVar, cast

from nats.errors import Error as NatsError
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NotFoundError, ObjectDeletedError, ObjectNotFoundError
from nats.js.kv import MSG_ROLLUP_SUBJECT
from nats.js.object_store import ObjectStore

from ..eventlog.streams import CHECKPOINTS_BUCKET as BUCKET

__all__ = [
    "BUCKET",
    "ArchiveConflict",
    "ArchiveDamaged",
    "ArchiveUnavailable",
    "CheckpointArchive",
    "Holding",
    "JetStreamArchive",
]


T = TypeVar("T")


class ArchiveUnavailable(Exception):
    """The archive did not answer, or refused: nothing can be made durable (or read back) now."""


class ArchiveDamaged(ArchiveUnavailable):
    """``name`` is there but its bytes are not (its meta names chunks the stream no longer holds, or chunks that do
    not add up to its digest): it can never be read. ``digest``: what the meta says it holds, so that a writer can
    replace it with a conditional write."""

    def __init__(self, message: str, digest: str | None) -> None:
        super().__init__(message)
        self.digest = digest


class ArchiveConflict(Exception):
    """A conditional write found the name holding something else than the writer based its data on: nothing
    was written; read it again and redo the change."""


@dataclass(frozen=True, slots=True)
class Holding:
    """What a conditional write expects the name to hold: the SHA-256 (hex) of its data (None: nothing)."""

    digest: str | None


class CheckpointArchive(Protocol):
    """Named blobs off the node (git packs and manifests of checkpoints): as durable as the event log. Writes
    are whole and last-write-wins; a name never written, or deleted, reads as None. A store that does not
    answer raises ``ArchiveUnavailable``."""

    async def put(self, name: str, data: bytes, *, new: bool = False, holding: Holding | None = None) -> None:
        """``new``: the caller knows of no earlier object under ``name`` (a pack of a commit its manifest does not
        list), so the archive need not look for one to replace; one left by a write that failed before its
        manifest named it (another node's, rarely) then stays as unreferenced bytes, never as a wrong read.
        ``holding``: write only if ``name`` still holds that, checked atomically with the write; else
        ``ArchiveConflict`` and nothing changed (a manifest's writers: one read-modify-write never undoes another)."""
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
        # The version of names this process last read the meta of or wrote, so that a rewrite needs no look-up
        # of the version it replaces (its chunks' nuid), and a conditional one none of what the name holds (its
        # meta message's sequence, which the broker checks as it stores the new meta). Bounded; a miss looks it
        # up as before.
        self._versions: OrderedDict[str, _Version] = OrderedDict()

    async def put(self, name: str, data: bytes, *, new: bool = False, holding: Holding | None = None) -> None:
        async def put() -> None:
            # forgotten until this write is known to have landed
            seen = self._versions.pop(name, None)
            if holding is not None:
                if seen is None or seen.digest != holding.digest or seen.seq is None:
                    seen = await self._version(name)
                if seen.digest != holding.digest:
                    self._remember(name, seen)
                    raise ArchiveConflict(f"checkpoint archive {self._name}: {name} changed")
            known = seen.nuid if seen is not None else None if new else _UNKNOWN
            try:
                written = await _put(
                    self._js, await self._store(), self._name, name, data, known, seen.seq if holding and seen else None
                )
            except APIError as exc:
                if exc.err_code == _WRONG_LAST_SEQUENCE:
                    raise ArchiveConflict(f"checkpoint archive {self._name}: {name} changed") from None
                raise
            self._remember(name, written)

        await self._bounded("put", name, put())

    async def get(self, name: str) -> bytes | None:
        async def get() -> bytes | None:
            self._versions.pop(name, None)
            for _ in range(2):  # a meta replaced (and its chunks purged) between the two reads: once more
                found = await self._info(name)
                info, seq = found
                if info is None:
                    self._remember(name, _Version(None, None, seq))
                    return None
                version = _Version(_hex(info.digest), info.nuid, seq)
                data = await self._chunks(info)
                if data is not None and hashlib.sha256(data).hexdigest() == version.digest:
                    self._remember(name, version)
                    return data
                if await self._info(name) == found:
                    self._remember(name, version)
                    raise ArchiveDamaged(f"checkpoint archive {self._name}: {name} lost its data", version.digest)
            raise ArchiveUnavailable(f"checkpoint archive {self._name}: {name} kept changing while read")

        return await self._bounded("get", name, get())

    async def delete(self, name: str) -> None:
        async def delete() -> None:
            self._versions.pop(name, None)
            try:
                await (await self._store()).delete(name)
            except (ObjectNotFoundError, ObjectDeletedError):
                return

        await self._bounded("delete", name, delete())

    async def digest(self, name: str) -> str | None:
        async def digest() -> str | None:
            self._versions.pop(name, None)
            seen = await self._version(name)
            self._remember(name, seen)
            return seen.digest

        return await self._bounded("digest", name, digest())

    async def _version(self, name: str) -> _Version:
        """What ``name`` holds now, from its meta message (one request)."""
        info, seq = await self._info(name)
        return _Version(None, None, seq) if info is None else _Version(_hex(info.digest), info.nuid, seq)

    async def _info(self, name: str) -> tuple[api.ObjectInfo | None, int]:
        """``name``'s meta (None: no object, or a deleted one) and the sequence of its meta message (0: none)."""
        try:
            msg = await self._js.get_last_msg(f"OBJ_{self._name}", _meta_subject(self._name, name))
        except NotFoundError:
            return None, 0
        info = api.ObjectInfo.from_response(json.loads(msg.data or b"{}"))
        return None if info.deleted or not info.nuid else info, msg.seq or 0

    async def _chunks(self, info: api.ObjectInfo) -> bytes | None:
        """The bytes of the version ``info`` describes (None: its chunks are not all there). A lone chunk (a
        manifest, most packs) is one direct read; more are read in order through an ordered consumer, which is
        given up (not left subscribed) however the read ends."""
        if not info.size:
            return b""
        stream, subject = f"OBJ_{self._name}", f"$O.{self._name}.C.{info.nuid}"
        try:
            last = await self._js.get_last_msg(stream, subject)
        except NotFoundError:
            return None  # every chunk gone: an ordered consumer would wait for ever
        if (info.chunks or 0) <= 1:
            return bytes(last.data or b"")
        sub = await self._js.subscribe(subject, ordered_consumer=True)
        parts: list[bytes] = []
        try:
            while True:
                msg = await sub.next_msg(timeout=self._timeout)
                parts.append(msg.data)
                if msg.metadata.num_pending == 0:
                    return b"".join(parts)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    def _remember(self, name: str, version: _Version) -> None:
        self._versions[name] = version
        self._versions.move_to_end(name)
        while len(self._versions) > _VERSIONS_KEPT:
            self._versions.popitem(last=False)

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
            self._versions.clear()
            raise ArchiveUnavailable(f"checkpoint archive {self._name}: {verb} {name} failed: {exc!r}") from None


_CHUNK = 128 * 1024  # the Object Store's default chunk size, as nats-py writes it
_VERSIONS_KEPT = 4096
_UNKNOWN = "?"  # not a nuid nats writes
_WRONG_LAST_SEQUENCE = 10071  # JetStream's error code: the subject's last sequence is not the expected one


class _Version(NamedTuple):
    digest: str | None  # hex SHA-256 of the data (None: no object)
    nuid: str | None  # its chunks' nuid
    seq: int | None  # the stream sequence of its meta message (0: none ever; None: not known)


def _hex(digest: str | None) -> str | None:
    """The Object Store's digest (``SHA-256=<urlsafe base64>``) as hex."""
    return base64.urlsafe_b64decode((digest or "").removeprefix("SHA-256=")).hex() or None


def _meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


async def _put(
    js: JetStreamContext,
    store: ObjectStore,
    bucket: str,
    name: str,
    data: bytes,
    known: str | None = _UNKNOWN,
    last_seq: int | None = None,
) -> _Version:
    """An Object Store write as nats-py's ``put`` makes it (chunks on a new subject, then the meta message, then
    the chunks a previous version left are purged), with the look-up of that previous version sent while the
    chunks are (one round trip less per write), or none when ``known`` gives its nuid (None: no object).
    ``last_seq``: the meta is stored only if it replaces that meta message (else the broker refuses it, and the
    chunks go). Returns the version written."""
    stream, nuid = f"OBJ_{bucket}", uuid.uuid4().hex
    chunks = f"$O.{bucket}.C.{nuid}"

    async def previous() -> str | None:
        if known != _UNKNOWN or last_seq is not None:  # a conditional write knows the nuid it replaces
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
        digest = hashlib.sha256(data).digest()
        # The meta as nats-py's ObjectInfo.as_dict() writes it, made directly (as_dict walks the dataclass).
        info = {
            "name": name,
            "bucket": bucket,
            "nuid": nuid,
            "size": len(data),
            "mtime": datetime.now(UTC).isoformat(),
            "chunks": count,
            "digest": "SHA-256=" + base64.urlsafe_b64encode(digest).decode(),
            "deleted": False,
            "options": {"max_chunk_size": _CHUNK},
        }
        headers: dict[str, str] = {api.Header.ROLLUP: MSG_ROLLUP_SUBJECT}
        if last_seq is not None:
            headers[api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE] = str(last_seq)
        meta = json.dumps(info).encode()
    except BaseException:
        await _purge(js, stream, chunks)  # no meta was sent: the new chunks are nobody's
        raise
    try:
        ack = await js.publish(_meta_subject(bucket, name), meta, headers=headers)
    except APIError:
        await _purge(js, stream, chunks)  # the broker refused the meta: nobody's either
        raise
    # Any other failure (no ack in time, a lost connection, a cancellation) may follow a meta the broker stored:
    # its chunks stay, since a meta without its chunks can never be read. Unreferenced chunks are the cost.
    if old is not None and old != nuid:
        await js.purge_stream(stream, subject=f"$O.{bucket}.C.{old}")
    return _Version(digest.hex(), nuid, ack.seq)


async def _purge(js: JetStreamContext, stream: str, subject: str) -> None:
    with contextlib.suppress(Exception):  # best effort: the broker may be what failed
        await js.purge_stream(stream, subject=subject)
