"""One capture: the worktree's tree, a commit on the previous checkpoint, its hidden ref, per-file stats.

Captures are on the run hot path, so git is spawned as rarely as possible: refs read or created
here are remembered (update-ref verifies that guess atomically), an unchanged workspace costs no
git process at all, and a small change none but the ref update and the stats (staging.py).
"""

from __future__ import annotations

import asyncio

from treadle.checkpoints.diffs import parse_diff
from treadle.checkpoints.incremental import commit_id, commit_object
from treadle.checkpoints.locks import clear_ref_locks
from treadle.checkpoints.packs import COMMIT
from treadle.checkpoints.protocol import MAX_FILES, Capture, Captured, CheckpointError, FileStat, Skipped
from treadle.checkpoints.refs import create_ref, load_tips
from treadle.checkpoints.repo import FreshPack, Repo, Tip
from treadle.checkpoints.runner import IDENTITY, NO_DRIVERS, GitRunner, tail
from treadle.checkpoints.staging import Stager


async def capture(git: GitRunner, stager: Stager, repo: Repo, req: Capture, ref: str, prev_ref: str | None) -> Captured:
    failure = b""
    for attempt in range(2):
        # Warm: this process created/read the previous ref (or remembers it unchanged) and not this
        # one, so skip the lookup; update-ref below re-checks both atomically. Else read the refs.
        warm = attempt == 0 and prev_ref in repo.tips and ref not in repo.tips
        if not warm:
            await load_tips(git, repo, ref, prev_ref)
            if ref in repo.tips:
                return await _existing(git, repo, req, ref, prev_ref)
        prev = repo.tips.get(prev_ref) if prev_ref else None
        if prev is None and prev_ref and req.previous_commit and req.previous_tree:
            prev = Tip(req.previous_commit, req.previous_tree, holder=req.previous_ref or prev_ref)
        tree = await stager.tree(repo, prev.tree if prev else None)
        skipped = stager.skipped(repo)
        if prev is not None and tree == prev.tree:
            # Unchanged: ordinal N *is* the previous commit, and no ref is written for it. Most runs change
            # nothing, and creating a ref file costs ~1 ms of kernel CPU on ext4 here, more than the rest
            # of the capture; the commit stays reachable through the ref that already holds it.
            tip = Tip(prev.commit, tree, holder=prev.holder or prev_ref)
            repo.remember(ref, tip)
            return _captured(req, ref, tip, prev, [], skipped)
        commit = await _commit(git, stager, repo, req, tree, prev)
        staged = _staged(repo, prev.tree, tree) if prev else []
        if prev is not None and staged is None:  # git counts them, while the ref is written
            (ok, failure), files = await asyncio.gather(
                create_ref(git, repo, ref, commit, prev_ref, prev), diff_stats(git, repo, prev.tree, tree)
            )
        else:
            files = staged or []
            ok, failure = await create_ref(git, repo, ref, commit, prev_ref, prev)
        if ok:
            repo.remember(ref, Tip(commit, tree))
            return _captured(req, ref, Tip(commit, tree), prev, files, skipped)
        # Another writer moved one of the refs since we looked, or a killed capture left a ref locked:
        # read them again and retry once.
        clear_ref_locks(repo, req.thread)
    raise CheckpointError("git_error", f"cannot create {ref}: {tail(failure)}")


async def _existing(git: GitRunner, repo: Repo, req: Capture, ref: str, prev_ref: str | None) -> Captured:
    """Idempotent replay: the ref is the checkpoint; only the stats are recomputed."""
    tip = repo.tips[ref]
    prev = repo.tips.get(prev_ref) if prev_ref else None
    files = await diff_stats(git, repo, prev.tree, tip.tree) if prev and prev.tree != tip.tree else []
    return _captured(req, ref, tip, prev, files, [])


async def _commit(git: GitRunner, stager: Stager, repo: Repo, req: Capture, tree: str, prev: Tip | None) -> str:
    message = f"treadle checkpoint {req.thread} {req.scope} #{req.ordinal} ({req.status})"
    repo.fresh = None
    if repo.pending:  # the incremental path: the commit joins its trees and blobs in one pack
        data = commit_object(tree, prev.commit if prev else None, message, IDENTITY)
        oid = commit_id(data)
        base = repo.pending_base
        written = await stager.flush(repo, {oid: (COMMIT, data)})
        if written is not None and prev is not None and base == prev.tree:
            # Every object of this commit that its parent lacks: what the archive needs when it holds the parent.
            repo.fresh = FreshPack(commit=oid.hex(), parent=prev.commit, data=written.body)
        return oid.hex()
    parent = ("-p", prev.commit) if prev else ()
    return (await git.check(repo, "commit-tree", tree, *parent, "-m", message)).decode().strip()


def _staged(repo: Repo, old: str, new: str) -> list[FileStat] | None:
    """The stats the incremental path counted for this change (stats.py), if it did."""
    staged = repo.staged_stats
    if staged is not None and staged[0] == old and staged[1] == new:
        return staged[2]
    return None


async def diff_stats(git: GitRunner, repo: Repo, old: str, new: str) -> list[FileStat]:
    staged = _staged(repo, old, new)
    if staged is not None:
        return staged
    out = await git.check(repo, "diff-tree", "-r", "-z", "-M", "--raw", "--numstat", *NO_DRIVERS, old, new)
    return parse_diff(out)


def _captured(
    req: Capture, ref: str, tip: Tip, prev: Tip | None, files: list[FileStat], skipped: list[Skipped]
) -> Captured:
    # The reply echoes the request's status: a replay may carry a better-known terminal status,
    # and the caller's event, not the commit message, is the record of it.
    return Captured(
        ref=tip.holder or ref, commit=tip.commit, tree=tip.tree, ordinal=req.ordinal, scope=req.scope,
        status=req.status, unchanged=prev is not None and prev.tree == tip.tree, files=files[:MAX_FILES],
        previous_commit=prev.commit if prev else None, files_total=len(files), skipped=skipped[:MAX_FILES],
    )  # fmt: skip
