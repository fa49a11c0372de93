"""inotify watches on worktrees, so an unchanged workspace is recognised without walking it.

A capture that runs `add -A` first *arms* its worktree's watcher: the events queued so far are dropped
(that capture covers them) and every directory below the worktree, and the git dirs whose files shape
`add -A` (config, info/exclude), is watched. From then on any write, create, delete, rename or attribute
change in them queues an event. The next capture finds nothing queued for its worktree — one
non-blocking read — and knows the tree is the one `add -A` produced last time. When something was
queued, the watcher also says *which* paths changed, so a capture can re-read just those (see
incremental.py) instead of running `add -A` over the whole worktree.

Anything doubtful counts as a change: a queue overflow, a watch that could not be added (the caller
then stops watching that worktree), a filesystem inotify does not see every writer of (network
filesystems: only local ones are watched). Not seen, as with the stat fingerprint: writes through a
shared memory mapping never followed by write() or close, and the service's own global git config.

One inotify instance serves every worktree of a process (instances are a small per-user budget).
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_IGNORED = 0x400, 0x800, 0x8000
_IN_ONLYDIR, _IN_DONT_FOLLOW, _IN_ISDIR = 0x01000000, 0x02000000, 0x40000000
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
MAX_DIRECTORIES = 4096  # beyond this a worktree is left to `add -A` (and the watch budget to others)
# Changes after which the watcher cannot say which paths `add -A` would see differently: rules
# (ignore, attributes, config) and git dirs (top-level or nested repositories).
_RULE_FILES = frozenset({b".git", b".gitignore", b".gitattributes"})
_GIT_DIR_FILES = frozenset({b"config", b"config.worktree", b"info", b"exclude", b"attributes", b"commondir"})
LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs"})

_libc = ctypes.CDLL(None, use_errno=True)


class Unwatchable(OSError):
    pass


def local_filesystem(path: str) -> bool:
    """Is ``path`` on a filesystem whose every change inotify reports (a local one)?"""
    best, fstype = "", ""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                mount = fields[4].replace("\\040", " ")
                sep = fields.index("-")
                if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
                    best, fstype = mount, fields[sep + 1]
    except (OSError, ValueError, IndexError):
        return False
    return fstype in LOCAL_FILESYSTEMS


class Inotify:
    """The process's inotify instance: watch descriptors and which worktree watchers they belong to."""

    def __init__(self) -> None:
        self._fd = -1
        self._owners: dict[int, set[Watcher]] = {}
        self.lock = threading.Lock()  # arming runs on a worker thread while the loop drains for others

    def watcher(self, worktree: bytes, extra_dirs: tuple[bytes, ...]) -> Watcher:
        if self._fd < 0:
            fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                raise Unwatchable(ctypes.get_errno(), "inotify_init1 failed")
            self._fd = fd
        return Watcher(self, worktree, extra_dirs)

    def close(self) -> None:
        with self.lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._owners.clear()

    def drain(self) -> None:
        """Read every queued event and mark the watchers it concerns as changed."""
        with self.lock:
            self._drain()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            if not data:
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if wd < 0:  # queue overflow: any worktree may have changed, anywhere
                    for owners in self._owners.values():
                        for w in owners:
                            w.full = True
                    continue
                for w in self._owners.get(wd, ()):
                    w.note(wd, mask, name)
                if mask & _IN_IGNORED:  # the directory is gone; its watch with it
                    for w in self._owners.pop(wd, ()):
                        w.wds.discard(wd)

    def add(self, watcher: Watcher, d: bytes) -> None:
        with self.lock:
            self._add(watcher, d)

    def _add(self, watcher: Watcher, d: bytes) -> int:
        wd: int = _libc.inotify_add_watch(self._fd, d, _MASK)
        if wd < 0:
            raise Unwatchable(ctypes.get_errno(), f"cannot watch {d!r}")
        self._owners.setdefault(wd, set()).add(watcher)
        watcher.wds.add(wd)
        return wd

    def release(self, watcher: Watcher, wds: set[int] | None = None) -> None:
        with self.lock:
            self._release(watcher, wds)

    def _release(self, watcher: Watcher, wds: set[int] | None = None) -> None:
        for wd in list(watcher.wds if wds is None else wds):
            owners = self._owners.get(wd)
            if owners is None:
                continue
            owners.discard(watcher)
            if not owners:
                del self._owners[wd]
                if self._fd >= 0:
                    _libc.inotify_rm_watch(self._fd, wd)
            watcher.wds.discard(wd)


