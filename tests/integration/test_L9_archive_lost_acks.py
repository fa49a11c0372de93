"""L9 (recovery after a failure): an Object Store write whose acknowledgement was lost may still have landed, so its
chunks stay; an object whose chunks are gone anyway is refused at once as damaged (never waited for), and a
checkpoint manifest the archive lost is rebuilt from the git dir by the next capture, every checkpoint with it.
Real broker, real git, the real checkpoint service; the lost acknowledgement is the real broker's answer dropped."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from tests.support.volumes import OnVolume
from treadle.checkpoints import archive as archives
from treadle.checkpoints.archive import ArchiveDamaged, ArchiveUnavailable, Holding, JetStreamArchive
from treadle.checkpoints.client import CheckpointClient
from treadle.checkpoints.durable import _decode
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.hydrate import Hydrate, request_hydrate
from treadle.checkpoints.protocol import Capture, DiffRequest
from treadle.checkpoints.repo import workspace_key
from treadle.checkpoints_service.service import CheckpointService
from treadle.eventlog import streams

TENANT, WS = "acme", "threads/proj"
STREAM = f"OBJ_{archives.BUCKET}"


class LostMetaAck(JetStreamContext):
    """The broker stores an object's meta, and its acknowledgement never reaches the writer."""

    async def publish(self, subject: str, payload: bytes = b"", *args, **kwargs):  # type: ignore[override]
        ack = await super().publish(subject, payload, *args, **kwargs)
        if subject.startswith(f"$O.{archives.BUCKET}.M."):
            raise TimeoutError("the meta's acknowledgement was lost")
        return ack


@pytest.fixture
async def nc(nats_url):
    client = await nats.connect(nats_url)
    await streams.ensure(client.jetstream())
    yield client
    await client.close()


async def lose_chunks(js: JetStreamContext, name: str) -> str:
    """Purge ``name``'s chunks, as a write that purged them after its meta landed did; returns its digest (hex)."""
    meta = await js.get_last_msg(STREAM, archives._meta_subject(archives.BUCKET, name))
    info = json.loads(meta.data)
    await js.purge_stream(STREAM, subject=f"$O.{archives.BUCKET}.C.{info['nuid']}")
    digest = archives._hex(info["digest"])
    assert digest is not None
    return digest


@pytest.mark.parametrize("size", [10, 3 * 128 * 1024 + 5])  # one chunk, and several
async def test_L9_a_write_whose_acknowledgement_was_lost_reads_back_whole(nc, size):
    name, data = f"acme/k/thr_{uuid.uuid4().hex[:8]}/manifest", os.urandom(size)
    with pytest.raises(ArchiveUnavailable):
        await JetStreamArchive(LostMetaAck(nc), timeout=10).put(name, data)
    assert await JetStreamArchive(nc.jetstream(), timeout=10).get(name) == data


@pytest.mark.parametrize("size", [10, 3 * 128 * 1024 + 5])
async def test_L9_an_object_whose_chunks_are_gone_is_damaged_and_can_be_replaced(nc, size):
    js, name = nc.jetstream(), f"acme/k/thr_{uuid.uuid4().hex[:8]}/manifest"
    writer = JetStreamArchive(js, timeout=10)
    await writer.put(name, os.urandom(size))
    digest = await lose_chunks(js, name)
    reader = JetStreamArchive(js, timeout=3600)  # a wait for chunks that never come would outlast the test
    with pytest.raises(ArchiveDamaged) as damaged:
        await reader.get(name)
    assert damaged.value.digest == digest
    await reader.put(name, b"made anew", holding=Holding(digest))  # written over what the meta names
    assert await writer.get(name) == b"made anew"


async def test_L9_a_capture_rebuilds_a_manifest_the_archive_lost_with_every_checkpoint(nc, tmp_path: Path):
    root, shadow, thread = tmp_path / "workspaces", tmp_path / "shadow", f"thr_{uuid.uuid4().hex[:8]}"
    workspace = root / TENANT / WS
    manifest = f"{TENANT}/{workspace_key(WS)}/{thread}/manifest"
    js = nc.jetstream()

    async def serving(volume: str):
        workspaces = Workspaces(root, shadow, archive=JetStreamArchive(js, timeout=3600))
        service = CheckpointService(nc, workspaces, volume)
        await service.start()
        return service, workspaces, OnVolume(CheckpointClient(nc), volume)

    def capture(ordinal: int) -> Capture:
        previous = ordinal - 1 if ordinal else None
        status = "baseline" if ordinal == 0 else "completed"
        return Capture(
            tenant=TENANT, thread=thread, workspace=WS, ordinal=ordinal, previous_ordinal=previous, status=status
        )

    service, workspaces, client = await serving("v1")
    await client.prepare(TENANT, thread, WS)
    commits = []
    for n in range(2):
        (workspace / f"f{n}.txt").write_text(f"run {n}\n")
        commits.append((await client.capture(capture(n))).commit)
    await service.stop()
    workspaces.close()

    await lose_chunks(js, manifest)
    service, workspaces, client = await serving("v1")  # restarted: it knows no manifest, and reads this one
    try:
        (workspace / "f2.txt").write_text("run 2\n")
        commits.append((await client.capture(capture(2))).commit)
        data = await JetStreamArchive(js, timeout=10).get(manifest)
        assert data is not None
        rebuilt = _decode.decode(data)
        assert {e.commit for e in rebuilt.refs.values()} == set(commits) and rebuilt.head == commits[-1]

        shutil.rmtree(workspace)  # the disk is lost: every checkpoint comes back from the rebuilt manifest
        shutil.rmtree(shadow / TENANT)
        made = await request_hydrate(nc, "v1", Hydrate(tenant=TENANT, thread=thread, workspace=WS), timeout=60)
        assert made.commit == commits[-1] and sorted(p.name for p in workspace.glob("f*.txt")) == [
            "f0.txt",
            "f1.txt",
            "f2.txt",
        ]
        first = await client.diff(
            DiffRequest(tenant=TENANT, thread=thread, workspace=WS, from_commit=commits[0], to_commit=commits[2])
        )
        assert "f1.txt" in first.patch and "f2.txt" in first.patch
    finally:
        await service.stop()
        workspaces.close()
