"""The incremental capture path, the file size limit and submodules, on real git repos in tmp_path
(requirements L10.2; issue 4 "Cost", items 1 and 6)."""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.checkpoint_repos import (
    TENANT,
    THREAD,
    capture,
    checkpoint_dir,
    ckpt,
    files_of,
    repository_with_submodule,
    restore,
    root,  # noqa: F401  (a fixture)
    snapshot,
)
from treadle.checkpoints import packs
from treadle.checkpoints.diffs import parse_diff
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.protocol import FileStat, Skipped
from treadle.checkpoints.runner import NEUTRAL_ATTRIBUTES
from treadle.checkpoints.stats import _line_changes


@pytest.fixture
def workspaces(root: Path) -> Iterator[Workspaces]:
    ws = Workspaces(root, root.parent / "state" / "shadow", max_file_bytes=1000)
    yield ws
    ws.close()


def add_all_tree(ws: Path, tmp: Path) -> str:
    """What plain `git add -A` + `write-tree` make of the worktree now, in a throwaway index and git dir whose
    info/attributes is the service's (raw bytes: no attribute of the worktree transforms anything)."""
    check = tmp / "check.git"
    if not check.exists():
        subprocess.run(["git", "init", "-q", "--bare", "--template=", str(check)], check=True)
        (check / "info").mkdir()
        (check / "info" / "attributes").write_bytes(NEUTRAL_ATTRIBUTES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_INDEX_FILE=str(tmp / "check-index"), GIT_CONFIG_NOSYSTEM="1", GIT_DIR=str(check), GIT_WORK_TREE=str(ws)
    )

    def run(*a: str) -> bytes:
        git = ["git", "-c", "core.autocrlf=false", *a]
        return subprocess.run(git, cwd=ws, env=env, capture_output=True, check=True).stdout

    (tmp / "check-index").unlink(missing_ok=True)
    run("add", "-A")
    return run("write-tree").decode().strip()


def private_index(ws: Path) -> int:
    return (checkpoint_dir(ws) / "treadle" / "index").stat().st_mtime_ns


async def test_L10_2_a_small_change_is_captured_without_add_all_and_gives_the_tree_git_would(
    workspaces: Workspaces, root: Path, tmp_path: Path
):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / ".gitignore").write_text("*.log\nbuild/\n")
    (ws / "src").mkdir()
    for i in range(20):
        (ws / "src" / f"m{i}.py").write_text(f"m = {i}\n")
    await workspaces.capture(capture(0, None))
    base = await workspaces.capture(capture(1, 0))  # the slow path ran once: from here on the watcher vouches
    index_before = private_index(ws)

    (ws / "src" / "m3.py").write_text("m = 3\nmore = True\n")
    (ws / "src" / "m4.py").unlink()
    (ws / "src" / "m5.py").chmod(0o755)
    (ws / "src" / "deep" / "er").mkdir(parents=True)
    (ws / "src" / "deep" / "er" / "new.py").write_text("new = 1\n")
    (ws / "link").symlink_to("src/m1.py")
    (ws / "debug.log").write_text("ignored\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"\0ignored")
    got = await workspaces.capture(capture(2, 1))

    assert private_index(ws) == index_before  # no `add -A`: the private index was not rewritten
    assert got.tree == add_all_tree(ws, tmp_path) != base.tree
    assert ckpt(ws, "rev-parse", f"{got.ref}^").strip() == base.commit
    assert sorted((f.path, f.change, f.added, f.removed) for f in got.files) == [
        ("link", "added", 1, 0),
        ("src/deep/er/new.py", "added", 1, 0),
        ("src/m3.py", "modified", 1, 0),
        ("src/m4.py", "deleted", 0, 1),
        ("src/m5.py", "modified", 0, 0),
    ]
    assert ckpt(ws, "fsck", "--no-progress", "--strict") == ""
    # The in-process commit is the one `git commit-tree` makes of the same tree, parent and message.
    message = ckpt(ws, "log", "-1", "--format=%B", got.commit).strip()
    env_commit = subprocess.run(
        ["git", "commit-tree", got.tree, "-p", base.commit, "-m", message],
        cwd=ws,
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "GIT_DIR": str(checkpoint_dir(ws)),
            "GIT_AUTHOR_NAME": "Treadle",
            "GIT_AUTHOR_EMAIL": "treadle@localhost",
            "GIT_AUTHOR_DATE": "@0 +0000",
            "GIT_COMMITTER_NAME": "Treadle",
            "GIT_COMMITTER_EMAIL": "treadle@localhost",
            "GIT_COMMITTER_DATE": "@0 +0000",
        },
    )
    assert env_commit.stdout.strip() == got.commit


