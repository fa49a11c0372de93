"""Running git for checkpoints: a bounded pool of git processes with a hardened configuration."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

from treadle.checkpoints.protocol import CheckpointError
from treadle.checkpoints.repo import Repo
from treadle.sandbox.identity import TenantIds

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# Every git process a service runs sees only these settings besides its git dir's own config, which is
# Treadle's (a service-owned git dir, never the workspace's `.git`): no hooks (update-ref runs the
# reference-transaction hook), no fsmonitor command, no attributes file, no EOL rewriting (a checkpoint must
# restore the exact bytes), no transport at all, no submodule recursion, no signing, no auto gc.
GIT_CONFIG = (
    "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.attributesFile=/dev/null",
    "-c", "core.autocrlf=false", "-c", "core.safecrlf=false", "-c", "core.eol=lf", "-c", "core.symlinks=true",
    "-c", "core.untrackedCache=false", "-c", "core.splitIndex=false", "-c", "core.sparseCheckout=false",
    "-c", "core.precomposeUnicode=false", "-c", "core.alternateRefsCommand=", "-c", "core.sshCommand=false",
    "-c", "protocol.allow=never", "-c", "submodule.recurse=false", "-c", "fetch.recurseSubmodules=false",
    "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
    "-c", "advice.addEmbeddedRepo=false",
)  # fmt: skip

# `$GIT_DIR/info/attributes` of every service-owned git dir: it takes precedence over every `.gitattributes`
# of the worktree (macros included), and `!attr` makes each attribute that can run a command or transform
# content unspecified, so git stores and checks out the raw bytes and diffs by content.
NEUTRAL_ATTRIBUTES = (
    b"* !text !eol !crlf !filter !diff !merge !ident !working-tree-encoding !export-subst !export-ignore"
    b" !delta !whitespace !conflict-marker-size\n"
)

# On every diff: no external diff program, no textconv filter, whatever a config or attribute says.
NO_DRIVERS = ("--no-ext-diff", "--no-textconv")

IDENTITY = "Treadle", "treadle@localhost"

# The only variables a git child gets (an allow-list: nothing of the service's environment, no TREADLE_*
# secret, no GIT_* override reaches it).
_PASSED = ("PATH",)


def base_env(home: str = "/nonexistent") -> dict[str, str]:
    """What every git child starts from: PATH, the C locale, an empty HOME, no system or global config."""
    env = {k: os.environ[k] for k in _PASSED if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        HOME=home, LANG="C", LC_ALL="C", GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null",
        GIT_ATTR_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_NO_REPLACE_OBJECTS="1", GIT_PROTOCOL_FROM_USER="0",
        GIT_ASKPASS="/bin/false", SSH_ASKPASS="/bin/false",
    )  # fmt: skip
    return env


def repo_env(base: dict[str, str], worktree: Path, gitdir: Path) -> dict[str, str]:
    """git pointed at one git dir, Treadle's private index and a fixed identity and date (reproducible commits)."""
    name, email = IDENTITY
    env = dict(base)
    env.update(
        GIT_DIR=str(gitdir), GIT_WORK_TREE=str(worktree), GIT_INDEX_FILE=str(gitdir / "treadle" / "index"),
        GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email, GIT_AUTHOR_DATE="@0 +0000",
        GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email, GIT_COMMITTER_DATE="@0 +0000",
    )  # fmt: skip
    return env


