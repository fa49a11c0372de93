"""The git dir a capture writes to: the workspace's own, or a Treadle shadow dir, and what is remembered about it."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from treadle.checkpoints.protocol import CheckpointError, FileStat
from treadle.checkpoints.watcher import Watcher

if TYPE_CHECKING:
    from treadle.checkpoints.ignores import IgnoreChecker
    from treadle.checkpoints.odb import ObjectReader
    from treadle.checkpoints.runner import Launch
    from treadle.checkpoints.trees import Trees

_TIPS_KEPT = 64  # per git dir; the previous checkpoint is almost always one of the last few


@dataclass(frozen=True, slots=True)
class Tip:
    commit: str
    tree: str
    holder: str | None = None  # None: the ref itself holds the commit; else the (earlier) ref that does

    @property
    def written(self) -> bool:
        return self.holder is None


@dataclass(frozen=True, slots=True)
class FreshPack:
    """A capture's pack, made on the incremental path: ``commit``, and every object its tree has that the tree
    of ``parent`` lacks. With ``parent`` in the archive, this pack is all the archive lacks of ``commit``."""

    commit: str
    parent: str
    data: bytes


@dataclass(slots=True)
class Repo:
    """The service-owned git dir (``<shadow_root>/<tenant>/<thread>.git``) serving one worktree."""

    worktree: Path
    gitdir: Path
    user_gitdir: Path | None  # the workspace's own repository (read only to seed the private index), if any
    env: dict[str, str]
    config_files: tuple[bytes, ...]  # git config/ignore/attributes files that shape `add -A`
    fingerprintable: bool
    launch: Launch | None = None  # how its git children start (as the tenant); None: as the service
    tips: dict[str, Tip] = field(default_factory=dict)
    snapshot: tuple[bytes, str] | None = None  # (fingerprint, tree) of the last `add -A`
    walk_entries: int = 1 << 30  # entries the last fingerprint walked (unknown: assume many)
    lock_fd: int | None = None  # flock of <gitdir>/treadle/lock, held around every capture and restore
    stamp_fd: int | None = None  # <gitdir>/treadle/stamp, the fingerprint's clock (see fingerprint.py)
    watcher: Watcher | None = None  # inotify on the worktree (see watcher.py)
    watchable: bool | None = None  # None: not decided yet
    trees: Trees | None = None  # the last tree, per directory, while the watcher vouches for it (incremental.py)
    plain: bool | None = None  # git's modes and object ids are those incremental.py computes; None: not read yet
    attributes: bool = True  # git attributes may apply (incremental captures then ask `git check-attr`)
    excludes: bool = True  # ignore rules may apply from outside the worktree (incremental.exclude_sources)
    gitlinks: set[bytes] = field(default_factory=set)  # repositories left out of the last tree, not ignored
    nested: set[bytes] = field(default_factory=set)  # every directory holding a repository (last `add -A` walk)
    too_large: dict[bytes, int] = field(default_factory=dict)  # left out of the last tree: path -> size
    # Per-file stats of the last incremental capture: (tree before, tree after, stats or None: ask git).
    staged_stats: tuple[str, str, list[FileStat] | None] | None = None
    reader: ObjectReader | None = None
    packed_refs: tuple[tuple[int, int, int], bool] | None = None  # (packed-refs version, holds the thread's refs)
    pending: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)  # objects of the last tree not yet written
    # The tree ``pending`` started from: the pending objects are every object of the new tree that it lacks.
    pending_base: str | None = None
    # The pack the last incremental capture wrote, while its capture is copied to the archive (durable.py).
    fresh: FreshPack | None = None
    ignores: IgnoreChecker | None = None  # a running `git check-ignore` for the incremental path (ignores.py)

    def close(self) -> None:
        for fd in (self.lock_fd, self.stamp_fd):
            if fd is not None:
                os.close(fd)
        self.lock_fd = self.stamp_fd = None
        self.stop_ignores()
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None

    def forget_tree(self) -> None:
        """The worktree was changed by us (a restore): no fast path may assume the last tree."""
        self.snapshot = None
        self.trees = None
        self.stop_ignores()
        if self.watcher is not None:
            self.watcher.tree = None

    def stop_ignores(self) -> None:
        """The ignore rules may have changed: the next question goes to a new `git check-ignore`."""
        checker, self.ignores = self.ignores, None
        if checker is not None:
            checker.close()

    @property
    def owner(self) -> tuple[int, int] | None:
        """Who the files of the git dir belong to (the tenant its git children run as); None: the service."""
        return self.launch.owner if self.launch is not None else None

    @property
    def index(self) -> Path:
        return self.gitdir / "treadle" / "index"

    def remember(self, ref: str, tip: Tip) -> None:
        self.tips.pop(ref, None)
        self.tips[ref] = tip
        while len(self.tips) > _TIPS_KEPT:
            del self.tips[next(iter(self.tips))]


def user_gitdir(worktree: Path, tenant_root: Path) -> Path | None:
    """The workspace's own git dir, if it has one (`.git` dir, or `.git` file of a linked worktree).

    The workspace is agent-controlled: a `.git` (or its `commondir`) pointing outside the tenant
    root would make us write refs into, and diff trees of, someone else's repository. ``worktree`` is
    resolved and inside ``tenant_root``.
    """
    dotgit = worktree / ".git"
    try:
        mode = os.lstat(dotgit).st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):  # a directory, no symlink, in a resolved worktree: its own resolved path
        gitdir = dotgit
        if common_dir(gitdir) is None:  # inside the worktree, which is inside the tenant root
            return gitdir
    elif not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
        return None
    elif dotgit.is_file():
        line = dotgit.read_text(errors="replace").strip()
        if not line.startswith("gitdir:"):
            return None
        gitdir = (worktree / line.removeprefix("gitdir:").strip()).resolve()
    elif dotgit.is_dir():
        gitdir = dotgit.resolve()
    else:
        return None
    if not gitdir.is_relative_to(tenant_root) or not (common_dir(gitdir) or gitdir).is_relative_to(tenant_root):
        raise CheckpointError("path_escape", "the workspace's .git points outside the tenant root")
    return gitdir if stat.S_ISDIR(mode) or gitdir.is_dir() else None  # a dangling .git file: no repository


def common_dir(gitdir: Path) -> Path | None:
    """Where a linked worktree's git dir keeps the shared config, objects and refs."""
    pointer = gitdir / "commondir"
    if not pointer.is_file():
        return None
    return (gitdir / pointer.read_text(errors="replace").strip()).resolve()


