"""Checkpoints that outlive the node (issue 35): every capture is in the archive before it answers, only what the
archive lacks is sent, a workspace and its git dir deleted from disk come back from the archive with every
checkpoint (diff, restore and rollback as before), retention deletes in the archive too, and an archive that
does not answer fails the capture with a typed error. Real git, the real checkpoint service over a real broker,
the archive in the broker's Object Store."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest

from tests.support.volumes import OnVolume
from treadle.checkpoints.archive import ArchiveUnavailable, Holding, JetStreamArchive
from treadle.checkpoints.client import CheckpointClient
from treadle.checkpoints.durable import Manifest, _decode
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.hydrate import Hydrate, request_hydrate
from treadle.checkpoints.protocol import Capture, CheckpointError, DiffRequest, Prune, RefName, Restore
from treadle.checkpoints.repo import workspace_key
from treadle.checkpoints_service.service import CheckpointService
from treadle.eventlog import streams
from treadle.memory import MemoryArchive
from treadle.ops.servers import NatsServer

TENANT, WS = "acme", "threads/proj"


class Counting:
    """The archive with what was sent counted (the real one underneath)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.puts: list[tuple[str, int]] = []
        self.deletes: list[str] = []

    async def put(self, name: str, data: bytes, *, new: bool = False, holding: Holding | None = None) -> None:
        await self.inner.put(name, data, new=new, holding=holding)
        self.puts.append((name, len(data)))

    async def get(self, name: str) -> bytes | None:
        return await self.inner.get(name)

    async def delete(self, name: str) -> None:
        await self.inner.delete(name)
        self.deletes.append(name)

    async def digest(self, name: str) -> str | None:
        return await self.inner.digest(name)


@dataclass
class Volume:
    root: Path
    shadow: Path
    archive: Counting
    client: CheckpointClient
    nc: nats.aio.client.Client
    name: str
    thread: str

    @property
    def workspace(self) -> Path:
        return self.root / TENANT / WS

    def write(self, files: dict[str, str | None]) -> None:
        for path, text in files.items():
            target = self.workspace / path
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)

    def read(self) -> dict[str, str]:
        out = {}
        for d, dirs, names in os.walk(self.workspace):
            dirs[:] = [x for x in dirs if not (Path(d) == self.workspace and x == ".git")]
            out.update({str((Path(d) / n).relative_to(self.workspace)): (Path(d) / n).read_text() for n in names})
        return out

    async def capture(self, ordinal: int, previous: int | None, **kw):
        return await self.client.capture(
            Capture(tenant=TENANT, thread=self.thread, workspace=WS, ordinal=ordinal, previous_ordinal=previous, **kw)
        )

    async def hydrate(self, **kw):
        return await request_hydrate(
            self.nc, self.name, Hydrate(tenant=TENANT, thread=self.thread, workspace=WS, **kw), timeout=60
        )

    def lose_disk(self) -> None:
        """The node's disk is gone: the workspace and every git dir of the tenant."""
        shutil.rmtree(self.workspace)
        shutil.rmtree(self.shadow / TENANT)

    async def manifest(self) -> Manifest:
        from treadle.checkpoints.durable import _decode
        from treadle.checkpoints.repo import workspace_key

        data = await self.archive.get(f"{TENANT}/{workspace_key(WS)}/{self.thread}/manifest")
        assert data is not None
        return _decode.decode(data)


async def _volume(nc, tmp_path: Path, archive) -> AsyncIterator[Volume]:
    name = f"v{uuid.uuid4().hex[:8]}"
    root, shadow = tmp_path / "workspaces", tmp_path / "shadow"
    counting = Counting(archive)
    workspaces = Workspaces(root, shadow, archive=counting)
    service = CheckpointService(nc, workspaces, name)
    await service.start()
    try:
        yield Volume(
            root, shadow, counting, OnVolume(CheckpointClient(nc), name), nc, name, f"thr_{uuid.uuid4().hex[:8]}"
        )
    finally:
        await service.stop()
        workspaces.close()


