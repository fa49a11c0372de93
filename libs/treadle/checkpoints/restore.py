"""Restores, diffs and retention on checkpoint refs (requirements L10.5, L10.6).

Everything here runs under the workspace lock of :class:`treadle.checkpoints.git.Workspaces`, with the
same Treadle-private index and git environment as a capture, so the user's HEAD, branch, index and stash
are never read for writing. Files are changed only by git's own checkout machinery (`read-tree -u`),
which never writes through a symlink: a leading path that is a symlink is replaced, not followed.

A file left out of the current state because it is over the size limit was never captured, so no
restore may overwrite or delete it: it is kept out of the tree being checked out, and reported. So is a
repository inside the worktree (never captured, see staging.py), and the gitlinks of older checkpoints.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import TYPE_CHECKING

from treadle.checkpoints.diffs import parse_diff
from treadle.checkpoints.protocol import (
    MAX_FILES,
    CheckpointError,
    DiffRequest,
    DiffResult,
    FileStat,
    Prune,
    Pruned,
    Restore,
    Restored,
    Skipped,
)
from treadle.checkpoints.refs import checkpoint_ref, create_ref, load_tips, ref_mtime, thread_prefix
from treadle.checkpoints.repo import Repo, Tip
from treadle.checkpoints.retention import RefInfo, refs_to_prune
from treadle.checkpoints.runner import NO_DRIVERS, give, own_tree, tail
from treadle.checkpoints.validation import check_commit

if TYPE_CHECKING:
    from treadle.checkpoints.git import Workspaces

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
MAX_PATCH_BYTES = 4 * 1024 * 1024


async def tree_of(ws: Workspaces, repo: Repo, commit: str) -> str:
    """The tree of a checkpoint commit of this git dir; a typed error for anything else."""
    rc, out, _ = await ws.git.run(repo, "rev-parse", "--verify", "-q", f"{commit}^{{tree}}")
    if rc != 0:
        raise CheckpointError("unknown_commit", f"{commit} is not a commit of this workspace")
    return out.decode().strip()


async def diff(ws: Workspaces, repo: Repo, req: DiffRequest) -> DiffResult:
    check_commit(req.from_commit, "from_commit")
    check_commit(req.to_commit, "to_commit")
    if not 0 < req.max_bytes <= MAX_PATCH_BYTES or not 0 < req.max_files <= MAX_FILES:
        raise CheckpointError("bad_request", f"max_bytes must be 1..{MAX_PATCH_BYTES}, max_files 1..{MAX_FILES}")
    # diff-tree takes the commits as they are (no rev-parse round trips); both runs go side by side.
    new = f"{req.to_commit}^{{tree}}"
    old = f"{req.from_commit}^{{tree}}" if req.from_commit else EMPTY_TREE
    counted = _counted(repo, req.from_commit, req.to_commit)
    (rc1, stats, err1), (rc2, patch, err2) = await asyncio.gather(
        _done(counted)
        if counted is not None
        else ws.git.run(repo, "diff-tree", "-r", "-z", "-M", "--raw", "--numstat", *NO_DRIVERS, old, new),
        ws.git.run(
            repo,
            "diff-tree",
            "-r",
            "-p",
            "-M",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--full-index",
            old,
            new,
        ),
    )
    if rc1 or rc2:
        if any(m in err1 + err2 for m in (b"bad object", b"not a tree", b"bad revision", b"unknown revision")):
            raise CheckpointError("unknown_commit", "a commit of the diff is not a checkpoint of this workspace")
        raise CheckpointError("git_error", f"git diff-tree failed: {(err1 or err2).decode(errors='replace')[-300:]}")
    text, truncated = cut(patch, req.max_bytes)
    files = counted if counted is not None else parse_diff(stats)
    return DiffResult(
        files=files[: req.max_files], files_total=len(files), patch=text, truncated=truncated, patch_bytes=len(patch)
    )


def _counted(repo: Repo, old: str | None, new: str) -> list[FileStat] | None:
    """The stats the last incremental capture counted, when this is the diff they are of (the usual
    `GET /v1/runs/{id}/diff` right after a run)."""
    staged = repo.staged_stats
    if staged is None or staged[2] is None or old is None:
        return None
    trees = {tip.commit: tip.tree for tip in repo.tips.values()}
    return staged[2] if (trees.get(old), trees.get(new)) == staged[:2] else None


async def _done(_: object) -> tuple[int, bytes, bytes]:
    return 0, b"", b""


def cut(patch: bytes, limit: int) -> tuple[str, bool]:
    """At most ``limit`` bytes of the patch, ending on a whole line."""
    if len(patch) <= limit:
        return patch.decode("utf-8", "replace"), False
    head = patch[:limit]
    end = head.rfind(b"\n")
    return head[: end + 1 if end >= 0 else 0].decode("utf-8", "replace"), True


async def restore(ws: Workspaces, repo: Repo, req: Restore) -> Restored:
    check_commit(req.commit, "commit")
    target = await tree_of(ws, repo, req.commit)
    undo_ref = f"{thread_prefix(req.thread)}/undo/{req.restore_id}"
    # The state before the restore, committed first: a retried restore (after a crash half-way) finds
    # it and keeps it, so the undo point is always the state the user had before the rollback began.
    if repo.owner is not None:
        # git reads and writes the files as the tenant: every file and directory of the workspace (some made by
        # another uid) must be the tenant's, and what it restores is the tenant's.
        await asyncio.to_thread(own_tree, repo.worktree, repo.owner)
    current = await ws.stager.tree(repo, None, whole=True)  # read-tree -u below needs the index == the worktree
    kept = dict(repo.too_large)
    await load_tips(ws.git, repo, undo_ref)
    before = repo.tips.get(undo_ref)
    if before is None:
        message = f"treadle: state before restore {req.restore_id}"
        commit = (await ws.git.check(repo, "commit-tree", current, "-m", message)).decode().strip()
        ok, err = await create_ref(ws.git, repo, undo_ref, commit, None, None)
        if not ok:
            await load_tips(ws.git, repo, undo_ref)
            if undo_ref not in repo.tips:
                raise CheckpointError("git_error", f"cannot record the undo point {undo_ref}: {tail(err)}")
        before = repo.tips.get(undo_ref) or Tip(commit, current)
        repo.remember(undo_ref, before)
    repo.forget_tree()  # the worktree is about to change under the fast paths
    # A repository inside the worktree is left alone, even where the checkpoint had plain files.
    listed = (await ws.git.check(repo, "ls-tree", "-r", "-z", target)).split(b"\0")
    gitlinks = {e.split(b"\t", 1)[1] for e in listed if e.startswith(b"160000 ")}
    inside = [p for e in listed if e and _below(p := e.split(b"\t", 1)[1], repo.nested)] + sorted(gitlinks)
    applied = await _without(ws, repo, target, [*kept, *inside]) if kept or inside else target
    if current != applied:
        # --reset -u: the private index (== the worktree after `add -A`) becomes the checkpoint's tree and
        # git rewrites or removes exactly the paths that differ; ignored and untracked-by-checkpoint files stay.
        await ws.git.check(repo, "read-tree", "--reset", "-u", applied)
    files = (
        parse_diff(
            await ws.git.check(
                repo, "diff-tree", "-r", "-z", "-M", "--raw", "--numstat", *NO_DRIVERS, before.tree, target
            )
        )
        if before.tree != target
        else []
    )
    retired = await _retire(ws, repo, req)
    return Restored(
        commit=req.commit,
        tree=target,
        undo_ref=undo_ref,
        undo_commit=before.commit,
        files=files[:MAX_FILES],
        files_total=len(files),
        retired=retired,
        skipped=[
            Skipped(path=p.decode("utf-8", "replace"), reason="submodule") for p in sorted(gitlinks | repo.gitlinks)
        ]
        + _too_large(kept),
    )


def _below(path: bytes, dirs: set[bytes]) -> bool:
    while b"/" in path:
        path = path.rpartition(b"/")[0]
        if path in dirs:
            return True
    return False


def _too_large(kept: dict[bytes, int]) -> list[Skipped]:
    return [Skipped(path=p.decode("utf-8", "replace"), reason="too_large", size=n) for p, n in sorted(kept.items())]


async def _without(ws: Workspaces, repo: Repo, tree: str, paths: list[bytes]) -> str:
    """``tree`` minus ``paths`` (built in a throwaway index: the private one must stay == the worktree)."""
    # In the git dir (the tenant's git children write this index; /tmp may not even be reachable to them).
    with tempfile.TemporaryDirectory(prefix="scratch-", dir=repo.gitdir / "treadle") as tmp:
        give(tmp, repo.owner)
        env = dict(repo.env, GIT_INDEX_FILE=os.path.join(tmp, "index"))
        scratch = Repo(
            repo.worktree,
            repo.gitdir,
            repo.user_gitdir,
            env,
            repo.config_files,
            False,
            launch=repo.launch,
            lock_fd=repo.lock_fd,
        )
        await ws.git.check(scratch, "read-tree", tree)
        await ws.git.check(
            scratch, "update-index", "--force-remove", "-z", "--stdin", input=b"".join(p + b"\0" for p in paths)
        )
        return (await ws.git.check(scratch, "write-tree")).decode().strip()


async def _retire(ws: Workspaces, repo: Repo, req: Restore) -> list[str]:
    """Move the checkpoints the restore made stale out of their ordinals, in one ref transaction."""
    if not req.retire:
        return []
    names = {checkpoint_ref(req.thread, r.scope, r.ordinal): r for r in req.retire}
    await load_tips(ws.git, repo, *names)
    script, moved = b"", []
    for name, r in names.items():
        tip = repo.tips.get(name)
        if tip is None or not tip.written:  # never captured, retired before, or unchanged (no ref of its own)
            repo.tips.pop(name, None)
            continue
        stale = f"{thread_prefix(req.thread)}/stale/{req.restore_id}/{r.scope}/{r.ordinal}"
        script += b"update %s\0%s\0\0" % (stale.encode(), tip.commit.encode())
        script += b"delete %s\0%s\0" % (name.encode(), tip.commit.encode())
        moved.append(stale)
        repo.tips.pop(name, None)
    if script:
        rc, _, err = await ws.git.run(repo, "update-ref", "--stdin", "-z", input=script)
        if rc != 0:
            raise CheckpointError(
                "git_error", f"cannot retire stale checkpoints: {err.decode(errors='replace')[-300:]}"
            )
    return moved


async def prune(ws: Workspaces, repo: Repo, req: Prune, now: float) -> Pruned:
    """Retention: delete the refs :func:`refs_to_prune` picks (their objects go with the next `git gc`)."""
    base = "refs/treadle/checkpoints/"
    out = await ws.git.check(repo, "for-each-ref", "--format=%(refname)%00%(objectname)", base)
    refs = []
    for line in out.decode().splitlines():
        name, commit = line.split("\0")
        refs.append(RefInfo(name=name, commit=commit, mtime=ref_mtime(repo, name)))
    doomed = refs_to_prune(refs, now=now, idle_seconds=req.idle_seconds, keep_latest=req.keep_latest)
    if doomed:
        script = b"".join(b"delete %s\0%s\0" % (r.name.encode(), r.commit.encode()) for r in doomed)
        rc, _, err = await ws.git.run(repo, "update-ref", "--stdin", "-z", input=script)
        if rc != 0:
            raise CheckpointError("git_error", f"cannot prune: {err.decode(errors='replace')[-300:]}")
        for r in doomed:
            repo.tips.pop(r.name, None)
    return Pruned(deleted=[r.name for r in doomed], kept=len(refs) - len(doomed))
