"""Issue 41, item 4: what `treadle backup`/`restore` refuse, with a typed error and nothing changed: a backup
into a directory that holds anything, a restore from a damaged backup (a file that does not match its hash,
a manifest naming a path instead of a stream), and a restore onto a broker that already has the streams."""

from __future__ import annotations

import hashlib
import json

import nats
import pytest

from treadle.eventlog import streams
from treadle.ops.backup import MANIFEST, BackupError, backup, read_manifest, restore, stream_names
from treadle.ops.servers import NatsServer


@pytest.fixture
async def broker(tmp_path):
    server = NatsServer(tmp_path / "nats")
    await server.start()
    nc = await nats.connect(server.url)
    yield nc
    await nc.close()
    await server.stop()


async def test_backup_refuses_a_directory_with_anything_in_it(broker, tmp_path):
    await streams.ensure(broker.jetstream())
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(BackupError, match="not an empty directory"):
        await backup(broker, full)
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    with pytest.raises(BackupError, match="not an empty directory"):
        await backup(broker, full / "keep.txt")


async def test_a_damaged_or_hostile_backup_is_refused_before_anything_is_restored(broker, tmp_path):
    await streams.ensure(broker.jetstream())
    good = tmp_path / "good"
    copied = await backup(broker, good)
    assert copied[0].stream == "TREADLE_EVENTS" and copied[-1].stream == "OBJ_treadle-checkpoints"
    assert "KV_treadle-hosts" not in {c.stream for c in copied}
    assert len(read_manifest(good)) == len(copied)

    # onto a broker that has them: refused whole
    with pytest.raises(BackupError, match="already has"):
        await restore(broker, good)

    for stream in await stream_names(broker):
        await broker.jetstream().delete_stream(stream)
    manifest = json.loads((good / MANIFEST).read_text())
    events = good / "TREADLE_EVENTS.snapshot"
    original = events.read_bytes()
    events.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(BackupError, match="does not match the manifest"):
        await restore(broker, good)
    events.write_bytes(original)
    hostile = {**manifest, "streams": [{**manifest["streams"][0], "stream": "../x", "file": "../x.snapshot"}]}
    (good / MANIFEST).write_text(json.dumps(hostile))
    with pytest.raises(BackupError, match="not one"):
        await restore(broker, good)
    (good / MANIFEST).write_text("{not json")
    with pytest.raises(BackupError, match="no readable"):
        await restore(broker, good)
    assert await stream_names(broker) == []  # nothing was restored by any of them

    (good / MANIFEST).write_text(json.dumps(manifest))
    assert hashlib.sha256(events.read_bytes()).hexdigest() == manifest["streams"][0]["sha256"]
    await restore(broker, good)
    assert set(await stream_names(broker)) == {c.stream for c in copied}