def _mutate(ws: Path, rng: random.Random, step: int) -> None:
    files = [p for p in ws.rglob("*") if ".git" not in p.parts and (p.is_file() or p.is_symlink())]
    dirs = [p for p in ws.rglob("*") if ".git" not in p.parts and p.is_dir() and not p.is_symlink()]
    for _ in range(rng.randint(1, 6)):
        op = rng.choice(
            [
                "write",
                "write",
                "edit",
                "edit",
                "new",
                "newdir",
                "delete",
                "chmod",
                "link",
                "rmdir",
                "file_to_dir",
                "ignored",
                "rename",
                "touch",
                "big",
                "binary",
                "no_eol",
            ]
        )
        if op == "edit" and files:
            p = rng.choice(files)
            if p.is_file() and not p.is_symlink():
                lines = p.read_bytes().split(b"\n") + [b"line %d" % i for i in range(rng.randint(0, 30))]
                for _ in range(rng.randint(1, 8)):
                    if not lines:
                        break
                    at = rng.randrange(len(lines))
                    edit = rng.choice(["insert", "pop", "set"])
                    if edit == "insert":
                        lines.insert(at, b"ins %d" % step)
                    elif edit == "pop":
                        lines.pop(at)
                    else:
                        lines[at] = b"set %d" % rng.randint(0, 3)
                p.write_bytes(b"\n".join(lines))
        elif op == "binary" and files:
            p = rng.choice(files)
            if p.is_file() and not p.is_symlink():
                p.write_bytes(b"\0bin" + bytes([step]))
        elif op == "no_eol" and not (ws / f"n{step % 3}.txt").is_dir():
            (ws / f"n{step % 3}.txt").write_bytes(b"a\nb" if step % 2 else b"a\nb\n")
        elif op == "write" and files:
            p = rng.choice(files)
            if p.is_file() and not p.is_symlink():
                p.write_text(f"step {step}\n" * rng.randint(1, 5))
        elif op == "new":
            base = rng.choice([ws, *dirs])
            (base / f"f{step}_{rng.randint(0, 999)}.txt").write_text(f"new {step}\n")
        elif op == "newdir":
            d = rng.choice([ws, *dirs]) / f"d{step}" / "inner"
            d.mkdir(parents=True, exist_ok=True)
            (d / "x.txt").write_text("x\n")
        elif op == "delete" and files:
            rng.choice(files).unlink()
        elif op == "chmod" and files:
            p = rng.choice(files)
            if not p.is_symlink():
                p.chmod(rng.choice([0o644, 0o755]))
        elif op == "link" and not os.path.lexists(ws / f"l{step}"):
            (ws / f"l{step}").symlink_to(f"target{step}")
        elif op == "rmdir" and dirs:
            d = rng.choice(dirs)
            subprocess.run(["rm", "-rf", str(d)], check=True)
        elif op == "file_to_dir" and files:
            p = rng.choice(files)
            p.unlink()
            p.mkdir()
            (p / "now_a_dir.txt").write_text("d\n")
        elif op == "ignored":
            (ws / f"i{step}.log").write_text("ignored\n")
        elif op == "rename" and files:
            p = rng.choice(files)
            p.rename(p.with_name(p.name + ".moved"))
        elif op == "touch" and files:
            p = rng.choice(files)
            if not p.is_symlink():
                os.utime(p)
        elif op == "big":
            (ws / f"big{step}.bin").write_bytes(b"b" * 2000)
        files = [p for p in ws.rglob("*") if ".git" not in p.parts and (p.is_file() or p.is_symlink())]
        dirs = [p for p in ws.rglob("*") if ".git" not in p.parts and p.is_dir() and not p.is_symlink()]