class Watcher:
    """The watches of one worktree (and of the git dirs that shape its `add -A`), and what they saw."""

    def __init__(self, inotify: Inotify, worktree: bytes, extra_dirs: tuple[bytes, ...]) -> None:
        self._inotify = inotify
        self._top = worktree
        self._extra = extra_dirs
        self.wds: set[int] = set()
        self._dirs: dict[int, bytes] = {}  # watch -> directory, relative to the worktree (b"": the top)
        self._extra_wds: set[int] = set()
        self.paths: set[bytes] = set()  # changed since armed (files or directories, relative)
        self.new_dirs: set[bytes] = set()  # created or moved in since armed: not watched yet
        self.full = True  # something changed that only a whole `add -A` can account for
        self.tree: str | None = None  # what the worktree's tree was when the watcher was last armed
        # A `.gitignore` (of any kind) was in a directory when its watch was added since the last arm: False means
        # no rule file anywhere in the worktree, as one made later is an event that makes the watcher ``full``.
        self.rule_files = True

    __hash__ = object.__hash__

    @property
    def dirty(self) -> bool:
        return self.full or bool(self.paths)

    def note(self, wd: int, mask: int, name: bytes) -> None:
        """One event on a watched directory (called with the inotify lock held)."""
        if wd in self._extra_wds:
            if name in _GIT_DIR_FILES or mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                self.full = True
            return
        where = self._dirs.get(wd)
        if where is None or (not where and mask & (_IN_DELETE_SELF | _IN_MOVE_SELF)):
            self.full = True
            return
        if not name or mask & _IN_IGNORED:  # the directory itself: its parent's watch reports what matters
            return
        path = where + b"/" + name if where else name
        if name in _RULE_FILES:
            self.full = True
        elif mask & _IN_ISDIR:
            if mask & _IN_MOVED_FROM:  # its watches would keep reporting under the old name
                self.full = True
            elif mask & (_IN_CREATE | _IN_MOVED_TO):
                self.new_dirs.add(path)
                self.paths.add(path)
            elif mask & _IN_DELETE:
                self.paths.add(path)
        else:
            self.paths.add(path)

    def changed(self) -> bool:
        """Did anything happen in the worktree since the watcher was armed?"""
        self._inotify.drain()
        return self.dirty or self.tree is None

    def take(self) -> tuple[set[bytes], set[bytes]] | None:
        """The paths changed since armed (or since the last take), forgetting them; None when only a whole
        `add -A` can tell (then the caller arms again). Taken *before* the paths are read, so a change racing
        the read is reported again next time."""
        self._inotify.drain()
        if self.full or self.tree is None:
            return None
        with self._inotify.lock:
            taken = self.paths, self.new_dirs
            self.paths, self.new_dirs = set(), set()
        return taken

    def arm(self) -> None:
        """Before `add -A`: forget what happened so far and watch every directory (idempotent per directory)."""
        self.tree = None
        self._inotify.drain()
        with self._inotify.lock:
            self.full = False
            self.paths.clear()
            self.new_dirs.clear()
        old = set(self.wds)
        self._dirs, self._extra_wds = {}, set()
        self.rule_files = False
        self.watch_tree(b"")
        for d in self._extra:
            if os.path.isdir(d):
                self._extra_wds.add(self._add(d, None))
        stale = old - set(self._dirs) - self._extra_wds
        if stale:
            self._inotify.release(self, stale)

    def watch_tree(self, rel: bytes) -> None:
        """Watch a directory below the worktree and every directory in it (before reading what is in them), noting
        any rule file in them."""
        count = len(self._dirs)
        stack = [rel]
        while stack:
            d = stack.pop()
            self._add(os.path.join(self._top, d) if d else self._top, d)
            count += 1
            if count > MAX_DIRECTORIES:
                raise Unwatchable(0, "too many directories to watch")
            with os.scandir(os.path.join(self._top, d) if d else self._top) as it:
                for e in it:
                    if e.name == b".gitignore":
                        self.rule_files = True
                    if e.is_dir(follow_symlinks=False) and not (not d and e.name == b".git"):
                        stack.append(d + b"/" + e.name if d else e.name)

    def _add(self, path: bytes, rel: bytes | None) -> int:
        with self._inotify.lock:
            wd = self._inotify._add(self, path)
            if rel is not None:
                self._dirs[wd] = rel
            return wd

    def close(self) -> None:
        self._inotify.release(self)
        self._dirs.clear()
        self.tree = None