@pytest.fixture
async def volume(nats_url, tmp_path) -> AsyncIterator[Volume]:
    nc = await nats.connect(nats_url)
    await streams.ensure(nc.jetstream())
    try:
        async for v in _volume(nc, tmp_path, JetStreamArchive(nc.jetstream())):
            yield v
    finally:
        await nc.close()


def pack_objects(size_and_data: bytes) -> int:
    assert size_and_data[:4] == b"PACK"
    return struct.unpack(">I", size_and_data[8:12])[0]


async def test_a_capture_sends_only_the_objects_the_archive_lacks(volume: Volume):
    await volume.client.prepare(TENANT, volume.thread, WS)
    volume.write({f"d{i % 10}/f{i}.txt": f"file {i}\n" for i in range(1000)})
    await volume.capture(0, None, status="baseline")
    first = dict(volume.archive.puts)
    assert len(first) == 2  # the pack of every object, and the manifest
    volume.archive.puts.clear()

    volume.write({"d3/f3.txt": "changed\n"})
    run1 = await volume.capture(1, 0)
    sent = dict(volume.archive.puts)
    pack = f"{TENANT}/{next(iter(sent)).split('/')[1]}/{volume.thread}/packs/{run1.commit}"
    assert set(sent) == {pack, pack.rsplit("/packs/", 1)[0] + "/manifest"}
    data = await volume.archive.get(pack)
    assert data is not None and pack_objects(data) == 4  # the blob, its directory's tree, the root tree, the commit
    assert sent[pack] * 8 < max(first.values())  # the changed directory's tree is most of it

    volume.archive.puts.clear()
    unchanged = await volume.capture(2, 1)  # most runs change nothing: nothing is sent
    assert unchanged.unchanged and volume.archive.puts == []
    replay = await volume.capture(1, 0)  # a retried capture: the archive has it, nothing is sent
    assert replay.commit == run1.commit and volume.archive.puts == []
    for n in range(3, 13):  # a long thread: each manifest entry names one or two earlier commits, not all of them
        volume.write({f"d{n % 10}/f{n}.txt": f"run {n}\n"})
        await volume.capture(n, n - 1)
    stored = (await volume.manifest()).stored
    assert len(stored) == 12 and all(len(s.after) <= 2 for s in stored.values())


async def test_a_lost_disk_is_hydrated_with_every_checkpoint(volume: Volume):
    await volume.client.prepare(TENANT, volume.thread, WS)
    volume.write({"a.txt": "one\n", "b/c.txt": "deep\n", "gone.txt": "bye\n"})
    checkpoints = [await volume.capture(0, None, status="baseline")]
    states = [volume.read()]
    for n, change in enumerate(
        ({"a.txt": "two\n", "gone.txt": None}, {"new.txt": "new\n"}, {"b/c.txt": "deeper\n", "a.txt": "three\n"}),
        start=1,
    ):
        volume.write(change)
        checkpoints.append(await volume.capture(n, n - 1))
        states.append(volume.read())

    def diff(a, b) -> DiffRequest:
        return DiffRequest(tenant=TENANT, thread=volume.thread, workspace=WS, from_commit=a.commit, to_commit=b.commit)

    diffs = [(await volume.client.diff(diff(a, b))).patch for a in checkpoints for b in checkpoints]

    volume.lose_disk()
    with pytest.raises(CheckpointError) as missing:
        await volume.capture(4, 3)
    assert missing.value.code == "workspace_missing"
    volume.archive.puts.clear()
    made = await volume.hydrate()
    assert made.created and made.commit == checkpoints[-1].commit and made.files == 3
    assert volume.read() == states[-1] and volume.archive.puts == []
    assert (volume.workspace / ".git").is_dir()  # a repository, as prepare makes one
    again = await volume.hydrate()  # idempotent: the workspace holds it
    assert not again.created and volume.read() == states[-1]

    assert [(await volume.client.diff(diff(a, b))).patch for a in checkpoints for b in checkpoints] == diffs
    unchanged = await volume.capture(4, 3)  # the refs are back: the next capture continues the chain
    assert unchanged.unchanged and unchanged.commit == checkpoints[-1].commit
    for n in (2, 0, 1):  # rollback to each earlier checkpoint gives its files
        await volume.client.restore(
            Restore(
                tenant=TENANT, thread=volume.thread, workspace=WS, restore_id=f"rbk_{n}", commit=checkpoints[n].commit
            )
        )
        assert volume.read() == states[n]

    # After a rollback the workspace's state is the restored one: that is what a lost disk comes back as.
    volume.lose_disk()
    back = await volume.hydrate()
    assert back.commit == checkpoints[1].commit and volume.read() == states[1]
    undo = await volume.client.restore(  # and the undo point of the last rollback came back too
        Restore(tenant=TENANT, thread=volume.thread, workspace=WS, restore_id="rbk_x", commit=checkpoints[3].commit)
    )
    assert volume.read() == states[3] and undo.files_total > 0
    earlier = await volume.hydrate(commit=checkpoints[0].commit)  # the workspace holds ordinal 0 too: no-op
    assert not earlier.created