@pytest.mark.parametrize(("seed", "rules"), [(s, True) for s in range(6)] + [(s, False) for s in range(3)])
async def test_L10_2_incremental_captures_always_equal_a_fresh_add_all(
    root: Path, tmp_path: Path, seed: int, rules: bool
):
    """Random edits of every kind (git add -A's own tree as the oracle, the size limit off for the oracle's sake);
    without a rule file, new files are taken without asking git which it ignores."""
    workspaces = Workspaces(root, root.parent / "state" / "shadow", max_file_bytes=0)
    try:
        ws = root / TENANT / "proj"
        await workspaces.prepare(TENANT, THREAD, "proj")
        if rules:
            (ws / ".gitignore").write_text("*.log\n")
        (ws / "a").mkdir()
        (ws / "a" / "one.txt").write_text("1\n")
        await workspaces.capture(capture(0, None))
        rng = random.Random(seed)
        prev = await workspaces.capture(capture(1, 0))
        for n in range(2, 30):
            _mutate(ws, rng, n)
            got = await workspaces.capture(capture(n, n - 1))
            assert got.tree == add_all_tree(ws, tmp_path), (seed, n)
            # The per-file stats (counted in-process where it can) are git's.
            stats = parse_diff(
                subprocess.run(
                    ["git", "diff-tree", "-r", "-z", "-M", "--raw", "--numstat", prev.tree, got.tree],
                    env=dict(os.environ, GIT_DIR=str(checkpoint_dir(ws))),
                    cwd=ws,
                    capture_output=True,
                    check=True,
                ).stdout
            )
            assert got.files == stats, (seed, n)
            prev = got
        assert ckpt(ws, "fsck", "--no-progress", "--strict") == ""
    finally:
        workspaces.close()


async def test_packs_of_incremental_captures_are_merged_and_stay_readable(workspaces: Workspaces, root: Path):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "f.txt").write_text("0\n")
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))
    commits = []
    for n in range(2, 2 + packs.MERGE_AT + 4):
        (ws / "f.txt").write_text(f"{n}\n")
        commits.append((n, (await workspaces.capture(capture(n, n - 1))).commit))

    pack_dir = checkpoint_dir(ws) / "objects" / "pack"
    assert 0 < len(list(pack_dir.glob("*.idx"))) < packs.MERGE_AT
    for n, commit in commits:
        assert ckpt(ws, "show", f"{commit}:f.txt") == f"{n}\n"
    assert ckpt(ws, "fsck", "--no-progress", "--strict") == ""


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "add_all"])
async def test_files_over_the_size_limit_are_left_out_and_reported(root: Path, watch: bool):
    workspaces = Workspaces(root, root.parent / "state" / "shadow", watch=watch, max_file_bytes=1000)
    try:
        ws = root / TENANT / "proj"
        await workspaces.prepare(TENANT, THREAD, "proj")
        (ws / "small.txt").write_text("s\n")
        (ws / "data.bin").write_bytes(b"d" * 10)
        c0 = await workspaces.capture(capture(0, None))
        c1 = await workspaces.capture(capture(1, 0))
        assert c0.skipped == c1.skipped == []

        (ws / "data.bin").write_bytes(b"D" * 5000)  # grew over the limit
        (ws / "huge.iso").write_bytes(b"h" * 4000)
        c2 = await workspaces.capture(capture(2, 1))
        assert set(files_of(ws, c2.commit)) == {"small.txt"}
        assert c2.skipped == [
            Skipped(path="data.bin", reason="too_large", size=5000),
            Skipped(path="huge.iso", reason="too_large", size=4000),
        ]
        assert [(f.path, f.change) for f in c2.files] == [("data.bin", "deleted")]

        (ws / "data.bin").write_bytes(b"d" * 20)  # back under it
        c3 = await workspaces.capture(capture(3, 2))
        assert set(files_of(ws, c3.commit)) == {"small.txt", "data.bin"}
        assert c3.skipped == [Skipped(path="huge.iso", reason="too_large", size=4000)]
    finally:
        workspaces.close()


