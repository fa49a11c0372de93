"""Restores, diffs, retention and path safety of workspace checkpoints, on real git repos in tmp_path
(requirements L10.5, L10.6; issue 4 "Diffs", "Retention"; issue 9 item 6 "Path safety")."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path

import pytest

from tests.integration.checkpoint_repos import (  # noqa: F401  (fixtures)
    TENANT,
    THREAD,
    capture,
    ckpt,
    repository_with_submodule,
    restore,
    root,
    snapshot,
    user_repository,
    workspaces,
)
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.protocol import Capture, CheckpointError, DiffRequest, Prune, RefName


def user_git_state(repo: Path) -> dict[str, str]:
    """The user's HEAD, branches, index and stash, byte for byte."""
    files = ["HEAD", "index", "refs/stash", "logs/refs/stash", "logs/HEAD", "packed-refs"]
    files += [str(p.relative_to(repo / ".git")) for p in (repo / ".git" / "refs" / "heads").rglob("*") if p.is_file()]
    return {
        f: hashlib.sha256((repo / ".git" / f).read_bytes()).hexdigest() for f in files if (repo / ".git" / f).is_file()
    }


@pytest.fixture
def user_repo(root: Path) -> Path:
    return user_repository(root, committed={".gitignore": "*.log\n"})


async def test_L10_5_restore_undoes_created_modified_deleted_and_renamed_files_exactly(
    workspaces: Workspaces, user_repo: Path
):
    ws = user_repo
    (ws / "mod.txt").write_text("one\ntwo\n")
    (ws / "gone.txt").write_text("bye\n")
    (ws / "old.txt").write_text("".join(f"line {i}\n" for i in range(30)))
    (ws / "tool.sh").write_text("#!/bin/sh\n")
    (ws / "tool.sh").chmod(0o755)
    (ws / "blob.bin").write_bytes(bytes(range(256)))
    (ws / "pkg").mkdir()
    (ws / "pkg" / "a.py").write_text("a = 1\n")
    (ws / "link").symlink_to("pkg/a.py")
    before_user = user_git_state(ws)
    await workspaces.capture(capture(0, None))
    run1 = await workspaces.capture(capture(1, 0))
    expected = snapshot(ws)

    (ws / "mod.txt").write_text("one\nTWO\nthree\n")
    (ws / "gone.txt").unlink()
    (ws / "old.txt").rename(ws / "new.txt")
    (ws / "tool.sh").chmod(0o644)
    (ws / "blob.bin").write_bytes(bytes(range(255, -1, -1)))
    (ws / "pkg" / "a.py").unlink()
    (ws / "pkg").rmdir()
    (ws / "pkg").write_text("now a file\n")
    (ws / "created").mkdir()
    (ws / "created" / "x.py").write_text("x = 1\n")
    (ws / "debug.log").write_text("ignored, never restored\n")
    run2 = await workspaces.capture(capture(2, 1))
    assert {f.change for f in run2.files} >= {"added", "modified", "deleted", "renamed"}

    done = await workspaces.restore(restore(run1.commit))

    after = snapshot(ws)
    assert after.pop("debug.log") == ("0o0", b"ignored, never restored\n")
    assert after == expected
    assert user_git_state(ws) == before_user
    assert done.tree == run1.tree and done.undo_ref == f"refs/treadle/checkpoints/{THREAD}/undo/rbk_1"
    assert ckpt(ws, "rev-parse", f"{done.undo_commit}^{{tree}}").strip() == run2.tree  # the rollback is undoable
    assert {f.path for f in done.files} >= {"mod.txt", "gone.txt", "created/x.py", "pkg"}

    # Undo the rollback with the undo point: back to run 2's files exactly.
    await workspaces.restore(restore(done.undo_commit, restore_id="rbk_2"))
    assert ckpt(ws, "rev-parse", f"{(await workspaces.capture(capture(3, 2))).commit}^{{tree}}").strip() == run2.tree


