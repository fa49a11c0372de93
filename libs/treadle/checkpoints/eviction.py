"""An idle thread's workspace and git dir leave the node's disk, and come back before anything reads them.

Evicted only when the disk holds nothing the archive (durable.py) cannot give back: every checkpoint ref of the
git dir is in the thread's manifest, the worktree's tree is the manifest's head, nothing beside it is left out of
checkpoints (ignored, too large, a nested repository, an empty directory) and the workspace's own `.git` holds
no commit and no staged file (checkpoints never read it). A tombstone in the service's directory records where
the workspace was left; every request that touches the workspace (prepare, capture, diff, restore, hydrate,
materialize from it) first rebuilds it from the archive as it was (hydrate.py's build), then drops the tombstone.

Race-safety: the decision and the deletion happen under the workspace's lock (git.Workspaces._locked), and the
caller's ``still_needed`` reads the thread's events under it too. A message's run is appended before its
supervisor asks for the hydrate, so either the read sees the run (nothing is evicted) or the hydrate waits for
the lock and finds the tombstone (the workspace is rebuilt first).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from treadle.core.eviction import own_workspace

from .durable import Where
from .hydrate import Hydrate, _build, pristine
from .locks import exclusive
from .protocol import CheckpointError
from .refs import thread_prefix
from .repo import Repo, checkpoint_gitdir, workspace_key
from .validation import check_token

if TYPE_CHECKING:
    from .durable import Durable
    from .git import Workspaces, _Workspace

TOMBSTONES = "evicted"  # <shadow root>/<tenant>/evicted/<workspace key>


class Tombstone(msgspec.Struct, frozen=True, kw_only=True):
    thread: str
    workspace: str
    commit: str  # the manifest's head: the checkpoint the workspace was left at
    tree: str


class Evicted(msgspec.Struct, frozen=True, kw_only=True):
    tenant: str
    thread: str
    commit: str
    bytes: int  # what the workspace and its git dir held on disk
    files: int


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Tombstone).decode


def tombstone(shadow_root: Path, tenant: str, relative: str) -> Path:
    return shadow_root / tenant / TOMBSTONES / workspace_key(relative)


async def evict(
    ws: Workspaces, tenant: str, thread: str, still_needed: Callable[[], Awaitable[str | None]]
) -> Evicted | str:
    """Evict ``thread``'s own workspace; why not, as a sentence, when it stays. ``still_needed``: why the thread
    needs its workspace here now (None: it does not), asked under the workspace's lock."""
    check_token("tenant", tenant)
    check_token("thread", thread)
    durable = ws.durable
    if durable is None:
        return "checkpoints are not kept off the node"
    path, tenant_root = ws._resolve(tenant, own_workspace(thread))
    relative = path.relative_to(tenant_root).as_posix()
    async with ws._locked(path, touch=False) as slot:
        if path.is_symlink() or not path.is_dir():
            return "not on this disk"
        why = await still_needed()
        if why is not None:
            return why
        repo = await ws._open(slot, tenant, thread, path, tenant_root)
        async with exclusive(repo):
            kept = await _reproducible(ws, durable, repo, ws.where(tenant, thread, repo), thread)
            if isinstance(kept, str):
                return kept
            commit, tree = kept
            held = await asyncio.to_thread(_usage, path, repo.gitdir)
            stone = tombstone(ws._shadow_root, tenant, relative)
            _write(stone, Tombstone(thread=thread, workspace=relative, commit=commit, tree=tree))
            gone = [_aside(path), _aside(repo.gitdir)]  # renamed first: a crash leaves no half workspace in place
        slot.repos.pop(repo.gitdir, None)
        repo.close()
    # Deleted outside the lock: a message arriving now rebuilds the workspace without waiting for the deletion
    # (20,000 files took 40 s to unlink on a slow disk here).
    await asyncio.to_thread(_remove, gone)
    return Evicted(tenant=tenant, thread=thread, commit=commit, bytes=held[0], files=held[1])


