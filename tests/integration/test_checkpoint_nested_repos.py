"""Issue 36, finding 5: checkpoint git never reads a gitfile or `.gitmodules` from the workspace.

A repository below the workspace's root (a `.git` file or directory in a subdirectory) is skipped: left out
of every checkpoint tree (no gitlink, none of its files), listed as ``Skipped(reason="submodule")``, and left
alone by restore. A `sub/.git` file naming a host repository therefore tells the tenant nothing about it
(not even that it exists), and `.gitmodules` is only a file: its `update = !cmd` neither runs nor breaks
the capture or the diff.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.checkpoint_repos import (
    TENANT,
    THREAD,
    capture,
    ckpt,
    git,
    repository_with_submodule,
    restore,
    root,  # noqa: F401
)
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.protocol import DiffRequest, Skipped


@pytest.fixture
def host_repo(root: Path) -> tuple[Path, str]:
    """A repository of the host's, outside every tenant root and readable by every uid (as /work/main is)."""
    repo = root.parent / "host-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "host.txt").write_text("host\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "host")
    subprocess.run(["chmod", "-R", "a+rX", str(repo)], check=True)
    return repo, git(repo, "rev-parse", "HEAD").strip()


def tree_entries(ws: Path, commit: str) -> list[str]:
    return ckpt(ws, "ls-tree", "-r", "-t", commit).splitlines()


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "add_all"])
async def test_a_gitfile_to_a_host_repository_is_never_followed(root: Path, host_repo, watch: bool):
    repo, head = host_repo
    workspaces = Workspaces(root, root.parent / "state" / "shadow", watch=watch)
    try:
        ws = root / TENANT / "proj"
        ws.mkdir()
        (ws / "a.txt").write_text("a\n")
        await workspaces.prepare(TENANT, THREAD, "proj")
        c0 = await workspaces.capture(capture(0, None))
        (ws / "sub").mkdir()
        (ws / "sub" / ".git").write_text(f"gitdir: {repo / '.git'}\n")
        (ws / "sub" / "inner.txt").write_text("inner\n")
        (ws / "a.txt").write_text("a2\n")
        c1 = await workspaces.capture(capture(1, 0))
        (ws / "b.txt").write_text("b\n")  # the next capture (incremental where watched) keeps it out too
        c2 = await workspaces.capture(capture(2, 1))
        diff = await workspaces.diff(
            DiffRequest(tenant=TENANT, thread=THREAD, workspace="proj", from_commit=c0.commit, to_commit=c2.commit)
        )
    finally:
        workspaces.close()
    for got in (c1, c2):
        assert got.skipped == [Skipped(path="sub", reason="submodule")]
        entries = "\n".join(tree_entries(ws, got.commit))
        assert head not in entries and "160000" not in entries and "sub" not in entries, entries
    assert {f.path for f in c1.files} == {"a.txt"}
    assert {f.path for f in diff.files} == {"a.txt", "b.txt"}
    assert head not in diff.patch and head[:7] not in diff.patch and "sub" not in diff.patch


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "add_all"])
async def test_gitmodules_update_command_neither_runs_nor_breaks_capture_and_diff(root: Path, watch: bool):
    markers = root.parent / "markers"
    markers.mkdir()
    os.chmod(markers, 0o777)
    ws = repository_with_submodule(root)
    workspaces = Workspaces(root, root.parent / "state" / "shadow", watch=watch)
    try:
        c0 = await workspaces.capture(capture(0, None))
        (ws / ".gitmodules").write_text(
            f'[submodule "vendor/lib"]\n\tpath = vendor/lib\n\turl = ../lib\n\tupdate = !touch {markers}/update\n'
        )
        (ws / "vendor" / "lib" / "l.txt").write_text("changed inside the submodule\n")
        git(ws / "vendor" / "lib", "commit", "-q", "-am", "moved the submodule's HEAD")
        (ws / "top.txt").write_text("top\n")
        c1 = await workspaces.capture(capture(1, 0))
        diff = await workspaces.diff(
            DiffRequest(tenant=TENANT, thread=THREAD, workspace="proj", from_commit=c0.commit, to_commit=c1.commit)
        )
        done = await workspaces.restore(restore(c0.commit))
    finally:
        workspaces.close()
    assert list(markers.iterdir()) == []
    assert {f.path for f in c1.files} == {".gitmodules", "top.txt"}
    assert "update = !touch" in diff.patch and "vendor/lib" not in {f.path for f in diff.files}
    for got in (c0, c1):
        assert got.skipped == [Skipped(path="vendor/lib", reason="submodule")]
        assert "160000" not in "\n".join(tree_entries(ws, got.commit))
    # restore leaves the skipped repository as it is, and says so
    assert [(s.path, s.reason) for s in done.skipped] == [("vendor/lib", "submodule")]
    assert not (ws / "top.txt").exists()
    assert (ws / "vendor" / "lib" / "l.txt").read_text() == "changed inside the submodule\n"


async def test_a_directory_that_becomes_a_repository_leaves_the_trees_and_restore_leaves_it_alone(root: Path):
    workspaces = Workspaces(root, root.parent / "state" / "shadow")
    try:
        ws = root / TENANT / "proj"
        (ws / "sub").mkdir(parents=True)
        (ws / "sub" / "x.txt").write_text("plain\n")
        (ws / "top.txt").write_text("1\n")
        await workspaces.prepare(TENANT, THREAD, "proj")
        c0 = await workspaces.capture(capture(0, None))
        assert "sub/x.txt" in ckpt(ws, "ls-tree", "-r", "--name-only", c0.commit)
        git(ws / "sub", "init", "-q", "-b", "main")
        (ws / "sub" / "x.txt").write_text("the repository's now\n")
        (ws / "top.txt").write_text("2\n")
        c1 = await workspaces.capture(capture(1, 0))
        assert ckpt(ws, "ls-tree", "-r", "--name-only", c1.commit).split() == ["top.txt"]
        assert {(f.path, f.change) for f in c1.files} == {("top.txt", "modified"), ("sub/x.txt", "deleted")}
        done = await workspaces.restore(restore(c0.commit))
    finally:
        workspaces.close()
    assert (ws / "top.txt").read_text() == "1\n"
    assert (ws / "sub" / "x.txt").read_text() == "the repository's now\n"
    assert [(s.path, s.reason) for s in done.skipped] == [("sub", "submodule")]


async def test_a_submodule_of_the_users_head_not_checked_out_leaves_no_gitlink(root: Path):
    ws = repository_with_submodule(root)
    lib = ws / "vendor" / "lib"
    for p in sorted(lib.rglob("*"), reverse=True):
        p.unlink() if p.is_file() or p.is_symlink() else p.rmdir()
    (ws / "top.txt").write_text("top\n")
    workspaces = Workspaces(root, root.parent / "state" / "shadow", watch=False)
    try:
        c0 = await workspaces.capture(capture(0, None))
    finally:
        workspaces.close()
    entries = "\n".join(tree_entries(ws, c0.commit))
    assert "160000" not in entries and "top.txt" in entries and ".gitmodules" in entries
    assert c0.skipped == [Skipped(path="vendor/lib", reason="submodule")]
