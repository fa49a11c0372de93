"""The checkpoint store port's contract, run on the checkpoint service (real git, over a real broker) and on
the in-memory twin: captures with per-file stats and unchanged ordinals, idempotent replays, diffs, restores
with their undo point and retired refs, forks made from a commit, and the failure codes callers act on."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from tests.support.volumes import OnVolume
from treadle.checkpoints.archive import JetStreamArchive
from treadle.checkpoints.client import CheckpointClient
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.hydrate import Hydrate
from treadle.checkpoints.materialize import Materialize
from treadle.checkpoints.protocol import Capture, CheckpointError, DiffRequest, RefName, Restore
from treadle.checkpoints_service.service import CheckpointService
from treadle.eventlog import streams
from treadle.memory import MemoryCheckpoints

TENANT, THREAD, WS = "acme", "thr_1", "proj"


class RealStore:
    """The checkpoint service on a volume of the test's own; files written on disk."""

    def __init__(self, nc, tmp_path: Path) -> None:
        self.volume = f"v{uuid.uuid4().hex[:8]}"
        self.root = tmp_path / "workspaces"
        self.root.mkdir()
        self.shadow = tmp_path / "shadow"
        self.workspaces = Workspaces(self.root, self.shadow, archive=JetStreamArchive(nc.jetstream()))
        self.service = CheckpointService(nc, self.workspaces, self.volume)
        self.store = OnVolume(CheckpointClient(nc, timeout=30.0), self.volume)

    def write(self, workspace: str, files: dict[str, str | None]) -> None:
        for path, text in files.items():
            target = self.root / TENANT / workspace / path
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)

    def lose(self, workspace: str) -> None:
        """The volume's disk is gone: the workspace and the tenant's git dirs."""
        shutil.rmtree(self.root / TENANT / workspace)
        shutil.rmtree(self.shadow / TENANT)

    def read(self, workspace: str) -> dict[str, str]:
        base = self.root / TENANT / workspace
        out = {}
        for d, dirs, files in os.walk(base):
            dirs[:] = [x for x in dirs if not (Path(d) == base and x == ".git")]
            out.update({str((Path(d) / f).relative_to(base)): (Path(d) / f).read_text() for f in files})
        return out


class TwinStore:
    def __init__(self) -> None:
        self.store = OnVolume(MemoryCheckpoints(), "local")

    def write(self, workspace: str, files: dict[str, str | None]) -> None:
        held = self.store.files(TENANT, workspace)
        for path, text in files.items():
            if text is None:
                del held[path]
            else:
                held[path] = text

    def lose(self, workspace: str) -> None:
        self.store.lose(TENANT, workspace)

    def read(self, workspace: str) -> dict[str, str]:
        return dict(self.store.files(TENANT, workspace))


@pytest.fixture(params=["git", "memory"])
async def ckpt(request, nats_url, tmp_path) -> AsyncIterator[RealStore | TwinStore]:
    if request.param == "memory":
        yield TwinStore()
        return
    nc = await nats.connect(nats_url)
    await streams.ensure(nc.jetstream())
    real = RealStore(nc, tmp_path)
    await real.service.start()
    try:
        yield real
    finally:
        await real.service.stop()
        await nc.close()


def capture(ordinal: int, previous: int | None, scope: str = "root") -> Capture:
    return Capture(
        tenant=TENANT,
        thread=THREAD,
        workspace=WS,
        scope=scope,
        ordinal=ordinal,
        previous_ordinal=previous,
        status="baseline" if previous is None else "completed",
    )


def restore(commit: str, restore_id: str, retire: list[RefName] | None = None) -> Restore:
    return Restore(
        tenant=TENANT, thread=THREAD, workspace=WS, restore_id=restore_id, commit=commit, retire=retire or []
    )


def changes(captured) -> dict[str, tuple[str, int, int]]:
    return {f.path: (f.change, f.added, f.removed) for f in captured.files}


async def failure(call) -> str:
    with pytest.raises(CheckpointError) as refused:
        await call
    return refused.value.code


async def prepared(ckpt) -> None:
    ready = await ckpt.store.prepare(TENANT, THREAD, WS)
    assert ready.created
    assert not (await ckpt.store.prepare(TENANT, THREAD, WS)).created
    ckpt.write(WS, {"a.txt": "one\ntwo\n", "b.txt": "bye\n"})