async def test_hydrate_refuses_hostile_paths_and_foreign_workspaces(volume: Volume, tmp_path: Path):
    await volume.client.prepare(TENANT, volume.thread, WS)
    volume.write({"a.txt": "one\n"})
    await volume.capture(0, None, status="baseline")

    async def code(**kw) -> str:
        req = {"tenant": TENANT, "thread": volume.thread, "workspace": WS, **kw}
        with pytest.raises(CheckpointError) as refused:
            await request_hydrate(volume.nc, volume.name, Hydrate(**req), timeout=30)
        return refused.value.code

    assert await code(workspace="../other/threads/proj") == "path_escape"
    assert await code(workspace="/etc") == "path_escape"
    assert await code(tenant="../acme") == "bad_request"
    assert await code(thread="thr x") == "bad_request"
    assert await code(commit="HEAD") == "bad_request"
    assert await code(commit="0" * 40) == "unknown_commit"
    assert await code(checkpoint_id="ckpt_unknown") == "unknown_commit"
    assert await code(workspace="threads/never") == "workspace_missing"  # nothing in the archive for it
    outside = tmp_path / "outside"
    outside.mkdir()
    (volume.root / TENANT / "threads" / "link").symlink_to(outside)
    assert await code(workspace="threads/link") == "path_escape"
    assert list(outside.iterdir()) == []
    # A workspace that exists with other content than the archive's checkpoints is not overwritten.
    shutil.rmtree(volume.shadow / TENANT)
    volume.write({"a.txt": "mine\n"})
    assert await code() == "bad_request"
    assert volume.read() == {"a.txt": "mine\n"}


async def test_retention_deletes_in_the_archive_too(volume: Volume):
    await volume.client.prepare(TENANT, volume.thread, WS)
    commits = []
    for n in range(5):
        volume.write({"a.txt": f"version {n}\n", f"f{n}.txt": f"{n}\n"})
        commits.append(
            (await volume.capture(n, n - 1 if n else None, status="baseline" if n == 0 else "completed")).commit
        )
    before = await volume.manifest()
    assert set(before.packs()) == set(commits)
    last = volume.read()

    pruned = await volume.client.prune(Prune(tenant=TENANT, workspace=WS, idle_seconds=0, keep_latest=1))
    assert len(pruned.deleted) == 4
    after = await volume.manifest()
    assert list(after.refs) == [f"refs/treadle/checkpoints/{volume.thread}/root/4"]
    assert len(after.packs()) == 1 and after.packs()[0].startswith("base-")
    for commit in commits:  # every pack of before is deleted from the archive
        assert await volume.archive.get(f"{TENANT}/{_key()}/{volume.thread}/packs/{commit}") is None

    volume.lose_disk()
    await volume.hydrate()
    assert volume.read() == last
    with pytest.raises(CheckpointError) as gone:  # a pruned checkpoint did not come back
        await volume.client.diff(
            DiffRequest(tenant=TENANT, thread=volume.thread, workspace=WS, from_commit=commits[0], to_commit=commits[4])
        )
    assert gone.value.code == "unknown_commit"
    # The kept checkpoint has no history in the archive now: captures go on from it, and come back again.
    volume.write({"a.txt": "version 5\n"})
    run5 = await volume.capture(5, 4)
    assert run5.previous_commit == commits[4] and {f.path for f in run5.files} == {"a.txt"}
    after_run5 = volume.read()
    volume.lose_disk()
    assert (await volume.hydrate()).commit == run5.commit and volume.read() == after_run5