@dataclass(frozen=True, slots=True)
class Launch:
    """How a git child is started: the argv before git's own arguments, and extra Popen keywords.

    As a tenant, from a root service: through `setpriv` when it is installed (CPython can then still spawn
    with vfork; with ``user=``/``group=`` it must fork the whole service, measured ~1.7 ms more per git on
    a small heap and tens of ms on a large one), else with :meth:`TenantIds.spawn_kwargs`."""

    argv: tuple[str, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()  # Popen keywords of several types (TenantIds.spawn_kwargs)
    owner: tuple[int, int] | None = None  # (uid, gid) the git dir's files must belong to; None: the service's

    @classmethod
    def of(cls, binary: str, ids: TenantIds | None) -> Launch:
        if ids is None:
            return cls((binary,))
        setpriv = _setpriv()
        if setpriv:
            return cls(
                (setpriv, f"--reuid={ids.uid}", f"--regid={ids.gid}", "--clear-groups", "--no-new-privs", "--", binary),
                owner=(ids.uid, ids.gid),
            )
        return cls((binary,), tuple(ids.spawn_kwargs().items()), owner=(ids.uid, ids.gid))


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")


SERVICE = Launch(("git",))


class GitRunner:
    """Runs git on worker threads; bounds git processes, not requests (a capture queued on a busy workspace
    holds no slot)."""

    def __init__(
        self, binary: str = "git", timeout: float = 120.0, max_processes: int = 32, home: str = "/nonexistent"
    ) -> None:
        self.binary = binary
        self.timeout = timeout
        self.base_env = base_env(home)
        self._pool = ThreadPoolExecutor(max_processes, thread_name_prefix="treadle-git")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def launch(self, ids: TenantIds | None) -> Launch:
        return Launch.of(self.binary, ids)

    async def check(self, repo: Repo, *args: str, input: bytes | None = None) -> bytes:
        """git's stdout; a typed ``git_error`` when it fails."""
        rc, out, err = await self.run(repo, *args, input=input)
        if rc != 0:
            raise CheckpointError("git_error", f"git {args[0]} failed: {tail(err)}")
        return out

    async def plain(self, *args: str, launch: Launch | None = None) -> None:
        """git outside any repository (init)."""
        rc, _, err = await self._run(launch or self.launch(None), self.base_env, None, *args)
        if rc != 0:
            raise CheckpointError("git_error", f"git {args[0]} failed: {tail(err)}")

    async def run(
        self, repo: Repo, *args: str, input: bytes | None = None, env: dict[str, str] | None = None
    ) -> tuple[int, bytes, bytes]:
        # git inherits the git dir's lock: if this service is killed, the lock stays held until its git exits.
        hold = (repo.lock_fd,) if repo.lock_fd is not None else ()
        return await self._run(
            repo.launch or self.launch(None), env or repo.env, repo.worktree, *args, input=input, hold=hold
        )

    async def in_thread(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """Run ``fn`` on the git pool (in-process git work counts against the same bound as git processes)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _run(
        self,
        launch: Launch,
        env: dict[str, str],
        cwd: Path | None,
        *args: str,
        input: bytes | None = None,
        hold: tuple[int, ...] = (),
    ) -> tuple[int, bytes, bytes]:
        # Popen from a worker thread rather than loop.subprocess_exec: CPython spawns with vfork,
        # while uvloop forks the whole interpreter (measured: 2.1 vs 5.0 ms wall per git call).
        job = asyncio.get_running_loop().run_in_executor(
            self._pool, run_git, launch, args, env, cwd, input, self.timeout, hold
        )
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            # git cannot be stopped half-way from here; wait for it so that no git process (and
            # no .lock file) outlives the workspace lock we are about to release.
            await asyncio.wait([job])
            raise


def run_git(
    launch: Launch,
    args: tuple[str, ...],
    env: dict[str, str],
    cwd: Path | None,
    input: bytes | None,
    timeout: float,
    hold: tuple[int, ...] = (),
) -> tuple[int, bytes, bytes]:
    """One git child, started as ``launch`` says, with the hardened settings; (returncode, stdout, stderr)."""
    argv = (*launch.argv, *GIT_CONFIG, *args)
    stdin = subprocess.PIPE if input is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            pass_fds=hold,
            **dict(launch.kwargs),
        )
    except OSError as e:
        raise CheckpointError("git_error", f"cannot run git: {e}") from None
    with proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # SIGTERM first: git then removes its .lock files
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            command = " ".join(args)[:200]
            raise CheckpointError("git_error", f"git {command} timed out after {timeout}s") from None
    return proc.returncode, out, err


def tail(err: bytes) -> str:
    return err.decode("utf-8", "replace").strip()[-500:] or "no output"


def run_in_thread(
    repo: Repo, *args: str, input: bytes | None = None, timeout: float = 120.0, ok: tuple[int, ...] = (0,)
) -> bytes:
    """git from a thread that is already off the event loop (in-process capture work); raises ``git_error``."""
    hold = (repo.lock_fd,) if repo.lock_fd is not None else ()
    rc, out, err = run_git(repo.launch or SERVICE, args, repo.env, repo.worktree, input, timeout, hold)
    if rc not in ok:
        raise CheckpointError("git_error", f"git {args[0]} failed: {tail(err)}")
    return out


def give(path: Path | str | bytes, owner: tuple[int, int] | None, *, fd: int | None = None) -> None:
    """Hand a file or directory the service just made inside a tenant's git dir to the tenant (no-op for None).
    Never follows a symlink."""
    if owner is None:
        return
    if fd is not None:
        os.fchown(fd, *owner)
    else:
        os.chown(path, *owner, follow_symlinks=False)


def make_dirs(path: Path, owner: tuple[int, int] | None, mode: int = 0o777) -> None:
    """``mkdir -p`` whose new directories belong to ``owner``."""
    if path.is_dir():
        return
    make_dirs(path.parent, owner, mode)
    try:
        path.mkdir(mode)
    except FileExistsError:
        return
    give(path, owner)


def own_tree(top: Path, owner: tuple[int, int]) -> int:
    """Hand ``top`` and everything below it to ``owner``, never through a symlink (a directory swapped for a
    symlink mid-walk is not entered, and symlinks themselves are changed, not their targets). Returns how
    many entries changed owner."""
    uid, gid = owner
    changed = 0
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != owner:
            os.fchown(fd, uid, gid)
            changed += 1
    finally:
        os.close(fd)
    for _, dirs, files, dirfd in os.fwalk(top, follow_symlinks=False):
        for name in dirs + files:
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                if (st.st_uid, st.st_gid) != owner:
                    os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
                    changed += 1
            except FileNotFoundError:
                continue
    return changed