async def test_a_workspace_is_prepared_once_and_refusals_carry_their_codes(ckpt):
    assert await failure(ckpt.store.capture(capture(0, None))) == "workspace_missing"
    await prepared(ckpt)
    escape = Capture(tenant=TENANT, thread=THREAD, workspace="../elsewhere", ordinal=0)
    assert await failure(ckpt.store.capture(escape)) == "path_escape"
    assert (
        await failure(ckpt.store.capture(Capture(tenant="no such", thread=THREAD, workspace=WS, ordinal=0)))
        == "bad_request"
    )
    assert await failure(ckpt.store.capture(capture(1, 1))) == "bad_request"  # its own previous checkpoint


async def test_captures_count_changes_against_the_previous_checkpoint_and_replay_idempotently(ckpt):
    await prepared(ckpt)
    base = await ckpt.store.capture(capture(0, None))
    assert (base.files, base.unchanged, base.previous_commit) == ([], False, None)
    assert base.ref == f"refs/treadle/checkpoints/{THREAD}/root/0"
    ckpt.write(WS, {"a.txt": "one\nTWO\nthree\n", "b.txt": None, "c.txt": "new\n"})
    run1 = await ckpt.store.capture(capture(1, 0))
    assert run1.commit != base.commit and run1.previous_commit == base.commit and not run1.unchanged
    assert changes(run1) == {"a.txt": ("modified", 2, 1), "b.txt": ("deleted", 0, 1), "c.txt": ("added", 1, 0)}
    assert run1.files_total == 3
    run2 = await ckpt.store.capture(capture(2, 1))  # nothing changed: ordinal 2 is run 1's commit, in its ref
    assert run2.unchanged and (run2.commit, run2.tree, run2.ref, run2.files) == (run1.commit, run1.tree, run1.ref, [])
    replay = await ckpt.store.capture(capture(1, 0))  # a retried capture returns the checkpoint made first
    assert (replay.commit, replay.ref) == (run1.commit, run1.ref) and changes(replay) == changes(run1)
    ckpt.write(WS, {"c.txt": "new\nand more\n"})
    run3 = await ckpt.store.capture(capture(3, 2))
    assert run3.previous_commit == run1.commit and changes(run3) == {"c.txt": ("modified", 1, 0)}
    child = await ckpt.store.capture(capture(0, None, scope="root/node_a"))  # child scopes keep ordinals of their own
    assert child.ref == f"refs/treadle/checkpoints/{THREAD}/root/node_a/0" and child.tree == run3.tree


async def test_a_diff_between_checkpoints(ckpt):
    await prepared(ckpt)
    base = await ckpt.store.capture(capture(0, None))
    ckpt.write(WS, {"a.txt": "one\nTWO\nthree\n", "b.txt": None})
    run1 = await ckpt.store.capture(capture(1, 0))

    def request(from_commit, to_commit, **kw) -> DiffRequest:
        return DiffRequest(
            tenant=TENANT, thread=THREAD, workspace=WS, from_commit=from_commit, to_commit=to_commit, **kw
        )

    got = await ckpt.store.diff(request(base.commit, run1.commit))
    assert changes(got) == changes(run1) and not got.truncated and got.files_total == 2
    assert "-two\n" in got.patch and "+TWO\n" in got.patch and got.patch_bytes == len(got.patch.encode())
    whole = await ckpt.store.diff(request(None, run1.commit))
    assert changes(whole) == {"a.txt": ("added", 3, 0)}
    cut = await ckpt.store.diff(request(base.commit, run1.commit, max_bytes=40))
    assert cut.truncated and len(cut.patch.encode()) <= 40 and cut.patch_bytes == got.patch_bytes
    assert await failure(ckpt.store.diff(request(None, "0" * 40))) == "unknown_commit"
    assert await failure(ckpt.store.diff(request(None, "HEAD"))) == "bad_request"