def _key() -> str:
    from treadle.checkpoints.repo import workspace_key

    return workspace_key(WS)


async def test_an_archive_that_does_not_answer_fails_the_capture_typed(nats_url, tmp_path):
    """The broker holding the archive stops: the capture fails with ``store_unavailable`` (the run records a
    failed checkpoint, L10.4), never a checkpoint that is only on this node's disk."""
    server = NatsServer(tmp_path / "archive-broker", auth=False)
    await server.start()
    store_nc = await nats.connect(server.url, max_reconnect_attempts=1, reconnect_time_wait=0.1)
    nc = await nats.connect(nats_url)
    try:
        await streams.ensure(store_nc.jetstream())
        async for volume in _volume(nc, tmp_path, JetStreamArchive(store_nc.jetstream(), timeout=5.0)):
            await volume.client.prepare(TENANT, volume.thread, WS)
            volume.write({"a.txt": "one\n"})
            await volume.capture(0, None, status="baseline")
            await server.stop()
            volume.write({"a.txt": "two\n"})
            with pytest.raises(CheckpointError) as failed:
                await volume.capture(1, 0)
            assert failed.value.code == "store_unavailable"
    finally:
        await nc.close()
        await store_nc.close()
        await server.stop()


class FailingManifestWrite(MemoryArchive):
    """The twin, whose next manifest write fails (after the pack landed): the worst moment for an outage."""

    fail_next_manifest = False

    async def put(self, name: str, data: bytes, *, new: bool = False, holding: Holding | None = None) -> None:
        if self.fail_next_manifest and name.endswith("/manifest"):
            self.fail_next_manifest = False
            raise ArchiveUnavailable(f"put {name}: unavailable")
        await super().put(name, data, new=new, holding=holding)


async def test_a_manifest_write_that_failed_leaves_the_checkpoint_to_the_retry(nats_url, tmp_path):
    nc = await nats.connect(nats_url)
    twin = FailingManifestWrite()
    try:
        async for volume in _volume(nc, tmp_path, twin):
            await volume.client.prepare(TENANT, volume.thread, WS)
            volume.write({"a.txt": "one\n"})
            base = await volume.capture(0, None, status="baseline")
            volume.write({"a.txt": "two\n"})
            twin.fail_next_manifest = True
            with pytest.raises(CheckpointError) as failed:
                await volume.capture(1, 0)
            assert failed.value.code == "store_unavailable"
            assert (await volume.manifest()).head == base.commit
            run1 = await volume.capture(1, 0)  # the retry finds the ref made: its checkpoint is archived now
            manifest = await volume.manifest()
            assert manifest.head == run1.commit and manifest.refs[run1.ref].commit == run1.commit
    finally:
        await nc.close()


async def test_a_capture_retried_after_an_outage_sends_what_the_archive_lacks(nats_url, tmp_path):
    nc = await nats.connect(nats_url)
    twin = MemoryArchive()
    try:
        async for volume in _volume(nc, tmp_path, twin):
            await volume.client.prepare(TENANT, volume.thread, WS)
            volume.write({"a.txt": "one\n"})
            base = await volume.capture(0, None, status="baseline")
            twin.available = False
            volume.write({"a.txt": "two\n"})
            with pytest.raises(CheckpointError) as failed:
                await volume.capture(1, 0)
            assert failed.value.code == "store_unavailable"
            before = volume.read()
            with pytest.raises(CheckpointError) as refused:  # a restore is refused before any file moves
                await volume.client.restore(
                    Restore(tenant=TENANT, thread=volume.thread, workspace=WS, restore_id="rbk_1", commit=base.commit)
                )
            assert refused.value.code == "store_unavailable" and volume.read() == before
            twin.available = True
            run1 = await volume.capture(1, 0)  # the ref was made: the retry finds it and sends its pack
            assert f"{TENANT}/{_key()}/{volume.thread}/packs/{run1.commit}" in twin.blobs
            assert (await volume.manifest()).head == run1.commit
    finally:
        await nc.close()