async def test_L10_5_restore_retires_later_checkpoints_so_their_ordinals_are_captured_afresh(
    workspaces: Workspaces, root: Path
):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "f.txt").write_text("1\n")
    c1 = await workspaces.capture(capture(1, None))
    (ws / "f.txt").write_text("2\n")
    c2 = await workspaces.capture(capture(2, 1))
    (ws / "f.txt").write_text("3\n")
    c3 = await workspaces.capture(capture(3, 2))

    done = await workspaces.restore(
        restore(c1.commit, retire=[RefName(scope="root", ordinal=2), RefName(scope="root", ordinal=3)])
    )
    assert done.retired == [
        f"refs/treadle/checkpoints/{THREAD}/stale/rbk_1/root/2",
        f"refs/treadle/checkpoints/{THREAD}/stale/rbk_1/root/3",
    ]
    refs = ckpt(ws, "for-each-ref", "--format=%(refname) %(objectname)")
    assert f"refs/treadle/checkpoints/{THREAD}/root/3 " not in refs
    assert f"stale/rbk_1/root/3 {c3.commit}" in refs and f"stale/rbk_1/root/2 {c2.commit}" in refs

    # A retried restore (same id) changes nothing and still succeeds.
    again = await workspaces.restore(restore(c1.commit, retire=[RefName(scope="root", ordinal=3)]))
    assert (again.undo_commit, again.files, again.retired) == (done.undo_commit, done.files, [])

    # Run 4 continues on top of run 1's files: its baseline (ordinal 3) is the restored state.
    base = await workspaces.capture(capture(3, None, status="baseline"))
    assert base.tree == c1.tree
    (ws / "g.txt").write_text("new\n")
    run4 = await workspaces.capture(capture(4, 3))
    assert [(f.path, f.change) for f in run4.files] == [("g.txt", "added")]
    assert (ws / "f.txt").read_text() == "1\n"


async def test_diff_between_checkpoints_has_stats_and_a_size_capped_unified_diff(workspaces: Workspaces, root: Path):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "a.txt").write_text("a\n")
    first = await workspaces.capture(capture(0, None))
    (ws / "a.txt").write_text("a\nb\n")
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(2000)))
    (ws / "img.bin").write_bytes(b"\0\1\2\3" * 64)
    second = await workspaces.capture(capture(1, 0))

    whole = await workspaces.diff(
        DiffRequest(
            tenant=TENANT,
            thread=THREAD,
            workspace="proj",
            from_commit=first.commit,
            to_commit=second.commit,
            max_bytes=1 << 20,
        )
    )
    assert not whole.truncated and whole.patch_bytes == len(whole.patch.encode())
    assert "+b\n" in whole.patch and "Binary files" in whole.patch
    stats = {f.path: (f.change, f.added, f.removed, f.binary) for f in whole.files}
    assert stats == {
        "a.txt": ("modified", 1, 0, False),
        "big.txt": ("added", 2000, 0, False),
        "img.bin": ("added", 0, 0, True),
    }

    cut = await workspaces.diff(
        DiffRequest(
            tenant=TENANT,
            thread=THREAD,
            workspace="proj",
            from_commit=first.commit,
            to_commit=second.commit,
            max_bytes=1000,
        )
    )
    assert cut.truncated and len(cut.patch.encode()) <= 1000 and cut.patch.endswith("\n")
    assert cut.patch_bytes == whole.patch_bytes and cut.files == whole.files

    from_nothing = await workspaces.diff(
        DiffRequest(tenant=TENANT, thread=THREAD, workspace="proj", to_commit=first.commit)
    )
    assert [(f.path, f.change) for f in from_nothing.files] == [("a.txt", "added")]

    with pytest.raises(CheckpointError) as bad:
        await workspaces.diff(DiffRequest(tenant=TENANT, thread=THREAD, workspace="proj", to_commit="HEAD"))
    assert bad.value.code == "bad_request"
    with pytest.raises(CheckpointError) as unknown:
        await workspaces.diff(DiffRequest(tenant=TENANT, thread=THREAD, workspace="proj", to_commit="0" * 40))
    assert unknown.value.code == "unknown_commit"


