"""A thread's workspace on this volume, made from the checkpoint archive (durable.py): after its node's disk was
lost, or its directory evicted, or to move the thread to another volume.

Into a workspace that is missing or empty: the thread's packs are indexed into its git dir (``index-pack`` of
the archive's bytes only, nothing fetched from anywhere else), its checkpoint refs are set as the manifest
names them (so diff, restore and rollback work as before) and the checkpoint's tree is checked out through the
private index, in a directory beside the final one that is renamed into place: a crash never leaves half a
workspace. The workspace comes back as the disk held it: at the archive's head when that descends from the
checkpoint asked for (``_as_left``). A workspace that exists and whose git dir holds that checkpoint is left as it
is (idempotent); one that holds something else is refused. Paths are validated exactly as ``prepare`` validates them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from nats.aio.client import Client as NATS

from .client import ok, request
from .durable import Manifest, Where
from .locks import exclusive
from .protocol import CheckpointError, Failure, encode
from .refs import thread_prefix
from .repo import Repo, checkpoint_gitdir, workspace_key
from .runner import give, make_dirs
from .validation import check_commit, check_token

if TYPE_CHECKING:
    from .durable import Durable
    from .git import Workspaces, _Workspace

VERB = "hydrate"
_REF = re.compile(r"refs/treadle/checkpoints/[A-Za-z0-9._-]{1,128}(/[A-Za-z0-9._-]{1,128}){1,12}")


class Hydrate(msgspec.Struct, frozen=True, kw_only=True):
    tenant: str
    thread: str
    workspace: str  # relative to the tenant root, as in prepare
    checkpoint_id: str | None = None  # None (and no commit): the thread's latest durable checkpoint
    commit: str | None = None  # the checkpoint's commit as the thread's log records it (found without its id)


class Hydrated(msgspec.Struct, frozen=True, kw_only=True, tag="hydrated", tag_field="type"):
    checkpoint_id: str | None
    files: int  # entries of the checked-out tree (0 when the workspace was already there)
    commit: str
    tree: str
    path: str
    created: bool  # False: the workspace already held the checkpoint; nothing was changed
    refs: int = 0  # checkpoint refs recreated
    packs: int = 0  # packs read from the archive


_request = msgspec.json.Decoder(Hydrate)
_reply = msgspec.json.Decoder(Hydrated | Failure)


def decode(data: bytes) -> Hydrate:
    return _request.decode(data)


async def request_hydrate(nc: NATS, volume: str, req: Hydrate, timeout: float = 60.0) -> Hydrated:
    return ok(_reply.decode(await request(nc, volume, VERB, encode(req), timeout)))


async def hydrate(ws: Workspaces, req: Hydrate) -> Hydrated:
    check_token("tenant", req.tenant)
    check_token("thread", req.thread)
    if req.checkpoint_id is not None:
        check_token("checkpoint_id", req.checkpoint_id)
    check_commit(req.commit, "commit")
    durable = ws.durable
    path, tenant_root = ws._resolve(req.tenant, req.workspace)  # prepare's checks: no escape, no symlink out
    relative = path.relative_to(tenant_root)
    where = Where(req.tenant, workspace_key(relative.as_posix()), req.thread)
    async with ws._locked(path) as slot:
        revived = await revive(ws, slot, req.tenant, path, tenant_root)  # evicted: back as it was left, then looked at
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise CheckpointError("bad_request", f"workspace {req.workspace!r} is not a directory")
        shadow = checkpoint_gitdir(ws._shadow_root, req.tenant, req.thread, relative)
        if shadow in slot.repos and not (path.is_dir() and shadow.is_dir()):  # deleted under it: tips of the old one
            slot.repos.pop(shadow).close()
        unused = path.is_dir() and await asyncio.to_thread(_unused, path, shadow)
        if path.is_dir() and any(os.scandir(path)) and not unused:
            present = await _present(ws, durable, slot, req, path, tenant_root, where)
            return msgspec.structs.replace(present, created=True) if revived else present
        if durable is None:
            raise CheckpointError(
                "workspace_missing", f"workspace {req.workspace!r} is missing and there is no archive"
            )
        manifest, commit, tree = _target(await durable.load_typed(where), req)
        if unused:
            await asyncio.to_thread(shutil.rmtree, path / ".git")  # the build is renamed over an empty directory
        for stale in [slot.repos.pop(shadow)] if shadow in slot.repos else []:  # its tips and trees are of the old one
            stale.close()
        return await _build(ws, durable, where, manifest, req, path, shadow, (commit, tree))


_MAIN = b"ref: refs/heads/main\n"  # what `git init -b main` leaves in HEAD


def pristine(dotgit: Path) -> bool:
    """A workspace's `.git` holds nothing that `git init -b main` (what prepare and hydrate run) would not make."""
    if not os.path.lexists(dotgit):
        return True
    if dotgit.is_symlink() or not dotgit.is_dir():
        return False
    if os.path.lexists(dotgit / "index") or os.path.lexists(dotgit / "packed-refs"):
        return False
    try:
        if (dotgit / "HEAD").read_bytes() != _MAIN:
            return False
    except OSError:
        return False
    return not any(names for sub in ("refs", "objects") for _, _, names in os.walk(dotgit / sub))


