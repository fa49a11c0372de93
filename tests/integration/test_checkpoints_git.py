"""Workspace checkpoints against real git in tmp_path (requirements L10; docs/concepts.md "Checkpoints")."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.checkpoint_repos import (  # noqa: F401  (fixtures)
    TENANT,
    THREAD,
    capture,
    checkpoint_dir,
    ckpt,
    files_of,
    git,
    restore,
    root,
    user_repository,
    workspaces,
)
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.protocol import CheckpointError, FileStat
from treadle.checkpoints.repo import workspace_key


def loose_objects(git_dir: Path) -> int:
    return sum(len(files) for d, _, files in os.walk(git_dir / "objects") if len(Path(d).name) == 2)


@pytest.fixture
def user_repo(root: Path) -> Path:
    """A user's repository with history, a stash, staged and unstaged changes and untracked files."""
    repo = user_repository(root)
    (repo / "app.py").write_text("print(3)\n")
    (repo / "notes.txt").write_text("untracked\n")
    return repo


async def test_L10_1_baseline_capture_of_new_workspace_creates_hidden_ref(workspaces: Workspaces, root: Path):
    ready = await workspaces.prepare(TENANT, THREAD, "threads/thr_1")
    path = root / TENANT / "threads" / "thr_1"
    assert (ready.path, ready.git, ready.created) == (str(path.resolve()), True, True)
    (path / "main.py").write_text("x = 1\n")

    got = await workspaces.capture(capture(0, None, workspace="threads/thr_1"))

    assert got.ref == f"refs/treadle/checkpoints/{THREAD}/root/0"
    assert ckpt(path, "rev-parse", got.ref).strip() == got.commit
    assert files_of(path, got.commit) == {"main.py": "x = 1\n"}
    assert (got.unchanged, got.files, got.previous_commit, got.status) == (False, [], None, "baseline")
    # Hidden: the user's branch is still unborn and the file is still untracked to the user.
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=path).returncode != 0
    assert git(path, "status", "--porcelain") == "?? main.py\n"
    assert git(path, "branch", "--list") == ""


async def test_L10_1_prepare_keeps_an_existing_repository_as_it_is(workspaces: Workspaces, user_repo: Path):
    head = git(user_repo, "rev-parse", "HEAD")
    ready = await workspaces.prepare(TENANT, THREAD, "proj")
    assert (ready.git, ready.created) == (True, False)
    assert git(user_repo, "rev-parse", "HEAD") == head


async def test_L10_2_capture_after_run_has_per_file_stats(workspaces: Workspaces, root: Path):
    await workspaces.prepare(TENANT, THREAD, "proj")
    ws = root / TENANT / "proj"
    (ws / "keep.txt").write_text("a\nb\nc\n")
    (ws / "edit.txt").write_text("1\n2\n3\n")
    (ws / "gone.txt").write_text("bye\n")
    (ws / "old_name.txt").write_text("".join(f"line {i}\n" for i in range(20)))
    (ws / "blob.bin").write_bytes(b"\0\1\2" * 100)
    base = await workspaces.capture(capture(0, None))

    (ws / "edit.txt").write_text("1\ntwo\n3\n4\n")
    (ws / "gone.txt").unlink()
    (ws / "old_name.txt").rename(ws / "new_name.txt")
    (ws / "new_name.txt").write_text((ws / "new_name.txt").read_text() + "line 20\n")
    (ws / "blob.bin").write_bytes(b"\0\3\4" * 100)
    (ws / "src").mkdir()
    (ws / "src" / "added.py").write_text("a = 1\nb = 2\n")
    run = await workspaces.capture(capture(1, 0))

    assert not run.unchanged and run.previous_commit == base.commit
    assert ckpt(ws, "rev-parse", f"{run.commit}^").strip() == base.commit
    assert sorted(run.files, key=lambda f: f.path) == [
        FileStat(path="blob.bin", change="modified", added=0, removed=0, binary=True),
        FileStat(path="edit.txt", change="modified", added=2, removed=1),
        FileStat(path="gone.txt", change="deleted", added=0, removed=1),
        FileStat(path="new_name.txt", change="renamed", added=1, removed=0, old_path="old_name.txt"),
        FileStat(path="src/added.py", change="added", added=2, removed=0),
    ]