async def test_a_rollback_s_retired_checkpoints_do_not_come_back(volume: Volume):
    await volume.client.prepare(TENANT, volume.thread, WS)
    volume.write({"a.txt": "zero\n"})
    base = await volume.capture(0, None, status="baseline")
    volume.write({"a.txt": "one\n"})
    await volume.capture(1, 0)
    await volume.client.restore(
        Restore(
            tenant=TENANT,
            thread=volume.thread,
            workspace=WS,
            restore_id="rbk_1",
            commit=base.commit,
            retire=[RefName(scope="root", ordinal=1)],
        )
    )
    volume.lose_disk()
    await volume.hydrate()
    assert volume.read() == {"a.txt": "zero\n"}
    volume.write({"a.txt": "again\n"})
    fresh = await volume.capture(1, 0)  # ordinal 1 was retired: captured afresh, not the old one replayed
    assert fresh.previous_commit == base.commit and not fresh.unchanged


async def test_L9_a_capture_the_caller_never_recorded_comes_back_with_its_files(volume: Volume):
    """A node captured run 2 into the archive and was lost before its reply left: the thread's log still ends at
    checkpoint 1, and the workspace is hydrated at it elsewhere. It comes back as the disk held it, so the capture's
    retry, which finds ordinal 2's ref made, names a checkpoint whose files are in the workspace."""
    await volume.client.prepare(TENANT, volume.thread, WS)
    volume.write({"m0.txt": "zero\n"})
    await volume.capture(0, None, status="baseline")
    volume.write({"m1.txt": "one\n"})
    recorded = await volume.capture(1, 0)
    volume.write({"m2.txt": "two\n"})
    unrecorded = await volume.capture(2, 1)
    volume.lose_disk()
    made = await volume.hydrate(commit=recorded.commit)  # what the log knows
    assert made.created and made.commit == unrecorded.commit
    assert volume.read() == {"m0.txt": "zero\n", "m1.txt": "one\n", "m2.txt": "two\n"}
    retried = await volume.capture(2, 1)
    assert retried.commit == unrecorded.commit and [f.path for f in retried.files] == ["m2.txt"]


async def test_a_checkpoint_is_found_by_the_id_its_capture_was_given(volume: Volume):
    await volume.client.prepare(TENANT, volume.thread, WS)
    volume.write({"a.txt": "one\n"})
    first = await volume.capture(0, None, status="baseline", checkpoint_id="ckpt_first")
    volume.write({"a.txt": "two\n"})
    await volume.capture(1, 0, checkpoint_id="ckpt_second")
    await volume.client.restore(  # the head back at the first (a later head would come back instead)
        Restore(tenant=TENANT, thread=volume.thread, workspace=WS, restore_id="rbk_1", commit=first.commit)
    )
    volume.lose_disk()
    made = await volume.hydrate(checkpoint_id="ckpt_first")
    assert made.created and made.commit == first.commit and made.checkpoint_id == "ckpt_first"
    assert volume.read() == {"a.txt": "one\n"}
    with pytest.raises(CheckpointError) as bad:
        await volume.capture(2, 1, checkpoint_id="ckpt first")
    assert bad.value.code == "bad_request"


def _packs_on_disk(volume: Volume) -> set[bytes]:
    return {p.read_bytes() for p in volume.shadow.rglob("*.pack")}


async def _stored_pack(volume: Volume, commit: str) -> bytes:
    data = await volume.archive.get(f"{TENANT}/{_key()}/{volume.thread}/packs/{commit}")
    assert data is not None
    return data


