"""Checkpoint refs: their names, reading them into a git dir's remembered tips, and creating them atomically."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from treadle.checkpoints.repo import Repo, Tip, common_dir

if TYPE_CHECKING:
    from treadle.checkpoints.runner import GitRunner

_REF_PREFIX = "refs/treadle/checkpoints"


def checkpoint_ref(thread: str, scope: str, ordinal: int) -> str:
    return f"{_REF_PREFIX}/{thread}/{scope}/{ordinal}"


def thread_prefix(thread: str) -> str:
    return f"{_REF_PREFIX}/{thread}"


async def load_tips(git: GitRunner, repo: Repo, *refs: str | None) -> None:
    """Read ``refs`` into ``repo.tips`` (refs that do not exist are forgotten)."""
    wanted = [r for r in refs if r]
    out = await git.check(repo, "for-each-ref", "--format=%(refname)%00%(objectname)%00%(tree)", *wanted)
    for r in wanted:
        tip = repo.tips.get(r)
        if tip is not None and tip.written:  # an unchanged ordinal has no ref to read: keep what we know
            repo.tips.pop(r, None)
    for line in out.decode().splitlines():
        name, commit, tree = line.split("\0")
        if name in wanted:  # patterns also match refs *under* a name
            repo.remember(name, Tip(commit, tree))


async def create_ref(
    git: GitRunner, repo: Repo, ref: str, commit: str, prev_ref: str | None, prev: Tip | None
) -> tuple[bool, bytes]:
    # One transaction: create fails if the ordinal already exists (another replica got there
    # first), verify fails if the previous checkpoint moved under us (rollback, restore).
    script = b"create %s\0%s\0" % (ref.encode(), commit.encode())
    if prev_ref and prev and prev.written:
        script += b"verify %s\0%s\0" % (prev_ref.encode(), prev.commit.encode())
    rc, _, err = await git.run(repo, "update-ref", "--stdin", "-z", input=script)
    return rc == 0, err


def ref_mtime(repo: Repo, name: str) -> float:
    try:
        return os.stat((common_dir(repo.gitdir) or repo.gitdir) / name).st_mtime
    except OSError:
        return 0.0  # packed (or gone): unknown, counted as old
