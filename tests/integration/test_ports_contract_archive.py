"""The checkpoint archive port's contract (``ports.CheckpointArchive``), run on the JetStream Object Store (a real
broker) and on the in-memory twin: whole writes read back byte for byte, last write wins, a missing or deleted
name reads as None, deletes are idempotent, a conditional write lands only on the version it was made from, and a
store that does not answer fails as ``ArchiveUnavailable``."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import AsyncIterator

import nats
import pytest

from treadle.checkpoints.archive import BUCKET, ArchiveConflict, ArchiveUnavailable, Holding, JetStreamArchive
from treadle.eventlog import streams
from treadle.memory import MemoryArchive
from treadle.ops.servers import NatsServer


class Outage:
    """An archive, and a way to make it stop answering; ``other``: another process's view of the same store."""

    def __init__(self, archive, down, other=None) -> None:
        self.archive = archive
        self.down = down
        self.other = other if other is not None else archive


@pytest.fixture(params=["jetstream", "memory"])
async def store(request, tmp_path) -> AsyncIterator[Outage]:
    if request.param == "memory":
        twin = MemoryArchive()

        async def twin_down() -> None:
            twin.available = False

        yield Outage(twin, twin_down)
        return
    # A broker of the test's own: stopping it is the outage.
    server = NatsServer(tmp_path / "nats", auth=False)
    await server.start()
    nc = await nats.connect(server.url, max_reconnect_attempts=1, reconnect_time_wait=0.1)
    nc2 = await nats.connect(server.url, max_reconnect_attempts=1, reconnect_time_wait=0.1)
    try:
        await streams.ensure(nc.jetstream())
        other = JetStreamArchive(nc2.jetstream(), timeout=5.0)
        yield Outage(JetStreamArchive(nc.jetstream(), timeout=5.0), server.stop, other)
    finally:
        await nc2.close()
        await nc.close()
        await server.stop()


def name() -> str:
    return f"acme/{uuid.uuid4().hex[:8]}/thr_1/packs/{uuid.uuid4().hex}"


async def test_whole_writes_read_back_and_the_last_write_wins(store):
    first, big = name(), name()
    assert await store.archive.get(first) is None
    await store.archive.put(first, b"one")
    assert await store.archive.get(first) == b"one"
    await store.archive.put(first, b"two")  # a retried capture writes the same name again
    assert await store.archive.get(first) == b"two"
    payload = os.urandom(3 * 1024 * 1024 + 17)  # several chunks of the Object Store
    await store.archive.put(big, payload)
    assert await store.archive.get(big) == payload
    await store.archive.put(first, b"")
    assert await store.archive.get(first) == b""


async def test_a_digest_names_the_content_without_reading_it(store):
    held = name()
    assert await store.archive.digest(held) is None
    await store.archive.put(held, b"manifest v1")
    assert await store.archive.digest(held) == hashlib.sha256(b"manifest v1").hexdigest()
    await store.archive.put(held, b"manifest v2")
    assert await store.archive.digest(held) == hashlib.sha256(b"manifest v2").hexdigest()
    await store.archive.delete(held)
    assert await store.archive.digest(held) is None


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_a_conditional_write_lands_only_on_the_version_it_was_made_from(store):
    """A manifest's writers (a node, and one that took its thread over): a write made from a version another
    wrote over is refused whole, whatever this process last saw, and the version it would have replaced stays."""
    held = name()
    await store.archive.put(held, b"v1", holding=Holding(None))  # nothing there: created
    with pytest.raises(ArchiveConflict):
        await store.archive.put(held, b"v1 again", holding=Holding(None))
    await store.archive.put(held, b"v2", holding=Holding(sha(b"v1")))
    await store.other.put(held, b"v3 elsewhere", holding=Holding(sha(b"v2")))  # the other process knew nothing
    with pytest.raises(ArchiveConflict):  # this one last wrote v2 itself: the store, not its memory, decides
        await store.archive.put(held, b"v3 here", holding=Holding(sha(b"v2")))
    assert await store.archive.get(held) == b"v3 elsewhere"
    await store.archive.put(held, b"v4", holding=Holding(sha(b"v3 elsewhere")))
    assert await store.other.get(held) == b"v4"
    await store.other.delete(held)
    with pytest.raises(ArchiveConflict):
        await store.archive.put(held, b"v5", holding=Holding(sha(b"v4")))
    await store.archive.put(held, b"v5", holding=Holding(None))  # deleted: as if never written
    assert await store.other.get(held) == b"v5"


async def test_deletes_are_idempotent_and_deleted_names_read_as_none(store):
    gone = name()
    await store.archive.put(gone, b"pack")
    await store.archive.delete(gone)
    assert await store.archive.get(gone) is None
    await store.archive.delete(gone)  # again: no error
    await store.archive.delete(name())  # never written: no error
    await store.archive.put(gone, b"back")  # a name deleted may be written again
    assert await store.archive.get(gone) == b"back"


async def test_a_store_that_does_not_answer_fails_typed(store):
    kept = name()
    await store.archive.put(kept, b"x")
    await store.down()
    calls = (
        store.archive.put(kept, b"y"),
        store.archive.get(kept),
        store.archive.delete(kept),
        store.archive.digest(kept),
    )
    for call in calls:
        with pytest.raises(ArchiveUnavailable):
            await call


async def test_the_bucket_is_made_with_the_streams_at_the_shared_replicas(nats_url):
    nc = await nats.connect(nats_url)
    try:
        await streams.ensure(nc.jetstream())
        await streams.ensure(nc.jetstream())  # idempotent
        info = await nc.jetstream().stream_info(f"OBJ_{BUCKET}")
        assert info.config.num_replicas == 1
    finally:
        await nc.close()


async def test_an_overwrite_leaves_no_chunks_of_the_version_before(nats_url):
    """A manifest is written again on every capture: the chunks of each earlier version go (the stream holds the
    latest version's chunks and meta only), and the version read back is whole."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await streams.ensure(js)
        archive = JetStreamArchive(js, timeout=5.0)
        held = name()

        async def chunks() -> int:
            info = await js.stream_info(f"OBJ_{BUCKET}", subjects_filter=f"$O.{BUCKET}.C.>")
            return sum((info.state.subjects or {}).values())

        before = await chunks()
        await archive.put(held, os.urandom(300 * 1024))  # three chunks
        assert await chunks() == before + 3
        for n in range(3):
            await archive.put(held, b"v%d" % n)
        assert await chunks() == before + 1 and await archive.get(held) == b"v2"
        await archive.put(held, b"")  # no chunk at all
        assert await chunks() == before and await archive.get(held) == b""
    finally:
        await nc.close()