async def _lacks(volume: Volume, commit: str, scratch: Path) -> list[str]:
    """The objects of ``commit`` that the packs the manifest names for it do not hold (in a git dir of those alone)."""
    manifest = await volume.manifest()
    subprocess.run(["git", "init", "-q", "--bare", str(scratch)], check=True)
    for name in manifest.packs([commit]):
        pack = await _stored_pack(volume, name)
        subprocess.run(
            ["git", "-C", str(scratch), "index-pack", "--stdin"], input=pack, check=True, capture_output=True
        )
    listed = subprocess.run(
        ["git", "-C", str(scratch), "rev-list", "--objects", "--missing=print", commit],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [line for line in listed.splitlines() if line.startswith("?")]


def _diffs(volume: Volume, checkpoints) -> list[DiffRequest]:
    return [
        DiffRequest(tenant=TENANT, thread=volume.thread, workspace=WS, from_commit=a.commit, to_commit=b.commit)
        for a in checkpoints
        for b in checkpoints
    ]


async def test_L9_an_incremental_capture_stores_its_own_pack_and_hydrates_from_it(volume: Volume, tmp_path):
    """The pack the incremental path wrote is what the archive stores (no git pack-objects), cut against the
    parent; a lost disk comes back from those packs with every checkpoint's files."""
    await volume.client.prepare(TENANT, volume.thread, WS)
    volume.write({f"d{i % 5}/f{i}.txt": f"file {i}\n" for i in range(200)})
    checkpoints = [await volume.capture(0, None, status="baseline")]  # the first capture: `add -A`
    states = [volume.read()]
    changes = (
        {"d1/f1.txt": "changed\n"},
        {"new/deep/g.txt": "new dir\n", "d2/f2.txt": None},
        {"d0/f0.txt": "again\n", "new/deep/g.txt": "changed too\n", "top.txt": "top\n"},
    )
    for n, change in enumerate(changes, start=1):
        volume.write(change)
        checkpoints.append(await volume.capture(n, n - 1))
        states.append(volume.read())
        stored = await _stored_pack(volume, checkpoints[-1].commit)
        assert stored in _packs_on_disk(volume)  # the capture's own pack, byte for byte
        assert (await volume.manifest()).stored[checkpoints[-1].commit].after == [checkpoints[-2].commit]
        assert await _lacks(volume, checkpoints[-1].commit, tmp_path / f"alone{n}") == []
    diffs = [(await volume.client.diff(d)).patch for d in _diffs(volume, checkpoints)]

    volume.lose_disk()
    made = await volume.hydrate()
    assert made.created and made.commit == checkpoints[-1].commit and volume.read() == states[-1]
    assert [(await volume.client.diff(d)).patch for d in _diffs(volume, checkpoints)] == diffs
    await volume.client.restore(
        Restore(tenant=TENANT, thread=volume.thread, workspace=WS, restore_id="rbk_1", commit=checkpoints[1].commit)
    )
    assert volume.read() == states[1]


async def test_L9_captures_after_a_full_capture_or_off_the_watched_tree_store_everything(volume: Volume, tmp_path):
    """A capture on the `add -A` path, and one whose previous checkpoint is not the tree the watcher was at,
    are cut by git; the incremental capture after a full one is its own pack. Each hydrates complete."""
    await volume.client.prepare(TENANT, volume.thread, WS)
    volume.write({"a.txt": "one\n", "b/c.txt": "deep\n"})
    checkpoints = [await volume.capture(0, None, status="baseline")]
    states = [volume.read()]

    def checkpointed() -> dict[str, str]:
        return {p: text for p, text in volume.read().items() if not p.endswith(".log")}

    async def step(n: int, previous: int, change: dict[str, str | None]) -> None:
        volume.write(change)
        checkpoints.append(await volume.capture(n, previous))
        states.append(checkpointed())

    await step(1, 0, {"a.txt": "two\n"})
    await step(2, 1, {".gitignore": "*.log\n", "b/x.log": "ignored\n", "b/d.txt": "full\n"})  # a rule: `add -A`
    assert "b/x.log" not in (await volume.client.diff(_diffs(volume, checkpoints[1:])[1])).patch
    await step(3, 2, {"c3.txt": "made in 3\n"})  # the first incremental capture after the full one
    assert await _stored_pack(volume, checkpoints[3].commit) in _packs_on_disk(volume)
    # On checkpoint 2, not 3 where the workspace was: the new pack alone lacks c3.txt, which 2 does not hold.
    await step(4, 2, {"a.txt": "four\n"})
    for n, checkpoint in enumerate(checkpoints):  # the packs the manifest names for each hold all of it
        assert await _lacks(volume, checkpoint.commit, tmp_path / f"alone{n}") == []
    diffs = [(await volume.client.diff(d)).patch for d in _diffs(volume, checkpoints)]

    volume.lose_disk()
    made = await volume.hydrate()
    assert made.commit == checkpoints[4].commit and volume.read() == states[4]
    assert "c3.txt" in states[4]
    assert [(await volume.client.diff(d)).patch for d in _diffs(volume, checkpoints)] == diffs
    for n in (3, 2):
        await volume.client.restore(
            Restore(
                tenant=TENANT, thread=volume.thread, workspace=WS, restore_id=f"rbk_{n}", commit=checkpoints[n].commit
            )
        )
        assert checkpointed() == states[n]


async def test_a_node_with_a_stale_manifest_never_drops_what_another_node_archived(nats_url, tmp_path):
    """A thread taken over by another node while this one still runs: each writes the manifest from its own copy
    with no read before the write, so the archive refuses the stale one, which reads it again and adds its
    checkpoint to the other's. Both are in the archive, and a third node hydrates either."""
    nc, nc_b = await nats.connect(nats_url), await nats.connect(nats_url)
    await streams.ensure(nc.jetstream())
    thread = f"thr_{uuid.uuid4().hex[:8]}"
    nodes = [
        Workspaces(tmp_path / n / "ws", tmp_path / n / "shadow", archive=JetStreamArchive(c.jetstream()))
        for n, c in (("a", nc), ("b", nc_b), ("c", nc), ("d", nc_b))
    ]
    a, b, c, d = nodes

    def write(node: Workspaces, name: str, text: str) -> None:
        (node.tenant_root(TENANT) / WS / name).write_text(text)

    async def capture(node: Workspaces, ordinal: int, previous: int | None):
        return await node.capture(
            Capture(tenant=TENANT, thread=thread, workspace=WS, ordinal=ordinal, previous_ordinal=previous)
        )

    try:
        await a.prepare(TENANT, thread, WS)
        write(a, "a.txt", "one\n")
        await capture(a, 0, None)
        write(a, "a.txt", "two\n")
        one = await capture(a, 1, 0)
        assert (await b.hydrate(Hydrate(tenant=TENANT, thread=thread, workspace=WS))).commit == one.commit
        write(b, "b.txt", "b's\n")
        on_b = await capture(b, 2, 1)
        write(a, "a.txt", "a's\n")
        on_a = await capture(a, 3, 1)  # a's copy of the manifest predates b's write
        data = await a.durable.archive.get(f"{TENANT}/{workspace_key(WS)}/{thread}/manifest")  # type: ignore[union-attr]
        assert data is not None
        manifest = _decode.decode(data)
        assert {manifest.refs[r.ref].commit for r in (one, on_b, on_a)} == {one.commit, on_b.commit, on_a.commit}
        assert manifest.head == on_a.commit and {on_a.commit, on_b.commit} <= set(manifest.stored)
        for node, commit, files in (
            (c, on_b.commit, {"a.txt": "two\n", "b.txt": "b's\n"}),
            (d, on_a.commit, {"a.txt": "a's\n"}),
        ):
            assert (
                await node.hydrate(Hydrate(tenant=TENANT, thread=thread, workspace=WS, commit=commit))
            ).commit == commit
            top = node.tenant_root(TENANT) / WS
            assert {p.name: p.read_text() for p in top.iterdir() if p.is_file()} == files
    finally:
        for node in nodes:
            node.close()
        await nc_b.close()
        await nc.close()
