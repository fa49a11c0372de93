"""L6.5: a fork's own workspace, materialised from the source point's checkpoint.

The checkpoint commit's tree is checked out into a fresh directory through a throwaway index, reading the
source's git objects only: the source workspace, its index, HEAD and refs are never touched. The new
directory is built beside its final path and renamed into place, so a crash never leaves half a workspace,
and a repeated request for the same fork finds it done (idempotent).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import msgspec
from nats.aio.client import Client as NATS

from treadle.core.ids import is_token

from .client import ok, request
from .protocol import CheckpointError, Failure, encode
from .repo import checkpoint_gitdir
from .runner import SERVICE, Launch, base_env, give, make_dirs, run_git

if TYPE_CHECKING:
    from .git import Workspaces

VERB = "materialize"
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_MARKER = "treadle-materialized"  # in the new repo's git dir: which commit it was made from


class Materialize(msgspec.Struct, frozen=True, kw_only=True):
    tenant: str
    source_thread: str
    source_workspace: str
    commit: str
    thread: str  # the fork
    workspace: str  # the fork's, relative to the tenant root


class Materialized(msgspec.Struct, frozen=True, kw_only=True, tag="materialized", tag_field="type"):
    path: str
    commit: str
    created: bool


_request = msgspec.json.Decoder(Materialize)
_reply = msgspec.json.Decoder(Materialized | Failure)


def _resolve(root: Path, tenant: str, workspace: str) -> tuple[Path, Path]:
    rel = PurePosixPath(workspace)
    if not workspace or rel.is_absolute() or ".." in rel.parts or "\0" in workspace:
        raise CheckpointError("bad_request", f"invalid workspace path {workspace!r}")
    tenant_root = (root / tenant).resolve()
    path = (tenant_root / rel).resolve()
    if path == tenant_root or not path.is_relative_to(tenant_root):
        raise CheckpointError("bad_request", f"workspace {workspace!r} escapes the tenant root")
    return path, tenant_root


def _git(launch: Launch, env: dict[str, str], *args: str) -> bytes:
    rc, out, err = run_git(launch, args, env, None, None, 120.0)
    if rc != 0:
        raise CheckpointError("git_error", f"git {args[0]} failed: {err.decode(errors='replace')[-300:]}")
    return out


def materialize(
    root: Path, shadow_root: Path, req: Materialize, *, launch: Launch = SERVICE, base: dict[str, str] | None = None
) -> Materialized:
    """Check the checkpoint ``req.commit`` of the source thread out into the fork's new workspace (a git repo of
    its own, so the fork's checkpoints never mix with the source's).

    git reads the source thread's service-owned git dir only (never a workspace's `.git`), with the hardened
    settings and environment of every checkpoint git, as ``launch`` says (the tenant's uid)."""
    for name, value in (("tenant", req.tenant), ("thread", req.thread), ("source thread", req.source_thread)):
        if not is_token(value):
            raise CheckpointError("bad_request", f"invalid {name} {value!r}")
    if not _COMMIT.fullmatch(req.commit):
        raise CheckpointError("bad_request", f"invalid commit {req.commit!r}")
    source, source_root = _resolve(root, req.tenant, req.source_workspace)
    target, _ = _resolve(root, req.tenant, req.workspace)
    marker = target / ".git" / _MARKER
    if target.exists():
        try:
            done = marker.is_file() and not marker.is_symlink() and marker.read_text().strip() == req.commit
        except (OSError, UnicodeDecodeError):
            done = False
        if done:
            return Materialized(path=str(target), commit=req.commit, created=False)
        raise CheckpointError("bad_request", f"workspace {req.workspace!r} already exists")
    gitdir = checkpoint_gitdir(shadow_root, req.tenant, req.source_thread, source.relative_to(source_root))
    if not gitdir.is_dir():
        raise CheckpointError("workspace_missing", f"the source workspace {req.source_workspace!r} has no checkpoints")
    base = base if base is not None else base_env()
    make_dirs(target.parent, launch.owner)
    building = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    try:
        building.mkdir()
        give(building, launch.owner)
        _git(launch, base, "init", "-q", "-b", "main", str(building))
        # The throwaway index lives in the source's git dir, which the tenant's git children may write.
        with tempfile.TemporaryDirectory(prefix="fork-", dir=gitdir / "treadle") as tmp:
            give(tmp, launch.owner)
            env = dict(base, GIT_DIR=str(gitdir), GIT_WORK_TREE=str(building), GIT_INDEX_FILE=str(Path(tmp) / "index"))
            _git(
                launch, env, "read-tree", req.commit
            )  # objects are read from the source; only the temp index is written
            _git(launch, env, "checkout-index", "-a", "-f")
        (building / ".git" / _MARKER).write_text(req.commit + "\n")
        give(building / ".git" / _MARKER, launch.owner)
        os.rename(building, target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return Materialized(path=str(target), commit=req.commit, created=True)


class MaterializeHandler:
    """The checkpoint service's ``materialize`` verb (git runs on a worker thread)."""

    def __init__(self, root: Path, shadow_root: Path, workspaces: Workspaces | None = None) -> None:
        self._root, self._shadow_root = Path(root), Path(shadow_root).resolve()
        self._workspaces = workspaces

    @classmethod
    def serving(cls, workspaces: Workspaces) -> MaterializeHandler:
        """For the workspaces a checkpoint service serves (same roots, same volume, same tenant uids)."""
        return cls(workspaces._root, workspaces._shadow_root, workspaces)

    async def __call__(self, data: bytes) -> msgspec.Struct:
        req = _request.decode(data)
        if self._workspaces is None:
            return await asyncio.to_thread(materialize, self._root, self._shadow_root, req)
        ws = self._workspaces
        if not is_token(req.tenant):
            raise CheckpointError("bad_request", f"invalid tenant {req.tenant!r}")
        ws.tenant_root(req.tenant)  # made the tenant's (0700, its uid) before anything is built in it
        _resolve(self._root, req.tenant, req.source_workspace)  # this verb's own checks first, its own errors
        await ws.revive(req.tenant, req.source_workspace)  # an evicted source: its git dir back from the archive
        return await asyncio.to_thread(
            materialize, self._root, self._shadow_root, req, launch=ws.launch(req.tenant), base=ws.git.base_env
        )


async def request_materialize(nc: NATS, volume: str, req: Materialize, timeout: float = 30.0) -> Materialized:
    return ok(_reply.decode(await request(nc, volume, VERB, encode(req), timeout)))