async def test_ignored_large_files_are_not_reported(workspaces: Workspaces, root: Path):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / ".gitignore").write_text("*.o\n")
    (ws / "big.o").write_bytes(b"o" * 5000)
    got = await workspaces.capture(capture(0, None))
    assert got.skipped == [] and set(files_of(ws, got.commit)) == {".gitignore"}


async def test_L10_5_a_restore_never_deletes_or_overwrites_a_file_it_did_not_capture(
    workspaces: Workspaces, root: Path
):
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "model.bin").write_bytes(b"v1")
    (ws / "a.txt").write_text("1\n")
    c0 = await workspaces.capture(capture(0, None))
    (ws / "a.txt").write_text("2\n")
    (ws / "model.bin").write_bytes(b"v2" * 1000)  # over the limit: not captured from here on
    (ws / "weights.bin").write_bytes(b"w" * 3000)  # new and over it
    c1 = await workspaces.capture(capture(1, 0))
    assert {s.path for s in c1.skipped} == {"model.bin", "weights.bin"}

    done = await workspaces.restore(restore(c0.commit))

    assert (ws / "a.txt").read_text() == "1\n"
    assert (ws / "model.bin").read_bytes() == b"v2" * 1000  # not the checkpoint's v1: v2 exists nowhere else
    assert (ws / "weights.bin").read_bytes() == b"w" * 3000
    assert [(s.path, s.reason, s.size) for s in done.skipped] == [
        ("model.bin", "too_large", 2000),
        ("weights.bin", "too_large", 3000),
    ]


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "add_all"])
async def test_submodules_are_reported_as_skipped_by_captures(root: Path, watch: bool):
    workspaces = Workspaces(root, root.parent / "state" / "shadow", watch=watch)
    ws = repository_with_submodule(root)
    try:
        c0 = await workspaces.capture(capture(0, None))
        (ws / "vendor" / "lib" / "l.txt").write_text("changed inside the submodule\n")
        (ws / "top.txt").write_text("top\n")
        c1 = await workspaces.capture(capture(1, 0))
    finally:
        workspaces.close()

    for got in (c0, c1):
        assert got.skipped == [Skipped(path="vendor/lib", reason="submodule")]
    assert c1.files == [FileStat(path="top.txt", change="added", added=1, removed=0)]
    assert snapshot(ws / "vendor" / "lib")["l.txt"] == ("0o0", b"changed inside the submodule\n")


@pytest.mark.parametrize("restart", [False, True], ids=["same_service", "restarted"])
async def test_L10_2_leftovers_of_a_capture_killed_mid_write_do_not_break_the_next(
    workspaces: Workspaces, root: Path, restart: bool
):
    """What a kill -9 can leave of an incremental capture: a half-written pack, a pack without its index, a
    locked ref. The next capture (a restarted service) still writes its checkpoint, and git finds nothing wrong."""
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "f.txt").write_text("0\n")
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))
    pack_dir = checkpoint_dir(ws) / "objects" / "pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    (pack_dir / "tmp_pack-deadbeef.pack_123").write_bytes(b"PACK\0\0\0\2")
    (pack_dir / f"pack-{'ab' * 20}.pack").write_bytes(b"PACK\0\0\0\2\0\0\0\0")
    lock = checkpoint_dir(ws) / f"refs/treadle/checkpoints/{THREAD}/root/2.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")

    service = Workspaces(root, root.parent / "state" / "shadow") if restart else workspaces
    try:
        (ws / "f.txt").write_text("2\n")
        got = await service.capture(capture(2, 1))
    finally:
        if restart:
            service.close()

    assert ckpt(ws, "show", f"{got.ref}:f.txt") == "2\n"
    assert not lock.exists()
    assert ckpt(ws, "fsck", "--no-progress", "--strict") == ""