async def test_path_safety_a_symlink_planted_in_the_workspace_is_never_followed(workspaces: Workspaces, root: Path):
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "sub").mkdir()
    (ws / "sub" / "f.txt").write_text("mine\n")
    c1 = await workspaces.capture(capture(0, None))

    # The agent swaps the directory for a symlink to somewhere outside the tenant.
    (ws / "sub" / "f.txt").unlink()
    (ws / "sub").rmdir()
    (ws / "sub").symlink_to(outside, target_is_directory=True)
    (ws / "escape").symlink_to(outside / "secret.txt")
    c2 = await workspaces.capture(capture(1, 0))
    tree = ckpt(ws, "ls-tree", "-r", c2.commit)
    assert ckpt(ws, "show", f"{c2.commit}:escape") == str(outside / "secret.txt")  # the link, never its target
    assert tree.count("120000") == 2

    await workspaces.restore(restore(c1.commit))
    assert (ws / "sub").is_dir() and not (ws / "sub").is_symlink()
    assert (ws / "sub" / "f.txt").read_text() == "mine\n"
    assert not (ws / "escape").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret\n"


@pytest.mark.parametrize("workspace", ["../other", "/etc", "proj/../../x", "escape", "proj/planted"])
async def test_path_safety_restore_diff_and_prune_refuse_paths_outside_the_tenant(
    workspaces: Workspaces, root: Path, workspace: str
):
    outside = root.parent / "outside"
    outside.mkdir(exist_ok=True)
    (root / TENANT / "escape").symlink_to(outside, target_is_directory=True)
    (root / TENANT / "proj").mkdir()
    (root / TENANT / "proj" / "planted").symlink_to(outside, target_is_directory=True)  # planted by the agent
    with pytest.raises(CheckpointError) as captured:
        await workspaces.capture(capture(0, None, workspace=workspace))
    assert captured.value.code == "path_escape"
    calls = [
        workspaces.restore(restore("0" * 40, workspace=workspace)),
        workspaces.diff(DiffRequest(tenant=TENANT, thread=THREAD, workspace=workspace, to_commit="0" * 40)),
        workspaces.prune(Prune(tenant=TENANT, workspace=workspace, idle_seconds=0, keep_latest=1)),
    ]
    for call in calls:
        with pytest.raises(CheckpointError) as refused:
            await call
        assert refused.value.code == "path_escape"
    assert list(outside.iterdir()) == []


async def test_submodules_are_skipped_and_left_alone_by_restore(workspaces: Workspaces, root: Path):
    ws = repository_with_submodule(root)
    c1 = await workspaces.capture(capture(0, None))
    (ws / "vendor" / "lib" / "l.txt").write_text("changed inside the submodule\n")
    (ws / "top.txt").write_text("top\n")
    await workspaces.capture(capture(1, 0))

    done = await workspaces.restore(restore(c1.commit))
    assert [(s.path, s.reason) for s in done.skipped] == [("vendor/lib", "submodule")]
    assert not (ws / "top.txt").exists()
    assert (ws / "vendor" / "lib" / "l.txt").read_text() == "changed inside the submodule\n"


async def test_concurrent_captures_and_restores_on_one_workspace_never_corrupt_it(workspaces: Workspaces, root: Path):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    for i in range(20):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
    base = await workspaces.capture(capture(0, None))
    for i in range(20):
        (ws / f"f{i}.txt").write_text(f"{i} changed\n")

    jobs = []
    for n in range(1, 9):
        jobs.append(workspaces.capture(capture(n, None, status="completed")))
        jobs.append(workspaces.restore(restore(base.commit, restore_id=f"rbk_{n}")))
    results = await asyncio.gather(*jobs)

    assert ckpt(ws, "fsck", "--no-progress", "--connectivity-only") == ""
    trees = {r.tree for r in results}
    assert trees <= {base.tree, results[0].tree}  # every capture saw a whole state, never a half-restored one
    assert snapshot(ws) == {f"f{i}.txt": ("0o0", f"{i}\n".encode()) for i in range(20)}
    refs = ckpt(ws, "for-each-ref", "--format=%(refname)").split()
    assert sum("/root/" in r for r in refs) == 9 and not any(r.endswith(".lock") for r in refs)


