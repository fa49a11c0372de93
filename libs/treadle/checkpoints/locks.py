"""The git dir's lock, and the lock files a git killed with SIGKILL leaves behind."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from treadle.checkpoints.refs import thread_prefix
from treadle.checkpoints.repo import Repo, common_dir


@contextlib.asynccontextmanager
async def exclusive(repo: Repo) -> AsyncIterator[None]:
    """The git dir's lock across processes (replicas, and a restarted service vs the git children of a killed
    one, which inherit it). Whoever holds it is the only writer of the private index and of Treadle's refs,
    so lock files found under it are orphans of a git killed with SIGKILL and are removed."""
    if repo.lock_fd is None:
        repo.lock_fd = os.open(repo.gitdir / "treadle" / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fd = repo.lock_fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{repo.gitdir}/treadle/index.lock")  # repo.index's lock
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def clear_ref_locks(repo: Repo, thread: str) -> None:
    """Remove lock files of a thread's checkpoint refs (call only under :func:`exclusive`)."""
    base = (common_dir(repo.gitdir) or repo.gitdir) / thread_prefix(thread)
    for lock in base.rglob("*.lock") if base.is_dir() else ():
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


def clear_stale_lock(lock: Path, older_than: float) -> None:
    """A git killed with SIGKILL (OOM, container stop) leaves the private index locked forever.

    Only captures use that index, and none runs git for longer than the timeout, so a lock file
    older than that is an orphan.
    """
    try:
        if time.time() - lock.stat().st_mtime > older_than:
            lock.unlink(missing_ok=True)
    except FileNotFoundError:
        pass