async def test_L10_2_attributes_that_would_make_git_store_other_bytes_are_neutralised(
    workspaces: Workspaces, root: Path, tmp_path: Path
):
    """A checkpoint holds the raw bytes: the worktree's `.gitattributes` (the agent's) transforms nothing."""
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / ".gitattributes").write_text("*.txt text\n*.id ident\n")
    (ws / "plain.txt").write_text("1\n")
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))
    index_before = private_index(ws)

    (ws / "plain.txt").write_text("2\n")  # no CR: stored as it is, still the incremental path
    c2 = await workspaces.capture(capture(2, 1))
    assert private_index(ws) == index_before and c2.tree == add_all_tree(ws, tmp_path)

    (ws / "crlf.txt").write_bytes(b"a\r\nb\r\n")  # `text` would store it with LF: stored as it is
    c3 = await workspaces.capture(capture(3, 2))
    assert c3.tree == add_all_tree(ws, tmp_path)
    assert ckpt(ws, "rev-parse", f"{c3.commit}:crlf.txt").strip() == packs.object_id(packs.BLOB, b"a\r\nb\r\n").hex()

    (ws / "v.id").write_text("$Id: something $\n")  # `ident` would collapse it to $Id$: stored as it is
    c4 = await workspaces.capture(capture(4, 3))
    assert c4.tree == add_all_tree(ws, tmp_path)
    assert ckpt(ws, "cat-file", "-p", f"{c4.commit}:v.id") == "$Id: something $\n"


async def test_path_safety_a_directory_swapped_for_a_symlink_is_never_read_through(
    workspaces: Workspaces, root: Path, tmp_path: Path
):
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("secret\n")  # the same name as the file the workspace had
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "sub").mkdir()
    (ws / "sub" / "f.txt").write_text("mine\n")
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))

    (ws / "sub" / "f.txt").write_text("mine, edited\n")  # reported as sub/f.txt...
    (ws / "sub" / "f.txt").unlink()
    (ws / "sub").rmdir()
    (ws / "sub").symlink_to(outside, target_is_directory=True)  # ...which now leads outside
    got = await workspaces.capture(capture(2, 1))

    assert got.tree == add_all_tree(ws, tmp_path)
    assert ckpt(ws, "ls-tree", "-r", got.commit).split()[:2] == ["120000", "blob"]
    assert "secret" not in ckpt(ws, "log", "-p", "--all", "--format=")


async def test_L10_2_line_counts_are_gits_where_its_diff_is_not_minimal(workspaces: Workspaces, root: Path):
    """xdiff drops a line repeated in the other file when lines without a match surround it: the two "step" lines
    a minimal diff keeps are counted as removed and added again by `git diff --numstat`, and so here."""
    ws = root / TENANT / "proj"
    await workspaces.prepare(TENANT, THREAD, "proj")
    (ws / "f.txt").write_bytes(b"step 22\n" * 4)
    await workspaces.capture(capture(0, None))
    await workspaces.capture(capture(1, 0))
    (ws / "f.txt").write_bytes(
        b"ins\nstep 22\nins\nstep 22\nset\nins\nset\n\n" + b"".join(b"line %d\n" % i for i in range(7))
    )
    got = await workspaces.capture(capture(2, 1))
    assert [(f.path, f.added, f.removed) for f in got.files] == [("f.txt", 15, 4)]


def test_L10_2_line_counts_equal_git_numstat_on_repetitive_edits(tmp_path: Path):
    rng = random.Random(7)
    for _ in range(150):
        rep = [b"r%d" % i for i in range(rng.randint(1, 3))]
        a = [rng.choice(rep) if rng.random() < 0.7 else b"u%d" % rng.randint(0, 9) for _ in range(rng.randint(1, 60))]
        b = []
        for line in a:
            if rng.random() < 0.3:
                continue
            b.append(line)
            while rng.random() < 0.4:
                b.append(b"n%d" % rng.randint(0, 99) if rng.random() < 0.7 else rng.choice(rep))
        old, new = b"\n".join(a) + b"\n", b"\n".join(b) + b"\n"
        (tmp_path / "old").write_bytes(old)
        (tmp_path / "new").write_bytes(new)
        out = subprocess.run(
            ["git", "diff", "--no-index", "--numstat", "old", "new"], cwd=tmp_path, capture_output=True
        ).stdout.split()
        expected = (int(out[1]), int(out[0])) if out else (0, 0)
        assert _line_changes(old, new) in (expected, None), (old, new)