async def test_retention_prunes_idle_threads_but_keeps_their_latest_checkpoints(workspaces: Workspaces, root: Path):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    for n in range(5):
        (ws / "f.txt").write_text(f"{n}\n")
        await workspaces.capture(capture(n, n - 1 if n else None))
        if n == 1:
            await workspaces.capture(capture(0, None, scope="root/node_a"))

    fresh = await workspaces.prune(Prune(tenant=TENANT, workspace="proj", idle_seconds=3600, keep_latest=2))
    assert fresh.deleted == []  # active thread: untouched

    later = time.time() + 7200
    pruned = await workspaces.prune(Prune(tenant=TENANT, workspace="proj", idle_seconds=3600, keep_latest=2, now=later))
    left = ckpt(ws, "for-each-ref", "--format=%(refname)").split()
    assert left == [f"refs/treadle/checkpoints/{THREAD}/root/3", f"refs/treadle/checkpoints/{THREAD}/root/4"]
    assert len(pruned.deleted) == 4 and pruned.kept == 2
    with pytest.raises(CheckpointError):
        await workspaces.prune(Prune(tenant=TENANT, workspace="proj", idle_seconds=0, keep_latest=0))


async def test_unchanged_ordinals_write_no_ref_and_a_restarted_service_diffs_from_the_callers_record(
    workspaces: Workspaces, root: Path
):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "a.txt").write_text("0\n")
    c0 = await workspaces.capture(capture(0, None))
    c1 = await workspaces.capture(capture(1, 0))
    assert c1.unchanged and c1.ref == c0.ref and c1.commit == c0.commit

    restarted = Workspaces(root, root.parent / "state" / "shadow")
    try:
        (ws / "a.txt").write_text("2\n")
        c2 = await restarted.capture(
            capture(2, 1, previous_commit=c1.commit, previous_tree=c1.tree, previous_ref=c1.ref)
        )
    finally:
        restarted.close()
    assert [(f.path, f.change) for f in c2.files] == [("a.txt", "modified")]
    assert ckpt(ws, "rev-parse", f"{c2.ref}^").strip() == c0.commit


async def test_L10_5_a_retired_unchanged_ordinal_is_captured_afresh_after_a_rollback(
    workspaces: Workspaces, root: Path
):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "a.txt").write_text("0\n")
    c0 = await workspaces.capture(capture(0, None))
    (ws / "a.txt").write_text("1\n")
    await workspaces.capture(capture(1, 0))
    c2 = await workspaces.capture(capture(2, 1))
    assert c2.unchanged

    await workspaces.restore(
        restore(c0.commit, retire=[RefName(scope="root", ordinal=1), RefName(scope="root", ordinal=2)])
    )
    again = await workspaces.capture(capture(2, None, status="baseline"))
    assert again.tree == c0.tree and (ws / "a.txt").read_text() == "0\n"


async def test_retention_sweep_covers_every_workspace_the_service_has_served(workspaces: Workspaces, root: Path):
    for name in ("one", "two"):
        ws = root / TENANT / name
        await workspaces.prepare(TENANT, THREAD, name)
        for n in range(3):
            (ws / "f.txt").write_text(f"{n}\n")
            await workspaces.capture(capture(n, n - 1 if n else None, workspace=name))

    assert await workspaces.sweep(idle_seconds=3600, keep_latest=1) == []
    deleted = await workspaces.sweep(idle_seconds=3600, keep_latest=1, now=time.time() + 7200)
    assert len(deleted) == 4
    for name in ("one", "two"):
        left = ckpt(root / TENANT / name, "for-each-ref", "--format=%(refname)").split()
        assert left == [f"refs/treadle/checkpoints/{THREAD}/root/2"]


def _edit_same_size(ws: Path) -> None:
    (ws / "src" / "a.py").write_text("a = 2\n")


def _new_nested_dir(ws: Path) -> None:
    (ws / "src" / "deep" / "er").mkdir(parents=True)
    (ws / "src" / "deep" / "er" / "n.py").write_text("n = 1\n")


