"""Enter a sandbox: ``python3 -I -S enter.py LAUNCH [ARGS…]`` (stdlib only, run as root by the host).

LAUNCH (mode 0600, never inside any sandbox; ``marshal`` data, written by the host only) holds ``staged`` (host paths to bind onto ``stage``, see
``stage()``), ``argv`` (setpriv … bwrap … -- runtime), ``env``
(the whole environment inside), ``cgroups`` (``cgroup.procs`` files to join) and ``rlimits``
([name, soft, hard]) and ``inherit`` (names of variables taken from this process's own environment, for
what an SDK sets per spawn). This process joins the cgroups and sets the limits while it is still root, then
replaces itself with ``argv + ARGS`` under exactly ``env``: whatever environment its own spawner gave it
(claude-agent-sdk merges the host's) is dropped here. ARGS are the runtime's own arguments, appended
(the Claude Code CLI's, which the SDK passes to the wrapper script that calls this).

Every runtime's start waits for this interpreter: it imports only what it uses, and reads the launch file
with the built-in ``marshal`` (``json`` pulls in ``re``, ``enum`` and more, half of this script's start-up).
"""

import ctypes
import marshal
import os
import resource
import sys

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any

CLONE_NEWNS, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x20000, 2, 4, 4096, 16384, 1 << 18


def _mount(
    libc: "Any", source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    if (
        libc.mount(
            source and source.encode(), target.encode(), fstype and fstype.encode(), flags, data and data.encode()
        )
        != 0
    ):
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def stage(root: str, staged: list[tuple[str, str, bool]]) -> None:
    """In a private mount namespace (this process and what it execs only): a tmpfs at ``root`` and each
    host path bind-mounted onto ``root/<i>``. Every source is opened without following links and must sit
    exactly at the path given (no link in any component), so a tenant cannot swap one of its dirs for a
    link to the host's files between the host's checks and this mount."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
    for source, target, is_dir in staged:
        fd = os.open(source, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != source:
                raise OSError(f"{source} is reached through a symbolic link")
            if is_dir:
                os.mkdir(target)
            else:
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            _mount(libc, f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        finally:
            os.close(fd)


def main(args: list[str]) -> int:
    if not args:
        sys.stderr.write("enter.py: usage: enter.py LAUNCH [ARGS...]\n")
        return 125
    with open(args[0], "rb") as f:
        data = f.read()
    if data.startswith(b"{"):  # written as JSON by a host that started before this file was replaced
        import json

        launch = json.loads(data)
    else:
        launch = marshal.loads(data)
    if launch.get("staged"):
        try:
            stage(launch["stage"], launch["staged"])
        except OSError as exc:
            sys.stderr.write(f"enter.py: cannot stage the sandbox's mounts: {exc}\n")
            return 125
    for procs in launch.get("cgroups", []):
        try:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            sys.stderr.write(f"enter.py: cannot join cgroup {procs}: {exc}\n")
            return 125
    for name, soft, hard in launch.get("rlimits", []):
        resource.setrlimit(getattr(resource, name), (soft, hard))
    argv = [*launch["argv"], *args[1:]]
    env = dict(launch["env"])
    for name in launch.get("inherit", []):  # named variables the spawner sets per process (never TREADLE_*)
        if name in os.environ and not name.startswith("TREADLE_"):
            env[name] = os.environ[name]
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        sys.stderr.write(f"enter.py: cannot run {argv[0]}: {exc}\n")
        return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