_HEX = re.compile(rb"[0-9a-f]{40}")
_BRANCH = re.compile(rb"refs/heads/[A-Za-z0-9._/+-]{1,200}")


def user_head(gitdir: Path) -> str | None:
    """The commit the user's HEAD names, read as data (no git process, no config, no symlink followed at
    the last step, nothing outside the user's git dir); None for an unborn or odd HEAD."""
    base = common_dir(gitdir) or gitdir
    head = _small(gitdir / "HEAD", gitdir)
    if head is None:
        return None
    if head.startswith(b"ref: "):
        name = head[5:].strip()
        if not _BRANCH.fullmatch(name) or b".." in name or b"//" in name:
            return None
        value = _small(base / os.fsdecode(name), base)
        if value is None:
            value = _packed(base, name)
    else:
        value = head
    value = (value or b"").strip()
    return value.decode() if _HEX.fullmatch(value) else None


def _small(path: Path, within: Path, limit: int = 1 << 20) -> bytes | None:
    try:
        if not path.resolve().is_relative_to(within.resolve()):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (OSError, RuntimeError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks) if size <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _packed(base: Path, name: bytes) -> bytes | None:
    data = _small(base / "packed-refs", base)
    for line in (data or b"").splitlines():
        oid, _, ref = line.partition(b" ")
        if ref == name:
            return oid
    return None


def checkpoint_gitdir(shadow_root: Path, tenant: str, thread: str, relative: Path) -> Path:
    """The service-owned git dir holding the checkpoints of the workspace ``relative`` (resolved, below the
    tenant root): one per workspace, every thread's refs in it, as they were in the workspace's own `.git`.
    A thread whose checkpoints are in a per-thread shadow dir (``<tenant>/<thread>.git``, an older layout for
    a workspace that is not a repository) keeps it."""
    legacy = shadow_root / tenant / f"{thread}.git"
    if legacy.is_dir():
        return legacy
    key = workspace_key(relative.as_posix())
    name = re.sub(r"[^A-Za-z0-9._-]", "_", relative.name)[:40] or "workspace"
    return shadow_root / tenant / "workspaces" / f"{name}-{key}.git"


def workspace_key(relative: str) -> str:
    return hashlib.sha256(os.fsencode(relative)).hexdigest()[:24]
