"""Checkpoint ref names, and creating one without spawning git."""

from __future__ import annotations

import contextlib
import os

from treadle.checkpoints.repo import Repo, Tip, common_dir

_REF_PREFIX = "refs/treadle/checkpoints"


def checkpoint_ref(thread: str, scope: str, ordinal: int) -> str:
    return f"{_REF_PREFIX}/{thread}/{scope}/{ordinal}"


def thread_prefix(thread: str) -> str:
    return f"{_REF_PREFIX}/{thread}"


def create_loose_ref(repo: Repo, ref: str, commit: str, prev_ref: str | None, prev: Tip | None) -> bool | None:
    """Create ``ref`` as a loose ref the way git's files backend does: take ``<ref>.lock``, check under it
    that the ref is new and the previous checkpoint still points where we think, then rename. Returns None
    when only git can decide (reftable storage, packed refs), False when a ref moved, True when created."""
    refs_dir = common_dir(repo.gitdir) or repo.gitdir
    try:
        if b"refstorage" in (refs_dir / "config").read_bytes().lower() or (refs_dir / "packed-refs").exists():
            return None
    except OSError:
        return None
    target = refs_dir / ref
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = target.with_name(target.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # git (or another capture) is updating this ref
        return False
    try:
        try:
            moved = target.exists() or bool(prev_ref and prev and (refs_dir / prev_ref).read_text().strip() != prev.commit)
        except FileNotFoundError:
            return None
        if moved:
            return False
        os.write(fd, commit.encode() + b"\n")
        os.close(fd)
        fd = -1
        os.rename(lock, target)
        return True
    finally:
        if fd != -1:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
