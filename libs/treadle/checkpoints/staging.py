"""The tree of a worktree now: the cheapest way that is sure to give what `git add -A` + `write-tree` would.

In order: nothing changed since the last capture (inotify, else the stat fingerprint of small
worktrees); only the paths the watcher saw changed (incremental.py, objects in one pack); else
`add -A` into the private index. Each fast path is armed *before* the work it vouches for, so a
change racing a capture shows next time: a fast path can only ever be too cautious.

Files over the size limit are left out on every path and listed in ``repo.too_large``. A repository below
the root (a directory holding a `.git` entry, file or directory) is left out whole and listed as a submodule:
git never opens it, because a `.git` file may name any repository the tenant's uid can read (a host's), whose
HEAD would become a gitlink in the tenant's diff; with no gitlink, `.gitmodules` is never read either.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from treadle.checkpoints import packs
from treadle.checkpoints.fingerprint import TooLarge, fingerprint
from treadle.checkpoints.ignores import IgnoreChecker
from treadle.checkpoints.incremental import (
    CONVERTING,
    EOL,
    Unsure,
    apply,
    attribute_sources,
    exclude_sources,
    plain_config,
)
from treadle.checkpoints.locks import clear_stale_lock
from treadle.checkpoints.odb import ObjectReader
from treadle.checkpoints.protocol import CheckpointError, Skipped
from treadle.checkpoints.repo import Repo, common_dir, user_head
from treadle.checkpoints.runner import NEUTRAL_ATTRIBUTES, GitRunner, run_in_thread
from treadle.checkpoints.stats import file_stats
from treadle.checkpoints.trees import Trees
from treadle.checkpoints.watcher import Inotify, Unwatchable, Watcher, local_filesystem

log = logging.getLogger(__name__)

INLINE_WALK_ENTRIES = 256
INLINE_PACK_BYTES = 64 << 10  # objects written on the event loop at most (compressing more takes a while)
MAX_IGNORE_CHECKERS = 64  # running `git check-ignore` children (one per recently captured worktree)


class Stager:
    def __init__(self, git: GitRunner, *, watch: bool = True, max_file_bytes: int = 0) -> None:
        self._git = git
        self._watch = watch  # inotify fast paths (watcher.py)
        self._inotify = Inotify()
        self.max_file_bytes = max_file_bytes  # 0: no limit
        self._checkers: OrderedDict[int, Repo] = OrderedDict()  # id -> repo with a running check-ignore, LRU first
        self._checkers_lock = threading.Lock()  # captures of different worktrees run on several threads

    def close(self) -> None:
        with self._checkers_lock:
            repos = list(self._checkers.values())
            self._checkers.clear()
        for repo in repos:
            repo.stop_ignores()
        self._inotify.close()

    async def tree(self, repo: Repo, prev_tree: str | None, *, whole: bool = False) -> str:
        """The worktree's tree. ``prev_tree``: unchanged from it is the cheap answer. ``whole``: by `add -A`,
        so that the private index is the worktree (restore checks out from it). Objects of the incremental
        path stay in ``repo.pending`` until :meth:`flush`."""
        watcher = None if whole else self._watcher_of(repo)
        if watcher is not None:
            if prev_tree is not None and watcher.tree == prev_tree and not watcher.changed():
                return prev_tree
            tree = await self._incremental(repo, watcher)
            if tree is not None:
                return tree
            try:
                await asyncio.to_thread(watcher.arm)  # only on the slow path, next to git processes
            except Unwatchable as exc:  # out of watches, too many directories: leave it to the other paths
                log.info("not watching %s: %s", repo.worktree, exc)
                watcher.close()
                repo.watcher, repo.watchable, watcher = None, False, None
            except OSError:  # a directory vanished mid-walk: not armed this time (tree stays None)
                watcher = None
        fp = None
        if watcher is None and repo.fingerprintable:
            try:
                fp = await self._fingerprint(repo)
            except TooLarge:  # walking it every time would cost more than `add -A` saves
                repo.fingerprintable = False
        if fp is not None and prev_tree is not None and repo.snapshot == (fp, prev_tree):
            return prev_tree
        repo.stop_ignores()  # `add -A` because something changed that may be an ignore rule
        await self.flush(repo)  # whatever a failed capture left: `add -A` may reuse (not rewrite) them
        tree = await self._add_all(repo)
        # A gitlink in the tree (a repository made between the walk and `add -A`, a submodule of the user's HEAD
        # that is not checked out): out of the index and the tree again. (Watched, the tree is parsed anyway.)
        if watcher is not None:
            await self._git.in_thread(self._load_trees, repo, tree)
            assert repo.trees is not None
            raced = set(repo.trees.gitlinks)
        else:
            repo.trees = None
            out = await self._git.check(repo, "ls-tree", "-r", "-z", tree)
            raced = {e.split(b"\t", 1)[1] for e in out.split(b"\0") if e.startswith(b"160000 ")}
        if raced:
            log.info("gitlinks left out of the checkpoint of %s: %s", repo.worktree, sorted(raced))
            await self._forget(repo, raced)
            tree = (await self._git.check(repo, "write-tree")).decode().strip()
            repo.nested |= raced
            repo.gitlinks |= raced
            if watcher is not None:
                await self._git.in_thread(self._load_trees, repo, tree)
        if repo.trees is not None:
            repo.trees.gitlinks = set(repo.nested)  # a change below one of them is left to `add -A` (Unsure)
        repo.snapshot = (fp, tree) if fp is not None else None
        if watcher is not None:
            watcher.tree = tree
        return tree

    def skipped(self, repo: Repo) -> list[Skipped]:
        """What the last tree left out: files over the size limit, and the repositories inside (submodules)."""
        out = [
            Skipped(path=p.decode("utf-8", "replace"), reason="too_large", size=n)
            for p, n in sorted(repo.too_large.items())
        ]
        out += [Skipped(path=p.decode("utf-8", "replace"), reason="submodule") for p in sorted(repo.gitlinks)]
        return out

    # -- the incremental path ----------------------------------------------------------------

    async def _incremental(self, repo: Repo, watcher: Watcher) -> str | None:
        trees = repo.trees
        if trees is None or trees.root != watcher.tree or not repo.plain:
            return None
        return await self._git.in_thread(self._apply, repo, watcher, trees)

    def _apply(self, repo: Repo, watcher: Watcher, trees: Trees) -> str | None:
        changes = watcher.take()
        if changes is None:
            return None
        if changes[1]:  # a new directory: rules in it may predate its watch, and git may remember its old self
            repo.stop_ignores()
        objects: dict[bytes, tuple[int, bytes]] = {}
        before = trees.root
        try:
            tree = apply(
                repo,
                trees,
                watcher,
                *changes,
                self.max_file_bytes,
                lambda paths: self._ignored(repo, watcher, paths),
                objects,
                (lambda paths: self._attributes(repo, paths)) if repo.attributes else None,
            )
        except (Unsure, Unwatchable, OSError, CheckpointError) as exc:  # the half-updated trees go; `add -A` decides
            log.debug("incremental capture of %s falls back to add -A: %r", repo.worktree, exc)
            repo.trees = None
            return None
        if not repo.pending:
            repo.pending_base = before
        repo.pending.update(objects)  # written with the commit, in one pack (see flush)
        watcher.tree = tree
        if repo.reader is None:
            repo.reader = ObjectReader((common_dir(repo.gitdir) or repo.gitdir) / "objects", repo.gitdir / "treadle")
        # With attributes, `diff` ones may make git count a text file as binary: git counts those.
        stats = None
        if not repo.attributes:
            try:
                stats = file_stats(trees.changes(), repo.reader.blob, objects)
            except (OSError, zlib.error):  # an unreadable old blob: git counts them
                stats = None
        repo.staged_stats = (before, tree, stats)
        return tree

    async def flush(self, repo: Repo, extra: dict[bytes, tuple[int, bytes]] | None = None) -> packs.Pack | None:
        """Write the objects the incremental path made (and ``extra``, e.g. the commit) as one pack; returns it
        (None: nothing to write). It holds every object the new tree has that ``repo.pending_base`` lacks."""
        if extra:
            repo.pending.update(extra)
        if not repo.pending:
            return None
        if sum(len(data) for _, data in repo.pending.values()) > INLINE_PACK_BYTES:
            return await self._git.in_thread(self._write_pending, repo)
        # A small pack (a run's few files and the trees above them) is written here: a hop to a worker thread
        # and back cost more CPU than writing it, and the GIL handoffs more again while other captures run.
        objects_dir, treadle_dir = _pack_dirs(repo)
        written = packs.write_pack(objects_dir, treadle_dir, repo.pending, owner=repo.owner)
        repo.pending, repo.pending_base = {}, None
        if packs.due(treadle_dir):  # every MERGE_AT captures: that one reads and writes them all
            await self._git.in_thread(packs.merge, objects_dir, treadle_dir, repo.owner)
        return written

    @staticmethod
    def _write_pending(repo: Repo) -> packs.Pack | None:
        objects_dir, treadle_dir = _pack_dirs(repo)
        written = packs.write_pack(objects_dir, treadle_dir, repo.pending, owner=repo.owner)
        repo.pending, repo.pending_base = {}, None
        packs.merge(objects_dir, treadle_dir, owner=repo.owner)
        return written

    def _ignored(self, repo: Repo, watcher: Watcher, paths: list[bytes]) -> set[bytes]:
        if not repo.excludes and not watcher.rule_files:
            # No rule anywhere, so git ignores nothing: asking it cost a pipe round trip to the check-ignore
            # child on every capture that adds a file. A rule file made since is an event: the next is `add -A`.
            return set()
        # --no-index: the private index is not kept up to date by this path; the trees say what is tracked.
        return self._checker(repo).ignored(paths, self._git.timeout)

    def _checker(self, repo: Repo) -> IgnoreChecker:
        checker = repo.ignores
        if checker is None:
            checker = repo.ignores = IgnoreChecker(repo)
        with self._checkers_lock:
            self._checkers[id(repo)] = repo
            self._checkers.move_to_end(id(repo))
            evicted = [self._checkers.popitem(last=False)[1] for _ in range(len(self._checkers) - MAX_IGNORE_CHECKERS)]
        for old in evicted:
            old.stop_ignores()
        return checker

    def _attributes(self, repo: Repo, paths: list[bytes]) -> dict[bytes, set[bytes]]:
        out = run_in_thread(
            repo,
            "check-attr",
            "-z",
            "--stdin",
            *(a.decode() for a in CONVERTING + EOL),
            input=b"\0".join(paths) + b"\0",
        )
        fields = out.split(b"\0")
        found: dict[bytes, set[bytes]] = {}
        for i in range(0, len(fields) - 2, 3):
            path, name, value = fields[i : i + 3]
            if value not in (b"unspecified", b"unset"):
                found.setdefault(path, set()).add(name)
        return found

    def _load_trees(self, repo: Repo, tree: str) -> None:
        # Read again on every slow path: a change to the config is one of the things that make the watcher ask for it.
        config = run_in_thread(repo, "config", "-z", "--list", ok=(0, 1))
        repo.plain = plain_config(config)
        if repo.trees is None or repo.trees.root != tree:
            repo.trees = Trees.parse(tree, run_in_thread(repo, "ls-tree", "-r", "-t", "-z", "--full-tree", tree))
        # The git dir's own info/attributes neutralises every converting attribute of the worktree: none applies.
        neutral = (repo.gitdir / "info" / "attributes").read_bytes() == NEUTRAL_ATTRIBUTES
        repo.attributes = not neutral and attribute_sources(config, repo.gitdir, repo.env.get("HOME"), repo.trees)
        repo.excludes = exclude_sources(repo.gitdir, repo.env)

    # -- the whole worktree ------------------------------------------------------------------

    async def _add_all(self, repo: Repo) -> str:
        if repo.lock_fd is None:  # another process may be using the index: only an old lock is surely orphaned
            clear_stale_lock(repo.index.with_name("index.lock"), older_than=2 * self._git.timeout)
        if repo.user_gitdir is not None and not repo.index.exists():
            # Start from the user's HEAD so tracked-but-ignored files are captured as git would. HEAD is read
            # in-process and the user's objects are an alternate for this one read-tree only: git never
            # opens the user's git dir as its own. `add -A` then re-hashes every entry into our git dir
            # (read-tree leaves no stat data), so no checkpoint depends on an object of the user's.
            # An unborn or unreadable HEAD: the private index simply starts empty.
            head = user_head(repo.user_gitdir)
            if head is not None:
                objects = (common_dir(repo.user_gitdir) or repo.user_gitdir) / "objects"
                seeding = dict(repo.env, GIT_ALTERNATE_OBJECT_DIRECTORIES=str(objects))
                await self._git.run(repo, "read-tree", head, env=seeding)
        too_large = await self._left_out(repo)
        if too_large or repo.nested:
            # Out of the index (a smaller version may be in it; a seeded gitlink, files of a directory that has
            # become a repository), then out of `add -A`'s reach: git never even looks into an excluded path.
            await self._forget(repo, set(too_large) | repo.nested)
            spec = b"\0".join([b".", *(b":(exclude,literal)" + p for p in sorted(too_large.keys() | repo.nested))])
            await self._git.check(
                repo, "add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul", input=spec + b"\0"
            )
        else:
            await self._git.check(repo, "add", "-A")
        return (await self._git.check(repo, "write-tree")).decode().strip()

    async def _forget(self, repo: Repo, paths: set[bytes]) -> None:
        """The index entries at or below ``paths`` removed (`ls-files` reads the index only, never the worktree)."""
        listed = (await self._git.check(repo, "ls-files", "-z")).split(b"\0")
        doomed = [p for p in listed if p and (p in paths or any(d in paths for d in _parents(p)))]
        if doomed:
            await self._git.check(
                repo, "update-index", "--force-remove", "-z", "--stdin", input=b"".join(p + b"\0" for p in doomed)
            )

    async def _left_out(self, repo: Repo) -> dict[bytes, int]:
        """Files over the limit that `add -A` would take (not ignored, or tracked), and, in ``repo.nested`` and
        (those not ignored) ``repo.gitlinks``, the repositories inside the worktree."""
        big, nested = await asyncio.to_thread(_walk, os.fsencode(repo.worktree), self.max_file_bytes)
        repo.too_large, repo.nested, repo.gitlinks = {}, nested, set()
        if big or nested:
            # With the private index: a tracked file is never ignored (git would update it).
            asked = b"".join(p + b"\0" for p in [*big, *sorted(nested)])
            rc, out, _ = await self._git.run(repo, "check-ignore", "-z", "--stdin", input=asked)
            ignored = set(out.split(b"\0")) if rc == 0 else set()
            repo.too_large = {p: n for p, n in big.items() if p not in ignored}
            repo.gitlinks = nested - ignored
        return repo.too_large

    # -- watchers and fingerprints -----------------------------------------------------------

    def _watcher_of(self, repo: Repo) -> Watcher | None:
        if not self._watch or repo.watchable is False:
            return None
        if repo.watcher is None:
            repo.watchable = local_filesystem(str(repo.worktree)) and local_filesystem(str(repo.gitdir))
            if not repo.watchable:
                return None
            dirs = [repo.gitdir, *filter(None, [common_dir(repo.gitdir)])]
            try:
                repo.watcher = self._inotify.watcher(
                    os.fsencode(repo.worktree), tuple(os.fsencode(p) for d in dirs for p in (d, d / "info"))
                )
            except OSError:
                repo.watchable = False
                return None
        return repo.watcher

    @staticmethod
    async def _fingerprint(repo: Repo) -> bytes | None:
        """Walk small workspaces on the loop (a thread hop costs more than the walk), large ones on a thread."""
        return (
            await asyncio.to_thread(fingerprint, repo) if repo.walk_entries > INLINE_WALK_ENTRIES else fingerprint(repo)
        )


def _pack_dirs(repo: Repo) -> tuple[Path, Path]:
    return (common_dir(repo.gitdir) or repo.gitdir) / "objects", repo.gitdir / "treadle"


def _parents(path: bytes) -> Iterator[bytes]:
    while b"/" in path:
        path = path.rpartition(b"/")[0]
        yield path


def _walk(top: bytes, limit: int) -> tuple[dict[bytes, int], set[bytes]]:
    """Regular files over ``limit`` (0: none) below ``top``, relative, and the directories that hold a
    repository (a `.git` entry of any kind, never read): those are not entered. Directories are opened one by
    one relative to their parent and never through a symlink (os.fwalk), so a directory swapped for a symlink
    mid-walk lists nothing outside the workspace."""
    out: dict[bytes, int] = {}
    nested: set[bytes] = set()
    for d, dirs, files, dirfd in os.fwalk(top, follow_symlinks=False):
        rel = os.path.relpath(d, top)
        rel = b"" if rel == b"." else rel
        if rel and (b".git" in dirs or b".git" in files):
            nested.add(rel)
            dirs[:] = []
            continue
        if not rel and b".git" in dirs:
            dirs.remove(b".git")
        if not limit:
            continue
        for name in files:
            if not rel and name == b".git":
                continue
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size > limit:
                out[rel + b"/" + name if rel else name] = st.st_size
    return out, nested
