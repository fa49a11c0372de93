"""inotify watches on a worktree, so an unchanged workspace is recognised without walking it (issue 4 "Cost").

A capture that runs `add -A` first *arms* the watcher: it drops the events queued so far (that capture
covers them) and makes sure every directory below the worktree, and the git dirs whose files shape
`add -A` (config, info/exclude), is watched. From then on any write, create, delete, rename or
attribute change in them queues an event. The next capture finds the queue empty — one non-blocking
read — and knows the tree is the one `add -A` produced last time. Anything doubtful counts as a change:
a queue overflow, a watch that could not be added (the caller then stops using the watcher), a
filesystem inotify does not see every writer of (network filesystems: only local ones are watched).
Not seen: writes through a shared memory mapping that are never followed by a write() or close, and the
service's own global git configuration, as with the stat fingerprint.
"""

from __future__ import annotations

import ctypes
import os

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_ONLYDIR, _IN_DONT_FOLLOW = 0x01000000, 0x02000000
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
         | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW)
MAX_DIRECTORIES = 4096  # beyond this a workspace is left to `add -A` (and the watch budget to others)
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


class Watcher:
    def __init__(self, worktree: bytes, extra_dirs: tuple[bytes, ...]) -> None:
        fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise Unwatchable(ctypes.get_errno(), "inotify_init1 failed")
        self._fd = fd
        self._top = worktree
        self._extra = extra_dirs
        self.tree: str | None = None  # what `add -A` made of the worktree when the watcher was last armed

    def changed(self) -> bool:
        """Did anything happen since the watcher was armed? (Consumes the queued events.)"""
        return self._drain() or self.tree is None

    def arm(self) -> None:
        """Before `add -A`: forget queued events and watch every directory (adding watches is idempotent)."""
        self.tree = None
        self._drain()
        count = 0
        stack = [self._top]
        while stack:
            d = stack.pop()
            self._watch(d)
            count += 1
            if count > MAX_DIRECTORIES:
                raise Unwatchable(0, "too many directories to watch")
            with os.scandir(d) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False) and not (d == self._top and e.name == b".git"):
                        stack.append(e.path)
        for d in self._extra:
            if os.path.isdir(d):
                self._watch(d)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _watch(self, d: bytes) -> None:
        if _libc.inotify_add_watch(self._fd, d, _MASK) < 0:
            raise Unwatchable(ctypes.get_errno(), f"cannot watch {d!r}")

    def _drain(self) -> bool:
        seen = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return seen
            if not data:
                return seen
            seen = True