CHANGES = {
    "edit_same_size": _edit_same_size,
    "chmod": lambda ws: (ws / "src" / "a.py").chmod(0o755),
    "new_nested_dir": _new_nested_dir,
    "delete": lambda ws: (ws / "src" / "b.py").unlink(),
    "rename": lambda ws: (ws / "src" / "b.py").rename(ws / "src" / "c.py"),
    "retarget_symlink": lambda ws: ((ws / "link").unlink(), (ws / "link").symlink_to("src/b.py")),
    "unignore": lambda ws: (ws / ".gitignore").write_text(""),
}


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "fingerprint"])
@pytest.mark.parametrize("change", list(CHANGES))
async def test_the_unchanged_fast_path_never_misses_a_change(root: Path, change: str, watch: bool):
    workspaces = Workspaces(root, root.parent / "state" / "shadow", watch=watch)
    try:
        ws = root / TENANT / "proj"
        await workspaces.prepare(TENANT, THREAD, "proj")
        (ws / "src").mkdir()
        (ws / "src" / "a.py").write_text("a = 1\n")
        (ws / "src" / "b.py").write_text("b = 1\n")
        (ws / "link").symlink_to("src/a.py")
        (ws / ".gitignore").write_text("*.log\n")
        (ws / "x.log").write_text("ignored\n")
        base = await workspaces.capture(capture(0, None))
        same = await workspaces.capture(capture(1, 0))
        assert same.unchanged

        CHANGES[change](ws)
        after = await workspaces.capture(capture(2, 1))
        assert not after.unchanged and after.tree != base.tree, change
        again = await workspaces.capture(capture(3, 2))
        assert again.unchanged and again.tree == after.tree
        os.utime(ws / "src" / "a.py")  # a touch: content and mode unchanged
        touched = await workspaces.capture(capture(4, 3))
        assert touched.unchanged
    finally:
        workspaces.close()


async def test_one_inotify_instance_tells_workspaces_apart(workspaces: Workspaces, root: Path):
    names = [f"w{i}" for i in range(3)]
    for name in names:
        await workspaces.prepare(TENANT, f"thr_{name}", name)
        (root / TENANT / name / "f.txt").write_text("0\n")
        await workspaces.capture(Capture(tenant=TENANT, thread=f"thr_{name}", workspace=name, ordinal=0))
    (root / TENANT / "w1" / "f.txt").write_text("1\n")
    got = {
        name: await workspaces.capture(
            Capture(tenant=TENANT, thread=f"thr_{name}", workspace=name, ordinal=1, previous_ordinal=0)
        )
        for name in names
    }
    assert {n: c.unchanged for n, c in got.items()} == {"w0": True, "w1": False, "w2": True}


async def test_two_service_replicas_on_one_workspace_are_serialised_by_the_git_dir_lock(root: Path):
    """Two `Workspaces` (as two checkpoint-service replicas on one volume) share no in-process lock: only
    the flock on the git dir keeps their captures and restores apart."""
    replicas = [Workspaces(root, root.parent / "state" / "shadow") for _ in range(2)]
    try:
        ws = root / TENANT / "proj"
        await replicas[0].prepare(TENANT, THREAD, "proj")
        for i in range(30):
            (ws / f"f{i}.txt").write_text(f"{i}\n")
        base = await replicas[0].capture(capture(0, None))
        for i in range(30):
            (ws / f"f{i}.txt").write_text(f"{i} changed\n")
        jobs = []
        for n in range(1, 7):
            jobs.append(replicas[n % 2].capture(capture(n, None, status="completed")))
            jobs.append(replicas[(n + 1) % 2].restore(restore(base.commit, restore_id=f"rbk_{n}")))
        results = await asyncio.gather(*jobs)
        assert ckpt(ws, "fsck", "--no-progress") == ""
        assert {r.tree for r in results} <= {base.tree, results[0].tree}
        assert snapshot(ws) == {f"f{i}.txt": ("0o0", f"{i}\n".encode()) for i in range(30)}
    finally:
        for r in replicas:
            r.close()