def _unused(path: Path, shadow: Path) -> bool:
    """A workspace as prepare made it and nothing touched since (no file, a pristine `.git`, no checkpoint): a
    move tried before prepared it for a thread that had no checkpoint yet. It is made anew, not refused."""
    if {e.name for e in os.scandir(path)} != {".git"} or not pristine(path / ".git"):
        return False
    refs = shadow / "refs" / "treadle"
    if (shadow / "packed-refs").exists() or any(names for _, _, names in os.walk(refs)):
        return False
    return True


async def revive(ws: Workspaces, slot: _Workspace, tenant: str, path: Path, tenant_root: Path) -> bool:
    from .eviction import revive  # it builds with this module

    return await revive(ws, slot, tenant, path, tenant_root)


async def _present(
    ws: Workspaces, durable: Durable | None, slot: _Workspace, req: Hydrate, path: Path, tenant_root: Path, where: Where
) -> Hydrated:
    """The workspace is there: done if its git dir holds the checkpoint, refused otherwise (it is never
    overwritten). The archive is asked only for a request that names no commit, or one the git dir lacks."""
    repo = await ws._open(slot, req.tenant, req.thread, path, tenant_root)
    known = {tip.commit: tip.tree for tip in repo.tips.values()}  # what this process captured or read here
    commit = req.commit
    if commit is None:
        if durable is None:
            raise CheckpointError("bad_request", "without an archive, hydrate needs the checkpoint's commit")
        _, commit, _ = _target(await durable.load_typed(where), req)
    if commit not in known:
        async with exclusive(repo):
            rc, out, _ = await ws.git.run(repo, "rev-parse", "--verify", "-q", f"{commit}^{{tree}}")
        if rc != 0:
            if durable is not None:
                _target(await durable.load_typed(where), req)  # unknown to the archive too: unknown_commit
            raise CheckpointError("bad_request", f"workspace {req.workspace!r} exists and holds other checkpoints")
        known[commit] = out.decode().strip()
    return Hydrated(
        checkpoint_id=req.checkpoint_id, files=0, commit=commit, tree=known[commit], path=str(path), created=False
    )


def _target(manifest: Manifest | None, req: Hydrate) -> tuple[Manifest, str, str]:
    if manifest is None or manifest.head is None:
        raise CheckpointError(
            "workspace_missing", f"the archive holds no checkpoint of {req.thread} in {req.workspace!r}"
        )
    trees = {e.commit: e.tree for e in manifest.refs.values()}
    trees[manifest.head] = manifest.head_tree or trees.get(manifest.head, "")
    commit = req.commit or (manifest.ids.get(req.checkpoint_id) if req.checkpoint_id else manifest.head)
    if commit is None or commit not in trees:
        raise CheckpointError("unknown_commit", f"the archive holds no checkpoint {req.checkpoint_id or req.commit}")
    return manifest, commit, trees[commit]


