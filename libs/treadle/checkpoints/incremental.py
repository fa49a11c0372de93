"""Capturing a watched worktree from the paths its watcher saw change, without `add -A`.

`add -A` stats every file of the worktree and rewrites the whole private index; then `write-tree`,
`commit-tree` and every new object each cost a process or a file. Here only the changed paths are
read; the trees above them are re-hashed in :class:`~treadle.checkpoints.trees.Trees`, and the new
blobs, trees and the commit go into one pack (packs.py).

It gives the tree `add -A` + `write-tree` would give, for the cases it takes; everything else raises
:class:`Unsure` and the caller runs `add -A`: a change to ignore or attribute rules or git config
(the watcher reports those as "full"), a nested repository or submodule, a repository whose config or
attributes make `add -A` rewrite content or modes (:func:`plain_config`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from treadle.checkpoints.packs import BLOB, COMMIT, object_id
from treadle.checkpoints.repo import Repo, common_dir
from treadle.checkpoints.trees import Trees
from treadle.checkpoints.watcher import Watcher

_REGULAR, _EXECUTABLE, _SYMLINK = b"100644", b"100755", b"120000"


class Unsure(Exception):
    """Only a whole `add -A` can tell what this change makes of the tree."""


def plain_config(config: bytes) -> bool:
    """Does git give files here the modes this module gives them, and ids of the kind it computes, and are its
    ignore rules all in files the watcher watches?

    ``config`` is `git config -z --list` of the repository (the service's global config included)."""
    settings: dict[bytes, bytes] = {}
    for item in config.split(b"\0"):
        key, _, value = item.partition(b"\n")
        settings[key.lower()] = value.lower()
    if settings.get(b"core.filemode", b"true") in _FALSE or settings.get(b"core.symlinks", b"true") in _FALSE:
        return False
    if settings.get(b"core.ignorecase", b"false") not in _FALSE:
        return False
    if b"core.excludesfile" in settings:  # rules in a file the watcher does not watch (ignores.py asks a lasting git)
        return False
    return settings.get(b"extensions.objectformat", b"sha1") == b"sha1"


def attribute_sources(config: bytes, gitdir: Path, home: str | None, trees: Trees) -> bool:
    """May git attributes apply here (then every file read is checked with `git check-attr`)?"""
    if any(item.lower().startswith(b"core.attributesfile\n") for item in config.split(b"\0")):
        return True
    if (gitdir / "info" / "attributes").exists() or any(name == b".gitattributes" for name in trees.names()):
        return True
    xdg = os.environ.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else None)
    return bool(xdg and os.path.exists(os.path.join(xdg, "git", "attributes")))


def exclude_sources(gitdir: Path, env: dict[str, str]) -> bool:
    """May ignore rules apply from elsewhere than a `.gitignore` of the worktree: the git dir's `info/exclude`, or
    git's default global excludes file? (A configured core.excludesFile makes :func:`plain_config` false.)"""
    dirs = {gitdir, common_dir(gitdir) or gitdir}
    if any((d / "info" / "exclude").exists() for d in dirs):
        return True
    home = env.get("HOME")
    xdgs = {
        env.get("XDG_CONFIG_HOME"),
        os.environ.get("XDG_CONFIG_HOME"),
        os.path.join(home, ".config") if home else None,
    }
    return any(os.path.lexists(os.path.join(x, "git", "ignore")) for x in xdgs if x)


# Attributes under which `git add` stores other bytes than the file's (always, or when it has CRs).
CONVERTING = (b"filter", b"ident", b"working-tree-encoding")
EOL = (b"text", b"eol", b"crlf")
_FALSE = (b"false", b"no", b"off", b"0")


def apply(
    repo: Repo,
    trees: Trees,
    watcher: Watcher,
    changed: set[bytes],
    new_dirs: set[bytes],
    limit: int,
    ignored: Callable[[list[bytes]], set[bytes]],
    out: dict[bytes, tuple[int, bytes]],
    attributes: Callable[[list[bytes]], dict[bytes, set[bytes]]] | None = None,
) -> str:
    """Bring ``trees`` up to date with the ``changed`` paths; new objects go to ``out``; returns the tree id.

    ``ignored`` answers which of some untracked paths git ignores; ``attributes`` (where attributes may
    apply) which of :data:`CONVERTING` and :data:`EOL` are set for some paths. Files over ``limit`` bytes
    (0: no limit) are left out and listed in ``repo.too_large``. On :class:`Unsure` ``trees`` is
    half-updated: drop it.
    """
    trees.journal.clear()
    dirs = _Beneath(os.fsencode(repo.worktree))
    try:
        found = _changed_files(repo, trees, watcher, changed, new_dirs, dirs)
        untracked = [p for p, _ in found if trees.get(p) is None]
        skip = ignored(untracked) if untracked else set()
        attrs = attributes([p for p, _ in found if p not in skip]) if attributes and found else {}
        for path, st in found:
            if path in skip:
                continue
            set_here = attrs.get(path, ())
            if any(a in set_here for a in CONVERTING):
                raise Unsure(path)
            if limit and stat.S_ISREG(st.st_mode) and st.st_size > limit:
                _forget(repo, trees, path)
                repo.too_large[path] = st.st_size
                continue
            try:
                data, mode = _read(dirs, path, st)
            except (FileNotFoundError, NotADirectoryError):  # gone since: its event is queued for next time
                _forget(repo, trees, path)
                continue
            except IsADirectoryError:
                raise Unsure(path) from None
            if b"\r" in data and any(a in set_here for a in EOL) and mode != _SYMLINK:
                raise Unsure(path)  # git would normalise its line endings
            oid = object_id(BLOB, data)
            if trees.get(path) != (mode, oid):
                out[oid] = (BLOB, data)
                trees.set(path, mode, oid)
            repo.too_large.pop(path, None)
    finally:
        dirs.close()
    return trees.write(out)