async def test_L10_3_child_scope_nests_under_the_parent_and_diffs_against_its_checkpoint(
    workspaces: Workspaces, root: Path
):
    await workspaces.prepare(TENANT, THREAD, "proj")
    ws = root / TENANT / "proj"
    (ws / "a.txt").write_text("1\n")
    parent = await workspaces.capture(capture(0, None))
    (ws / "b.txt").write_text("from the subagent\n")

    child = await workspaces.capture(capture(1, 0, scope="root/node_sub", previous_scope="root"))

    assert child.ref == f"refs/treadle/checkpoints/{THREAD}/root/node_sub/1"
    assert child.previous_commit == parent.commit
    assert child.files == [FileStat(path="b.txt", change="added", added=1, removed=0)]
    assert ckpt(ws, "rev-parse", f"refs/treadle/checkpoints/{THREAD}/root/0").strip() == parent.commit


async def test_capture_never_touches_user_branch_index_or_stash(workspaces: Workspaces, user_repo: Path):
    def observe() -> tuple:
        index = hashlib.sha256((user_repo / ".git" / "index").read_bytes()).hexdigest()
        return (
            index,
            git(user_repo, "rev-parse", "HEAD", "refs/heads/main", "stash@{0}"),
            git(user_repo, "symbolic-ref", "HEAD"),
            git(user_repo, "stash", "list"),
            git(user_repo, "--no-optional-locks", "status", "--porcelain"),
            git(user_repo, "--no-optional-locks", "diff", "--cached"),
            git(user_repo, "for-each-ref", "refs/heads", "refs/tags", "refs/stash"),
        )

    before = observe()
    first = await workspaces.capture(capture(0, None))
    (user_repo / "app.py").write_text("print(4)\n")
    second = await workspaces.capture(capture(1, 0))
    (user_repo / "app.py").write_text("print(3)\n")  # back to what observe() saw

    assert observe() == before
    assert before[4] == "M  README.md\n M app.py\n?? notes.txt\n"
    # The checkpoint is the working tree as the user sees it: staged, unstaged and untracked.
    assert files_of(user_repo, first.commit) == {
        "README.md": "hello\nstaged\n", "app.py": "print(3)\n", "notes.txt": "untracked\n",
    }  # fmt: skip
    assert second.files == [FileStat(path="app.py", change="modified", added=1, removed=1)]