async def test_a_restore_keeps_its_undo_point_and_retires_later_checkpoints(ckpt):
    await prepared(ckpt)
    base = await ckpt.store.capture(capture(0, None))
    before = ckpt.read(WS)
    ckpt.write(WS, {"a.txt": "changed\n", "d/e.txt": "deep\n"})
    run1 = await ckpt.store.capture(capture(1, 0))
    run2 = await ckpt.store.capture(capture(2, 1))  # unchanged: no ref of its own to retire
    ckpt.write(WS, {"a.txt": "after run 2\n"})
    after = ckpt.read(WS)

    done = await ckpt.store.restore(
        restore(base.commit, "rbk_1", [RefName(scope="root", ordinal=1), RefName(scope="root", ordinal=2)])
    )
    assert ckpt.read(WS) == before
    assert (done.commit, done.tree) == (base.commit, base.tree)
    assert done.undo_ref == f"refs/treadle/checkpoints/{THREAD}/undo/rbk_1"
    assert done.retired == [f"refs/treadle/checkpoints/{THREAD}/stale/rbk_1/root/1"]
    assert changes(done) == {"a.txt": ("modified", 2, 1), "d/e.txt": ("deleted", 0, 1)}
    again = await ckpt.store.restore(restore(base.commit, "rbk_1"))  # retried: the same undo point
    assert again.undo_commit == done.undo_commit and again.files == done.files and again.retired == []
    fresh = await ckpt.store.capture(capture(1, 0))  # ordinal 1 was retired: captured afresh, unchanged
    assert fresh.unchanged and fresh.commit == base.commit and run2.commit == run1.commit
    await ckpt.store.restore(restore(done.undo_commit, "rbk_2"))  # the rollback undone
    assert ckpt.read(WS) == after
    assert await failure(ckpt.store.restore(restore("0" * 40, "rbk_3"))) == "unknown_commit"


async def test_a_fork_workspace_is_made_from_a_checkpoint_once(ckpt):
    def fork(commit: str, source: str = WS) -> Materialize:
        return Materialize(
            tenant=TENANT,
            source_thread=THREAD,
            source_workspace=source,
            commit=commit,
            thread="thr_fork",
            workspace="threads/thr_fork",
        )

    assert await failure(ckpt.store.materialize(fork("a" * 40))) == "workspace_missing"  # never prepared
    await prepared(ckpt)
    assert await failure(ckpt.store.materialize(fork("a" * 40))) == "git_error"  # not a commit of the source
    base = await ckpt.store.capture(capture(0, None))
    ckpt.write(WS, {"a.txt": "later\n"})
    run1 = await ckpt.store.capture(capture(1, 0))
    made = await ckpt.store.materialize(fork(base.commit))
    assert made.created and made.commit == base.commit
    assert ckpt.read("threads/thr_fork") == {"a.txt": "one\ntwo\n", "b.txt": "bye\n"}
    assert not (await ckpt.store.materialize(fork(base.commit))).created
    assert await failure(ckpt.store.materialize(fork(run1.commit))) == "bad_request"  # made from another point
    assert await failure(ckpt.store.materialize(fork("HEAD"))) == "bad_request"


async def test_a_lost_workspace_is_hydrated_from_the_archive_once(ckpt):
    def hydrate(commit: str | None = None, workspace: str = WS) -> Hydrate:
        return Hydrate(tenant=TENANT, thread=THREAD, workspace=workspace, commit=commit)

    assert await failure(ckpt.store.hydrate(hydrate(workspace="threads/never"))) == "workspace_missing"
    await prepared(ckpt)
    base = await ckpt.store.capture(capture(0, None))
    first = ckpt.read(WS)
    ckpt.write(WS, {"a.txt": "later\n"})
    run1 = await ckpt.store.capture(capture(1, 0))
    later = ckpt.read(WS)
    held = await ckpt.store.hydrate(hydrate())  # it is there: nothing to do
    assert not held.created and held.commit == run1.commit and ckpt.read(WS) == later
    ckpt.lose(WS)
    assert await failure(ckpt.store.capture(capture(2, 1))) == "workspace_missing"
    assert await failure(ckpt.store.hydrate(hydrate("0" * 40))) == "unknown_commit"
    assert await failure(ckpt.store.hydrate(hydrate("HEAD"))) == "bad_request"
    made = await ckpt.store.hydrate(hydrate())  # the latest: where the workspace was left
    assert made.created and (made.commit, made.tree) == (run1.commit, run1.tree) and ckpt.read(WS) == later
    assert not (await ckpt.store.hydrate(hydrate(base.commit))).created  # it holds every checkpoint again
    assert (await ckpt.store.capture(capture(2, 1))).unchanged
    await ckpt.store.restore(restore(base.commit, "rbk_1"))
    assert ckpt.read(WS) == first
