"""Checkpoint refs: their names, reading them into a git dir's remembered tips, and creating them atomically."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from treadle.checkpoints.repo import Repo, Tip, common_dir
from treadle.checkpoints.runner import make_dirs

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
    if _loose_only(repo, ref):
        return _create_loose(repo, ref, commit, prev_ref, prev)
    script = b"create %s\0%s\0" % (ref.encode(), commit.encode())
    if prev_ref and prev and prev.written:
        script += b"verify %s\0%s\0" % (prev_ref.encode(), prev.commit.encode())
    rc, _, err = await git.run(repo, "update-ref", "--stdin", "-z", input=script)
    return rc == 0, err


def _loose_only(repo: Repo, ref: str) -> bool:
    """Are the thread's checkpoint refs plain files (no packed-refs entry for them, no reftable)? Then a ref
    is created as git's files backend does it, without a git process (~2.5 ms of CPU saved per capture)."""
    base = common_dir(repo.gitdir) or repo.gitdir
    if (base / "reftable").exists():
        return False
    try:
        st = os.stat(base / "packed-refs")
    except FileNotFoundError:
        return True
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    if repo.packed_refs is None or repo.packed_refs[0] != key:  # read once per version of the file
        prefix = ref.rsplit("/", 1)[0].split("/")[:4]  # refs/treadle/checkpoints/<thread>
        with open(base / "packed-refs", "rb") as f:
            repo.packed_refs = (key, (" " + "/".join(prefix) + "/").encode() in f.read())
    return not repo.packed_refs[1]


def _create_loose(repo: Repo, ref: str, commit: str, prev_ref: str | None, prev: Tip | None) -> tuple[bool, bytes]:
    """`update-ref` create + verify, the files backend's way: a `<ref>.lock` taken with O_EXCL (git's own lock,
    so a git updating the same ref at the same time fails one of the two), checked, renamed into place.
    Only called under the git dir lock, which every Treadle writer of these refs holds."""
    base = common_dir(repo.gitdir) or repo.gitdir
    path = f"{base}/{ref}"  # plain strings and os calls: this is on every capture that changed something
    lock = path + ".lock"
    try:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            make_dirs(Path(parent), repo.owner)  # the tenant's git children rename and delete refs in them
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        if repo.owner is not None:
            os.fchown(fd, *repo.owner)
    except OSError as e:
        if "fd" in locals():
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
        return False, f"cannot lock ref '{ref}': {e}".encode()
    try:
        if os.path.exists(path):
            return False, f"cannot lock ref '{ref}': reference already exists".encode()
        if prev_ref and prev and prev.written:
            try:
                with open(f"{base}/{prev_ref}", "rb", buffering=0) as f:
                    held = f.read(4096).strip().decode()
            except (OSError, UnicodeDecodeError):
                held = None
            if held != prev.commit:
                return False, f"cannot lock ref '{prev_ref}': is at {held} but expected {prev.commit}".encode()
        os.write(fd, commit.encode() + b"\n")
        os.close(fd)
        fd = -1
        os.rename(lock, path)
        return True, b""
    finally:
        if fd >= 0:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)


def ref_mtime(repo: Repo, name: str) -> float:
    try:
        return os.stat((common_dir(repo.gitdir) or repo.gitdir) / name).st_mtime
    except OSError:
        return 0.0  # packed (or gone): unknown, counted as old