async def test_gitignored_files_are_not_captured(workspaces: Workspaces, root: Path):
    await workspaces.prepare(TENANT, THREAD, "proj")
    ws = root / TENANT / "proj"
    (ws / ".gitignore").write_text("*.log\nbuild/\n")
    (ws / "app.py").write_text("ok\n")
    (ws / "debug.log").write_text("noise\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"\0obj")

    got = await workspaces.capture(capture(0, None))

    assert set(files_of(ws, got.commit)) == {".gitignore", "app.py"}


async def test_files_the_user_tracks_despite_gitignore_are_captured(workspaces: Workspaces, user_repo: Path):
    (user_repo / ".gitignore").write_text("*.log\n")
    (user_repo / "kept.log").write_text("tracked on purpose\n")
    git(user_repo, "add", "-f", ".gitignore", "kept.log")
    git(user_repo, "commit", "-q", "-m", "keep a log")
    (user_repo / "other.log").write_text("ignored\n")

    got = await workspaces.capture(capture(0, None))

    names = set(files_of(user_repo, got.commit))
    assert "kept.log" in names and "other.log" not in names


async def test_non_git_workspace_uses_shadow_git_dir(workspaces: Workspaces, root: Path):
    ws = root / TENANT / "plain"
    ws.mkdir()
    (ws / "data.txt").write_text("v1\n")

    ready = await workspaces.prepare(TENANT, THREAD, "plain")
    base = await workspaces.capture(capture(0, None, workspace="plain"))
    (ws / "data.txt").write_text("v2\n")
    run = await workspaces.capture(capture(1, 0, workspace="plain"))

    # The service's own git dir for the workspace (as for every workspace, a repository or not).
    shadow = root.parent / "state" / "shadow" / TENANT / "workspaces" / f"plain-{workspace_key('plain')}.git"
    assert shadow == checkpoint_dir(ws)
    assert (ready.git, ready.created) == (False, False)
    assert sorted(p.name for p in ws.iterdir()) == ["data.txt"]  # no .git, nothing else either
    assert git(ws, "rev-parse", run.ref, git_dir=shadow).strip() == run.commit
    assert files_of(ws, base.commit, git_dir=shadow) == {"data.txt": "v1\n"}
    assert run.files == [FileStat(path="data.txt", change="modified", added=1, removed=1)]


async def test_capture_is_idempotent_for_same_ordinal(workspaces: Workspaces, root: Path):
    await workspaces.prepare(TENANT, THREAD, "proj")
    ws = root / TENANT / "proj"
    (ws / "a.txt").write_text("1\n")
    await workspaces.capture(capture(0, None))
    (ws / "a.txt").write_text("2\n")
    first = await workspaces.capture(capture(1, 0))
    objects = loose_objects(checkpoint_dir(ws))

    (ws / "a.txt").write_text("3\n")  # a replay must not pick this up
    again = await workspaces.capture(capture(1, 0))
    restarted = Workspaces(root, root.parent / "state" / "shadow")
    after_restart = await restarted.capture(capture(1, 0))
    restarted.close()

    assert again == first == after_restart
    assert loose_objects(checkpoint_dir(ws)) == objects  # no new commit, tree or blob


async def test_unchanged_workspace_reports_unchanged(workspaces: Workspaces, root: Path):
    await workspaces.prepare(TENANT, THREAD, "proj")
    ws = root / TENANT / "proj"
    (ws / "a.txt").write_text("same\n")
    base = await workspaces.capture(capture(0, None))

    runs = [await workspaces.capture(capture(n, n - 1)) for n in range(1, 4)]

    for run in runs:
        assert (run.unchanged, run.files, run.tree) == (True, [], base.tree)
        assert ckpt(ws, "rev-parse", run.ref).strip() == run.commit
    # A touch that leaves the content alone is still unchanged.
    os.utime(ws / "a.txt")
    touched = await workspaces.capture(capture(4, 3))
    assert touched.unchanged and touched.tree == base.tree


async def test_same_size_rewrites_right_after_a_capture_are_never_missed(workspaces: Workspaces, root: Path):
    """The stat fingerprint fast path must not hide a change made within the same clock tick,
    nor one that puts back size and mtime (as `cp -p` or tar extraction do)."""
    await workspaces.prepare(TENANT, THREAD, "proj")
    ws = root / TENANT / "proj"
    target = ws / "f.txt"
    target.write_text("a00\n")
    await workspaces.capture(capture(0, None))
    ordinal = 0
    for n in range(1, 30):
        target.write_text(f"a{n:02}\n")
        written = target.stat()
        changed = await workspaces.capture(capture(ordinal + 1, ordinal))
        # Twice unchanged, so the fingerprint is recorded and then relied on.
        same = [await workspaces.capture(capture(ordinal + k, ordinal + k - 1)) for k in (2, 3)]
        target.write_text(f"b{n:02}\n")
        os.utime(target, ns=(written.st_atime_ns, written.st_mtime_ns))
        rewritten = await workspaces.capture(capture(ordinal + 4, ordinal + 3))
        ordinal += 4

        assert not changed.unchanged and all(c.unchanged for c in same), n
        assert not rewritten.unchanged and rewritten.tree != changed.tree, n
        assert rewritten.files == [FileStat(path="f.txt", change="modified", added=1, removed=1)]


@pytest.mark.parametrize("workspace", ["../other", "proj/../../other", "/etc", "", ".", "escape"])
async def test_workspace_path_cannot_escape_tenant_root(workspaces: Workspaces, root: Path, workspace: str):
    outside = root.parent / "outside"
    outside.mkdir(exist_ok=True)
    (root / TENANT / "escape").symlink_to(outside, target_is_directory=True)

    with pytest.raises(CheckpointError) as prepared:
        await workspaces.prepare(TENANT, THREAD, workspace)
    with pytest.raises(CheckpointError) as captured:
        await workspaces.capture(capture(0, None, workspace=workspace))

    assert prepared.value.code == captured.value.code == "path_escape"
    assert list(outside.iterdir()) == []


async def test_dot_git_pointing_outside_the_tenant_is_refused(workspaces: Workspaces, root: Path):
    other = root / "other_tenant" / "repo"
    other.mkdir(parents=True)
    git(other, "init", "-q")
    ws = root / TENANT / "proj"
    ws.mkdir()
    (ws / ".git").write_text(f"gitdir: {other / '.git'}\n")

    with pytest.raises(CheckpointError) as refused:
        await workspaces.capture(capture(0, None))

    assert refused.value.code == "path_escape"
    assert git(other, "for-each-ref") == ""


@pytest.mark.parametrize("swapped", ["team", "team/proj", "team/proj/.git"])
async def test_path_safety_a_directory_swapped_for_a_symlink_between_captures_is_never_followed(
    workspaces: Workspaces, root: Path, swapped: str
):
    """Paths are looked up again on every request, whatever was remembered of them: a workspace (or a directory
    above it, or its .git) that becomes a symlink to outside the tenant after captures of it is refused."""
    outside = root.parent / "outside"
    outside.mkdir()
    git(outside, "init", "-q")
    (outside / "secret.txt").write_text("secret\n")
    await workspaces.prepare(TENANT, THREAD, "team/proj")
    ws = root / TENANT / "team" / "proj"
    (ws / "a.txt").write_text("a\n")
    await workspaces.capture(capture(0, None, workspace="team/proj"))
    await workspaces.capture(capture(1, 0, workspace="team/proj"))  # every cache warm

    moved = root / TENANT / "moved"
    (root / TENANT / swapped).rename(moved)
    (root / TENANT / swapped).symlink_to(outside / ".git" if swapped.endswith(".git") else outside)
    with pytest.raises(CheckpointError) as refused:
        await workspaces.capture(capture(2, 1, workspace="team/proj"))

    assert refused.value.code == "path_escape"
    assert git(outside, "for-each-ref") == "" and sorted(p.name for p in outside.iterdir()) == [".git", "secret.txt"]


async def test_an_orphaned_private_index_lock_does_not_block_captures_forever(workspaces: Workspaces, root: Path):
    await workspaces.prepare(TENANT, THREAD, "proj")
    ws = root / TENANT / "proj"
    (ws / "a.txt").write_text("1\n")
    lock = checkpoint_dir(ws) / "treadle" / "index.lock"
    lock.parent.mkdir(exist_ok=True)
    lock.write_bytes(b"")  # what a SIGKILLed `git add` leaves behind
    an_hour_ago = lock.stat().st_mtime - 3600
    os.utime(lock, (an_hour_ago, an_hour_ago))

    got = await workspaces.capture(capture(0, None))

    assert set(files_of(ws, got.commit)) == {"a.txt"}


async def test_capture_of_missing_workspace_fails_with_workspace_missing(workspaces: Workspaces):
    with pytest.raises(CheckpointError) as missing:
        await workspaces.capture(capture(0, None, workspace="nowhere"))
    assert missing.value.code == "workspace_missing"


async def test_concurrent_captures_on_one_workspace_are_serialised(workspaces: Workspaces, root: Path):
    """Unserialised, the captures would race on the private index lock and fail."""
    await workspaces.prepare(TENANT, THREAD, "proj")
    ws = root / TENANT / "proj"
    for i in range(20):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
    await workspaces.capture(capture(0, None))
    for i in range(20):
        (ws / f"f{i}.txt").write_text(f"{i} changed\n")

    got = await asyncio.gather(*(workspaces.capture(capture(n, 0)) for n in range(1, 17)))

    assert len({c.tree for c in got}) == 1 and not any(c.unchanged for c in got)
    assert all(len(c.files) == 20 for c in got)
    refs = ckpt(ws, "for-each-ref", "--format=%(refname)", f"refs/treadle/checkpoints/{THREAD}/root")
    assert len(refs.split()) == 17


async def test_unchanged_captures_stay_correct_after_the_user_packs_refs(workspaces: Workspaces, root: Path):
    """The in-process ref write steps aside for git when refs are packed (e.g. after `git gc`)."""
    await workspaces.prepare(TENANT, THREAD, "proj")
    ws = root / TENANT / "proj"
    (ws / "a.txt").write_text("same\n")
    await workspaces.capture(capture(0, None))
    first = await workspaces.capture(capture(1, 0))
    ckpt(ws, "pack-refs", "--all")
    second = await workspaces.capture(capture(2, 1))
    assert second.unchanged and ckpt(ws, "rev-parse", second.ref).strip() == first.commit
    # Unchanged ordinals write no ref of their own: they name the ref that holds their commit.
    assert first.ref == second.ref == f"refs/treadle/checkpoints/{THREAD}/root/0"
    assert ckpt(ws, "for-each-ref", "--format=%(refname)", "refs/treadle").split() == [first.ref]


async def test_checkpoints_taken_in_the_workspaces_own_git_dir_before_issue_16_are_adopted(
    workspaces: Workspaces, user_repo: Path
):
    """Before issue 16 a repository's checkpoints were hidden refs in its own .git: a thread goes on from them."""
    tree = git(user_repo, "write-tree").strip()
    legacy = git(user_repo, "commit-tree", tree, "-m", "treadle checkpoint thr_1 root #0 (baseline)").strip()
    git(user_repo, "update-ref", f"refs/treadle/checkpoints/{THREAD}/root/0", legacy)
    git(user_repo, "pack-refs", "--all")  # packed or loose, both are read
    git(user_repo, "update-ref", f"refs/treadle/checkpoints/{THREAD}/root/1", legacy)

    (user_repo / "later.txt").write_text("later\n")
    got = await workspaces.capture(capture(2, 1))

    assert got.previous_commit == legacy and ckpt(user_repo, "rev-parse", f"{got.commit}^").strip() == legacy
    assert "later.txt" in {f.path for f in got.files}
    await workspaces.restore(restore(legacy))
    assert not (user_repo / "later.txt").exists()
