"""Bind a workspace into a running sandbox: ``python3 -I -S attach.py PID SOURCE UID GID`` (stdlib only, run as
root by the host).

A spare runtime (provider_host/spares.py) is launched before its thread exists, with an empty placeholder for a
workspace. When a thread of its tenant adopts it, this binds the thread's workspace SOURCE into the mount namespace
of the sandbox whose bwrap runs as PID (the host's own child: its one child is the sandbox's first process), at the
same absolute path, as ``launcher.py`` would have at launch. Nothing else of the host becomes visible.

The source is opened without following links and must sit exactly at the path given, owned by UID (the host made
it the tenant's); the tree is cloned in the host's namespace (``open_tree``) and moved into the sandbox's
(``move_mount``). Inside, every directory on the way is walked without following links and the mount point is made
new (as UID:GID: the sandbox's user namespace maps no other owner): a link or a directory already there refuses.
``setns`` refuses a process with threads: hence a process of its own.
"""

import ctypes
import os
import sys

SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # x86_64 and aarch64 (the generic table) alike
OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH = 1, 0x8000, 0x1000
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
CLONE_NEWNS = 0x20000


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def sandbox_pid(bwrap_pid: int) -> int:
    """The sandbox's first process: bwrap's one child (bwrap itself stays outside, in enter.py's namespace)."""
    with open(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children") as f:
        children = f.read().split()
    if len(children) != 1:
        raise OSError(f"bwrap {bwrap_pid} has {len(children)} children, not one sandbox")
    return int(children[0])


def attach(bwrap_pid: int, source: str, uid: int, gid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if not os.path.isabs(source) or os.path.normpath(source) != source:
        raise OSError(f"{source!r} is not a plain absolute path")
    fd = os.open(source, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
    if os.readlink(f"/proc/self/fd/{fd}") != source:
        raise OSError(f"{source} is reached through a symbolic link")
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) != (uid, gid):
        raise OSError(f"{source} is not the tenant's")
    tree = _check(libc.syscall(SYS_OPEN_TREE, fd, b"", OPEN_TREE_CLONE | AT_RECURSIVE | AT_EMPTY_PATH), "open_tree")
    pid = sandbox_pid(bwrap_pid)
    ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    if sandbox_pid(bwrap_pid) != pid:  # the namespace opened is still the sandbox's (no pid reused meanwhile)
        raise OSError(f"the sandbox of bwrap {bwrap_pid} changed")
    if os.stat(f"/proc/{pid}/ns/mnt").st_ino == os.stat("/proc/self/ns/mnt").st_ino:
        raise OSError(f"process {pid} is not in a sandbox of its own")
    _check(libc.setns(ns, CLONE_NEWNS), "setns")
    here = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    parts = source.strip("/").split("/")
    # A new directory in the sandbox's root (bwrap's tmpfs) can only be owned by an id its user namespace maps
    _check(libc.setfsgid(gid), "setfsgid")
    _check(libc.setfsuid(uid), "setfsuid")
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            if last:
                os.mkdir(name, 0o700, dir_fd=here)  # FileExistsError: something is there already
            try:
                step = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=here)
            except FileNotFoundError:
                os.mkdir(name, 0o755, dir_fd=here)
                step = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=here)
            os.close(here)
            here = step
    finally:
        libc.setfsuid(0)
        libc.setfsgid(0)
    _check(
        libc.syscall(SYS_MOVE_MOUNT, tree, b"", here, b"", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
        "move_mount",
    )


def main(args: list[str]) -> int:
    if len(args) != 4:
        sys.stderr.write("attach.py: usage: attach.py BWRAP_PID SOURCE UID GID\n")
        return 125
    try:
        attach(int(args[0]), args[1], int(args[2]), int(args[3]))
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"attach.py: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