async def _build(
    ws: Workspaces,
    durable: Durable,
    where: Where,
    manifest: Manifest,
    req: Hydrate,
    path: Path,
    shadow: Path,
    target: tuple[str, str],
) -> Hydrated:
    commit, tree = target
    launch = ws.launch(req.tenant)
    if not shadow.is_dir():
        await ws._init_shadow(shadow, launch)
    make_dirs(path.parent, launch.owner)
    building = path.with_name(f".{path.name}.hydrate-{uuid.uuid4().hex}")
    try:
        building.mkdir()
        give(building, launch.owner)
        await ws.git.plain("init", "-q", "-b", "main", str(building), launch=launch)  # as prepare makes one
        repo = ws._repo(building, shadow, None, launch)
        try:
            async with exclusive(repo):
                packs = await _objects(ws, durable, repo, where, manifest)
                refs = await _refs(ws, repo, where, manifest)
                commit, tree = await _as_left(ws, repo, manifest, commit, tree)
                with contextlib.suppress(FileNotFoundError):
                    repo.index.unlink()  # the private index of a lost worktree: the one built here replaces it
                # The private index becomes the checkpoint's tree, with the stat data of the files it writes, so
                # the next capture finds the worktree clean without hashing it.
                # Parallel checkout: writing the files is most of a hydrate (10,000 files: 2.6 s with 4 workers
                # against 6.8 s with one, measured here).
                await ws.git.check(repo, "-c", "checkout.workers=4", "read-tree", "--reset", "-u", commit)
                listed = await ws.git.check(repo, "ls-tree", "-r", "-z", "--name-only", tree)
        finally:
            repo.close()
        os.rename(building, path)  # over a missing or empty directory
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, building, True)
        raise
    return Hydrated(
        checkpoint_id=req.checkpoint_id,
        files=listed.count(b"\0"),
        commit=commit,
        tree=tree,
        path=str(path),
        created=True,
        refs=refs,
        packs=packs,
    )


async def _as_left(ws: Workspaces, repo: Repo, manifest: Manifest, commit: str, tree: str) -> tuple[str, str]:
    """What the lost disk held: the archive's head when it descends from the requested checkpoint, else that
    checkpoint. A head past it is a capture the caller's log has not recorded yet (a node lost before its reply
    left): the capture's retry then finds its ref made from the very worktree it names, never a ref ahead of a
    worktree that lacks its files."""
    head = manifest.head
    if head is None or head == commit:
        return commit, tree
    check_commit(head, "head")
    rc, _, _ = await ws.git.run(repo, "merge-base", "--is-ancestor", commit, head)
    if rc != 0:  # not on the requested checkpoint's line (a rollback's restore left the head elsewhere)
        return commit, tree
    return head, manifest.head_tree or (await ws.git.check(repo, "rev-parse", f"{head}^{{tree}}")).decode().strip()


async def _objects(ws: Workspaces, durable: Durable, repo: Repo, where: Where, manifest: Manifest) -> int:
    """Index the packs of every checkpoint the git dir lacks (all of them, for a lost git dir)."""
    wanted = [c for c in dict.fromkeys([*(e.commit for e in manifest.refs.values()), manifest.head or ""]) if c]
    for commit in wanted:
        check_commit(commit, "commit")
    out = await ws.git.check(repo, "cat-file", "--batch-check", input="".join(f"{c}\n" for c in wanted).encode())
    lacking = [line.split()[0] for line in out.decode().splitlines() if line.endswith(" missing")]
    missing = manifest.packs(lacking) if lacking else []
    for name in missing:
        data = await durable.fetch(where, name)
        await ws.git.check(repo, "index-pack", "--stdin", input=data)
    if missing and manifest.shallow:  # retention left these commits without their history: git stops at them
        for commit in manifest.shallow:
            check_commit(commit, "commit")
        shallow = repo.gitdir / "shallow"
        had = set(shallow.read_text().split()) if shallow.is_file() and not shallow.is_symlink() else set()
        shallow.unlink(missing_ok=True)
        shallow.write_text("".join(f"{c}\n" for c in sorted(had | set(manifest.shallow))))
        give(shallow, repo.owner)
    return len(missing)


async def _refs(ws: Workspaces, repo: Repo, where: Where, manifest: Manifest) -> int:
    """The thread's checkpoint refs as the manifest names them (one transaction)."""
    prefix = thread_prefix(where.thread) + "/"
    script = b""
    for name, entry in manifest.refs.items():
        if not name.startswith(prefix) or not _REF.fullmatch(name) or ".." in name:
            raise CheckpointError("internal", f"the archive's manifest of {where.thread} names a foreign ref {name!r}")
        check_commit(entry.commit, "commit")
        script += b"update %s\0%s\0\0" % (name.encode(), entry.commit.encode())
    if script:
        await ws.git.check(repo, "update-ref", "--stdin", "-z", input=script)
    return len(manifest.refs)