async def revive(ws: Workspaces, slot: _Workspace, tenant: str, path: Path, tenant_root: Path) -> bool:
    """Under the workspace's lock: an evicted workspace is rebuilt from the archive as it was left. True when it
    was; False when it was not evicted (one stat)."""
    stone = slot.stone
    if stone is None:  # the slot is the resolved path's: its record's name, made once
        stone = slot.stone = tombstone(ws._shadow_root, tenant, path.relative_to(tenant_root).as_posix())
    try:
        left = _decode(stone.read_bytes())
    except FileNotFoundError:
        return False
    except msgspec.DecodeError:
        relative = path.relative_to(tenant_root).as_posix()
        raise CheckpointError("internal", f"the eviction record of {relative!r} is unreadable") from None
    relative = path.relative_to(tenant_root).as_posix()
    rebuilt = False
    if not os.path.lexists(path):
        durable = ws.durable
        if durable is None:
            raise CheckpointError("workspace_missing", f"workspace {relative!r} was evicted and there is no archive")
        where = Where(tenant, workspace_key(relative), left.thread)
        manifest = await durable.load_typed(where)
        if manifest is None:
            raise CheckpointError("workspace_missing", f"the archive holds no checkpoint of {left.thread}")
        shadow = checkpoint_gitdir(ws._shadow_root, tenant, left.thread, Path(relative))
        stale = slot.repos.pop(shadow, None)
        if stale is not None:
            stale.close()
        request = Hydrate(tenant=tenant, thread=left.thread, workspace=relative, commit=left.commit)
        await _build(ws, durable, where, manifest, request, path, shadow, (left.commit, left.tree))
        rebuilt = True
    stone.unlink(missing_ok=True)
    return rebuilt


async def _reproducible(
    ws: Workspaces, durable: Durable, repo: Repo, where: Where, thread: str
) -> tuple[str, str] | str:
    """(commit, tree) the archive rebuilds the workspace at, when that is all the disk holds; else why not."""
    out = await ws.git.check(repo, "for-each-ref", "--format=%(refname)%00%(objectname)", "refs/treadle/")
    refs = dict(line.split("\0", 1) for line in out.decode().splitlines())
    if any(not name.startswith(thread_prefix(thread) + "/") for name in refs):
        return "its git dir holds another thread's checkpoints"
    manifest = await durable.load_typed(where)
    if manifest is None or manifest.head is None or manifest.head_tree is None:
        return "no durable checkpoint"
    if any(name not in manifest.refs or manifest.refs[name].commit != commit for name, commit in refs.items()):
        return "a checkpoint is not in the archive yet"
    if await ws.stager.tree(repo, None, whole=True) != manifest.head_tree:
        return "changed since its last durable checkpoint"
    others = await ws.git.check(repo, "ls-files", "-z", "--others", "--directory")
    if others:
        return "it holds files checkpoints leave out"
    if not await asyncio.to_thread(pristine, repo.worktree / ".git"):
        return "its own repository has commits or staged files"
    return manifest.head, manifest.head_tree


def _usage(*tops: Path) -> tuple[int, int]:
    """(bytes allocated, files) below ``tops``, never through a symlink."""
    size = files = 0
    for top in tops:
        for d, _, names in os.walk(top):
            for name in names:
                try:
                    st = os.lstat(os.path.join(d, name))
                except FileNotFoundError:
                    continue
                size += st.st_blocks * 512
                files += 1
    return size, files


def _write(stone: Path, record: Tombstone) -> None:
    stone.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = stone.with_name(f".{stone.name}.{uuid.uuid4().hex}")
    tmp.write_bytes(_encode(record))
    os.rename(tmp, stone)


def _aside(path: Path) -> Path:
    gone = path.with_name(f".{path.name}.evicted-{uuid.uuid4().hex}")
    os.rename(path, gone)
    return gone


def _remove(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def leftovers(threads_dir: Path) -> list[Path]:
    """Directories an eviction renamed aside and a crash left (removed by the next sweep)."""
    try:
        return [Path(e.path) for e in os.scandir(threads_dir) if e.name.startswith(".") and ".evicted-" in e.name]
    except FileNotFoundError:
        return []
