"""Bind a workspace into a running sandbox: ``bind(PID, SOURCE, UID, GID)`` in the host (as root), or
``python3 -I -S attach.py PID SOURCE UID GID``.

A spare runtime (provider_host/spares.py) is launched before its thread exists, with an empty placeholder for a
workspace. When a thread of its tenant adopts it, this binds the thread's workspace SOURCE into the mount namespace
of the sandbox whose bwrap runs as PID (the host's own child: its one child is the sandbox's first process), at the
same absolute path, as ``launcher.py`` would have at launch. Nothing else of the host becomes visible.

The source is opened without following links and must sit exactly at the path given, owned by UID (the host made
it the tenant's); the tree is cloned in the host's namespace (``open_tree``) and moved into the sandbox's
(``move_mount``). Inside, every directory on the way is walked without following links and the mount point is made
new (as UID:GID: the sandbox's user namespace maps no other owner): a link or a directory already there refuses.

``setns`` into a mount namespace refuses a thread that shares its filesystem context (every thread of a process
does): ``bind`` runs the whole of it on a thread of its own, started for it, which leaves that context
(``unshare(CLONE_FS)``) before it enters and ends after; the host's other threads never leave the host's
namespace, and no process is started (an interpreter's start was most of an attach).
"""

import ctypes
import os
import sys
import threading

SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # x86_64 and aarch64 (the generic table) alike
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, AT_EMPTY_PATH = 1, os.O_CLOEXEC, 0x8000, 0x1000
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
CLONE_NEWNS, CLONE_FS = 0x20000, 0x200


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def _uids(pid: int) -> set[int]:
    with open(f"/proc/{pid}/status") as f:
        return next({int(u) for u in line.split()[1:]} for line in f if line.startswith("Uid:"))


def sandbox_pid(bwrap_pid: int) -> int:
    """The sandbox's first process: bwrap's one child (bwrap itself stays outside, in enter.py's namespace)."""
    with open(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children") as f:
        children = f.read().split()
    if len(children) != 1:
        raise OSError(f"bwrap {bwrap_pid} has {len(children)} children, not one sandbox")
    return int(children[0])


def bind(bwrap_pid: int, source: str, uid: int, gid: int) -> None:
    """``attach`` on a thread of its own (see the module's doc); its error raised here."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            attach(bwrap_pid, source, uid, gid)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, name="sandbox-attach")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def attach(bwrap_pid: int, source: str, uid: int, gid: int) -> None:
    """The calling thread enters the sandbox's namespace for good: it must be one started for this (``bind``)."""
    if not os.path.isabs(source) or os.path.normpath(source) != source:
        raise OSError(f"{source!r} is not a plain absolute path")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fds: list[int] = []  # every one close-on-exec: a runtime the host spawns meanwhile inherits none

    def opened(fd: int) -> int:
        fds.append(fd)
        return fd

    try:
        fd = opened(os.open(source, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC))
        if os.readlink(f"/proc/self/fd/{fd}") != source:
            raise OSError(f"{source} is reached through a symbolic link")
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != (uid, gid):
            raise OSError(f"{source} is not the tenant's")
        flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH
        tree = opened(_check(libc.syscall(SYS_OPEN_TREE, fd, b"", flags), "open_tree"))
        pid = sandbox_pid(bwrap_pid)
        ns = opened(os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC))
        if sandbox_pid(bwrap_pid) != pid:  # the namespace opened is still the sandbox's (no pid reused meanwhile)
            raise OSError(f"the sandbox of bwrap {bwrap_pid} changed")
        if _uids(pid) != {uid}:  # the tenant's sandbox, not whatever process took a pid the host let go of
            raise OSError(f"process {pid} does not run as the tenant")
        if os.fstat(ns).st_ino == os.stat("/proc/self/ns/mnt").st_ino:
            raise OSError(f"process {pid} is not in a sandbox of its own")
        _check(libc.unshare(CLONE_FS), "unshare(CLONE_FS)")  # this thread's own root and cwd from here on
        _check(libc.setns(ns, CLONE_NEWNS), "setns")
        here = opened(os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        parts = source.strip("/").split("/")
        # A new directory in the sandbox's root (bwrap's tmpfs) can only be owned by an id its user namespace maps
        libc.setfsgid(gid)
        libc.setfsuid(uid)
        try:
            for i, name in enumerate(parts):
                if i == len(parts) - 1:
                    os.mkdir(name, 0o700, dir_fd=here)  # FileExistsError: something is there already
                try:
                    here = opened(os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=here))
                except FileNotFoundError:
                    os.mkdir(name, 0o755, dir_fd=here)
                    here = opened(os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=here))
        finally:
            libc.setfsuid(0)
            libc.setfsgid(0)
        _check(
            libc.syscall(SYS_MOVE_MOUNT, tree, b"", here, b"", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
            "move_mount",
        )
    finally:
        for fd in fds:
            os.close(fd)


def main(args: list[str]) -> int:
    if len(args) != 4:
        sys.stderr.write("attach.py: usage: attach.py BWRAP_PID SOURCE UID GID\n")
        return 125
    try:
        bind(int(args[0]), args[1], int(args[2]), int(args[3]))
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"attach.py: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
