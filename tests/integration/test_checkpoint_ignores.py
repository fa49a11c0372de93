"""Incremental captures ask a long-running `git check-ignore` which new files git ignores (ignores.py): it must
answer as `add -A` decides, and never from rules it read before they changed (requirements L10.2)."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.checkpoint_repos import TENANT, THREAD, capture, checkpoint_dir, ckpt, files_of
from tests.integration.checkpoint_repos import root as root  # noqa: F401  (a fixture)
from tests.integration.test_checkpoint_capture_paths import add_all_tree
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.repo import Repo


@pytest.fixture
def workspaces(root: Path) -> Iterator[Workspaces]:
    ws = Workspaces(root, root.parent / "state" / "shadow", max_file_bytes=0)
    yield ws
    ws.close()


def repo_of(workspaces: Workspaces) -> Repo:
    (ws,) = workspaces._workspaces.values()
    (repo,) = ws.repos.values()
    return repo


def checker_pid(workspaces: Workspaces) -> int | None:
    checker = repo_of(workspaces).ignores
    return checker._proc.pid if checker is not None else None


async def test_L10_2_new_files_are_ignored_as_add_all_ignores_them(workspaces: Workspaces, root: Path, tmp_path: Path):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    # Negations, an escaped "!", directory-only patterns, anchored patterns, a nested rule file.
    (ws / ".gitignore").write_text("*.log\n!keep.log\n\\!bang.txt\nbuild/\n/top.txt\nsub/**/deep.txt\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".gitignore").write_text("*.tmp\n!important.tmp\n")
    (ws / "sub" / "x").mkdir()
    (ws / "build").mkdir()
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))  # the watcher vouches from here on

    names = ["a.log", "keep.log", "!bang.txt", "bang.txt", "top.txt", "sub/top.txt", "sub/a.tmp",
             "sub/important.tmp", "sub/x/deep.txt", "sub/x/deep.log", "build/out.o", "sub/x/ok.py", "ok.txt"]  # fmt: skip
    for n, name in enumerate(names, 2):
        (ws / name).write_text(f"{name}\n")
        got = await workspaces.capture(capture(n, n - 1))
        assert got.tree == add_all_tree(ws, tmp_path), name
    assert set(files_of(ws, got.commit)) == {
        ".gitignore", "keep.log", "bang.txt", "sub/.gitignore", "sub/top.txt", "sub/important.tmp", "sub/x/ok.py",
        "ok.txt",
    }  # fmt: skip


async def test_L10_2_one_check_ignore_serves_many_captures_and_a_changed_rule_starts_a_new_one(
    workspaces: Workspaces, root: Path, tmp_path: Path
):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "out").mkdir()
    (ws / "out" / ".gitignore").write_text("*.log\n")
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))
    (ws / "out" / "run_2.txt").write_text("2\n")
    await workspaces.capture(capture(2, 1))
    pid = checker_pid(workspaces)
    assert pid is not None
    (ws / "out" / "run_3.txt").write_text("3\n")
    await workspaces.capture(capture(3, 2))
    assert checker_pid(workspaces) == pid  # no git process per capture

    (ws / ".gitignore").write_text("run_4.txt\n")  # a rule: the next capture is `add -A`, the git is stopped
    (ws / "out" / "run_4.txt").write_text("4\n")
    got = await workspaces.capture(capture(4, 3))
    assert got.tree == add_all_tree(ws, tmp_path) and "out/run_4.txt" not in files_of(ws, got.commit)
    assert checker_pid(workspaces) is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_L10_2_a_directory_made_again_with_its_own_rules_is_not_judged_by_the_old_ones(
    workspaces: Workspaces, root: Path, tmp_path: Path
):
    """git remembers the rules of the directories it was last asked about; a directory removed and made again
    (its rule file written before the watcher watches it) must be judged by a git that never saw the old one."""
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "d").mkdir()
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))
    (ws / "d" / "a.txt").write_text("a\n")
    await workspaces.capture(capture(2, 1))
    (ws / "d" / "b.txt").write_text("b\n")
    got = await workspaces.capture(capture(3, 2))
    assert {"d/a.txt", "d/b.txt"} <= set(files_of(ws, got.commit))

    shutil.rmtree(ws / "d")
    (ws / "d").mkdir()
    (ws / "d" / ".gitignore").write_text("*.txt\n")
    (ws / "d" / "c.txt").write_text("c\n")
    got = await workspaces.capture(capture(4, 3))
    assert got.tree == add_all_tree(ws, tmp_path)
    assert set(files_of(ws, got.commit)) == {"d/.gitignore"}


async def test_L10_2_a_check_ignore_that_died_costs_one_add_all_not_a_wrong_tree(
    workspaces: Workspaces, root: Path, tmp_path: Path
):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / ".gitignore").write_text("*.log\n")
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))
    (ws / "a.txt").write_text("a\n")
    await workspaces.capture(capture(2, 1))
    pid = checker_pid(workspaces)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    (ws / "b.txt").write_text("b\n")
    (ws / "b.log").write_text("b\n")
    got = await workspaces.capture(capture(3, 2))
    assert got.tree == add_all_tree(ws, tmp_path) and set(files_of(ws, got.commit)) == {".gitignore", "a.txt", "b.txt"}
    (ws / "c.txt").write_text("c\n")
    got = await workspaces.capture(capture(4, 3))
    assert got.tree == add_all_tree(ws, tmp_path)
    assert checker_pid(workspaces) not in (None, pid)


async def test_L10_2_rules_in_a_configured_excludes_file_are_never_remembered(workspaces: Workspaces, root: Path):
    """The watcher sees rule files in the worktree and the git dir, not a core.excludesFile: with one, every
    capture is `add -A`, so a file its old rules ignored is captured once they no longer do."""
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    rules = ws / "rules.txt"
    rules.write_text("*.a\n")
    await workspaces.capture(capture(0, None))
    ckpt(ws, "config", "core.excludesFile", str(rules))
    await workspaces.capture(capture(1, 0))
    (ws / "y.a").write_text("y\n")
    got = await workspaces.capture(capture(2, 1))
    assert set(files_of(ws, got.commit)) == {"rules.txt"}

    rules.write_text("*.b\n")
    got = await workspaces.capture(capture(3, 2))
    assert set(files_of(ws, got.commit)) == {"rules.txt", "y.a"}


async def test_L10_2_without_any_rule_file_no_git_is_asked_and_one_that_ignores_itself_still_counts(
    workspaces: Workspaces, root: Path, tmp_path: Path
):
    """No `.gitignore` anywhere and no exclude file: git ignores nothing, and new files are taken without asking it.
    A rule file is seen even where the tree cannot show it (one that ignores itself)."""
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "out").mkdir()
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))
    for n, name in enumerate(["out/run_2.txt", "a.log", "out/b.tmp"], 2):
        (ws / name).write_text(f"{name}\n")
        got = await workspaces.capture(capture(n, n - 1))
        assert got.tree == add_all_tree(ws, tmp_path) and name in files_of(ws, got.commit)
    assert checker_pid(workspaces) is None  # no `git check-ignore` started

    (ws / ".gitignore").write_text(".gitignore\n*.log\n")
    (ws / "b.log").write_text("b\n")
    got = await workspaces.capture(capture(5, 4))  # a rule file: `add -A`
    assert ".gitignore" not in files_of(ws, got.commit) and "b.log" not in files_of(ws, got.commit)
    (ws / "c.log").write_text("c\n")
    (ws / "c.txt").write_text("c\n")
    got = await workspaces.capture(capture(6, 5))
    assert got.tree == add_all_tree(ws, tmp_path)
    assert "c.txt" in files_of(ws, got.commit) and "c.log" not in files_of(ws, got.commit)


async def test_L10_2_rules_in_a_new_directory_or_the_git_dirs_exclude_file_count_from_the_first_capture(
    workspaces: Workspaces, root: Path, tmp_path: Path
):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "a.txt").write_text("a\n")
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))
    (ws / "new").mkdir()  # made, filled and given rules before any watch is on it
    (ws / "new" / ".gitignore").write_text("*.tmp\n")
    (ws / "new" / "x.tmp").write_text("x\n")
    (ws / "new" / "y.txt").write_text("y\n")
    got = await workspaces.capture(capture(2, 1))
    assert got.tree == add_all_tree(ws, tmp_path)
    assert set(files_of(ws, got.commit)) == {"a.txt", "new/.gitignore", "new/y.txt"}

    shutil.rmtree(ws / "new")
    got = await workspaces.capture(capture(3, 2))
    (checkpoint_dir(ws) / "info" / "exclude").write_text("*.ex\n")
    got = await workspaces.capture(capture(4, 3))
    (ws / "q.ex").write_text("q\n")
    (ws / "q.txt").write_text("q\n")
    got = await workspaces.capture(capture(5, 4))
    assert set(files_of(ws, got.commit)) == {"a.txt", "q.txt"}