def commit_object(tree: str, parent: str | None, message: str, who: tuple[str, str]) -> bytes:
    """The commit `git commit-tree tree [-p parent] -m message` makes with the fixed identity and date."""
    name, email = who
    person = f"{name} <{email}> 0 +0000"
    head = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "") + f"author {person}\ncommitter {person}\n"
    return (head + "\n" + message + "\n").encode()


def commit_id(data: bytes) -> bytes:
    return object_id(COMMIT, data)


def _forget(repo: Repo, trees: Trees, path: bytes) -> None:
    trees.remove(path)
    repo.too_large.pop(path, None)
    prefix = path + b"/"
    for p in [p for p in repo.too_large if p.startswith(prefix)]:
        del repo.too_large[p]


def _changed_files(
    repo: Repo, trees: Trees, watcher: Watcher, changed: set[bytes], new_dirs: set[bytes], dirs: _Beneath
) -> list[tuple[bytes, os.stat_result]]:
    """The files (and symlinks) at or below the changed paths; what is gone is removed from ``trees``."""
    found: list[tuple[bytes, os.stat_result]] = []
    for path in sorted(changed):
        if b".git" in path.split(b"/") or trees.in_gitlink(path):
            raise Unsure(path)
        head, _, name = path.rpartition(b"/")
        where = dirs.fd(head)
        try:
            if where is None:  # its directory is gone, or is a symlink now: nothing of it is git's any more
                raise FileNotFoundError(path)
            st = os.stat(name, dir_fd=where, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            _forget(repo, trees, path)
            continue
        if stat.S_ISDIR(st.st_mode):
            if path in new_dirs:
                watcher.watch_tree(path)  # before reading it: what is written from now on is reported
            inside = _walk(dirs, path)
            present = {p for p, _ in inside}
            for gone in [p for p in trees.files_under(path) if p not in present]:
                _forget(repo, trees, gone)
            found += inside
        elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            found.append((path, st))
        else:  # sockets, fifos, devices: git stores none
            _forget(repo, trees, path)
    return found


class _Beneath:
    """Directories below the worktree, opened one component at a time without following symlinks, so that a
    directory swapped for a symlink (to outside the workspace, say) is never read through — as git never does."""

    _KEPT = 256  # open directories at most; more are opened again when needed

    def __init__(self, top: bytes) -> None:
        self._top = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._fds: dict[bytes, int] = {}

    def fd(self, rel: bytes) -> int | None:
        if not rel:
            return self._top
        fd = self._fds.get(rel)
        if fd is not None:
            return fd if fd >= 0 else None
        head, _, name = rel.rpartition(b"/")
        parent = self.fd(head)
        fd = -1
        if parent is not None:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            except OSError:  # gone, not a directory, or a symlink (ELOOP)
                fd = -1
        if len(self._fds) >= self._KEPT:
            self._close_all()
        self._fds[rel] = fd
        return fd if fd >= 0 else None

    def _close_all(self) -> None:
        for fd in self._fds.values():
            if fd >= 0:
                os.close(fd)
        self._fds.clear()

    def close(self) -> None:
        self._close_all()
        os.close(self._top)


def _walk(dirs: _Beneath, rel: bytes) -> list[tuple[bytes, os.stat_result]]:
    out = []
    stack = [rel]
    while stack:
        d = stack.pop()
        where = dirs.fd(d)
        if where is None:  # gone since: its removal is queued for next time
            continue
        with os.scandir(where) as it:
            for e in it:
                if e.name == ".git":  # a repository inside: git adds it as a submodule pointer
                    raise Unsure(d)
                st = e.stat(follow_symlinks=False)
                path = d + b"/" + os.fsencode(e.name)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(path)
                elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    out.append((path, st))
    return out


def _read(dirs: _Beneath, path: bytes, st: os.stat_result) -> tuple[bytes, bytes]:
    head, _, name = path.rpartition(b"/")
    where = dirs.fd(head)
    if where is None:
        raise FileNotFoundError(path)
    if stat.S_ISLNK(st.st_mode):
        return os.fsencode(os.readlink(name, dir_fd=where)), _SYMLINK
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=where)
    except OSError as e:
        if e.errno == errno.ELOOP:  # it became a symlink since the stat: its events are queued
            raise FileNotFoundError(path) from None
        raise
    try:
        now = os.fstat(fd)
        if stat.S_ISDIR(now.st_mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(now.st_mode):  # a fifo or socket now
            raise FileNotFoundError(path)
        chunks = []
        while chunk := os.read(fd, max(now.st_size, 1 << 16)):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks), (_EXECUTABLE if now.st_mode & stat.S_IXUSR else _REGULAR)
