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
import subprocess
import tempfile
import uuid
from pathlib import Path, PurePosixPath

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

from ..domain.ids import is_token
from ..eventlog import subjects
from .client import CheckpointUnavailable
from .protocol import CheckpointError, Failure, encode
from .repo import user_gitdir

VERB = "materialize"
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_MARKER = "treadle-materialized"  # in the new repo's git dir: which commit it was made from
_SAFE = ("-c", "core.hooksPath=/dev/null", "-c", "core.autocrlf=false", "-c", "core.fsmonitor=false",
         "-c", "gc.auto=0")


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


def _git(env: dict[str, str], *args: str) -> bytes:
    proc = subprocess.run(["git", *_SAFE, *args], env=env, capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise CheckpointError("git_error", f"git {args[0]} failed: {proc.stderr.decode(errors='replace')[-300:]}")
    return proc.stdout


def materialize(root: Path, shadow_root: Path, req: Materialize) -> Materialized:
    """Check the checkpoint ``req.commit`` of the source thread out into the fork's new workspace (a git repo of
    its own, so the fork's checkpoints never mix with the source's)."""
    for name, value in (("tenant", req.tenant), ("thread", req.thread), ("source thread", req.source_thread)):
        if not is_token(value):
            raise CheckpointError("bad_request", f"invalid {name} {value!r}")
    if not _COMMIT.fullmatch(req.commit):
        raise CheckpointError("bad_request", f"invalid commit {req.commit!r}")
    source, tenant_root = _resolve(root, req.tenant, req.source_workspace)
    target, _ = _resolve(root, req.tenant, req.workspace)
    marker = target / ".git" / _MARKER
    if target.exists():
        if marker.is_file() and marker.read_text().strip() == req.commit:
            return Materialized(path=str(target), commit=req.commit, created=False)
        raise CheckpointError("bad_request", f"workspace {req.workspace!r} already exists")
    shadow = shadow_root / req.tenant / f"{req.source_thread}.git"
    gitdir = shadow if shadow.is_dir() else user_gitdir(source, tenant_root)
    if gitdir is None:
        raise CheckpointError("workspace_missing", f"the source workspace {req.source_workspace!r} has no checkpoints")
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    base.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    target.parent.mkdir(parents=True, exist_ok=True)
    building = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    try:
        _git(base, "init", "-q", "-b", "main", str(building))
        with tempfile.TemporaryDirectory(prefix="treadle-fork-") as tmp:
            env = dict(base, GIT_DIR=str(gitdir), GIT_WORK_TREE=str(building), GIT_INDEX_FILE=str(Path(tmp) / "index"))
            _git(env, "read-tree", req.commit)  # objects are read from the source; only the temp index is written
            _git(env, "checkout-index", "-a", "-f")
        (building / ".git" / _MARKER).write_text(req.commit + "\n")
        os.rename(building, target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return Materialized(path=str(target), commit=req.commit, created=True)


class MaterializeHandler:
    """The checkpoint service's ``materialize`` verb (git runs on a worker thread)."""

    def __init__(self, root: Path, shadow_root: Path) -> None:
        self._root, self._shadow_root = Path(root), Path(shadow_root).resolve()

    @classmethod
    def serving(cls, workspaces) -> "MaterializeHandler":
        """For the workspaces a checkpoint service serves (same roots, same volume)."""
        return cls(workspaces._root, workspaces._shadow_root)

    async def __call__(self, data: bytes) -> msgspec.Struct:
        return await asyncio.to_thread(materialize, self._root, self._shadow_root, _request.decode(data))


async def request_materialize(nc: NATS, volume: str, req: Materialize, timeout: float = 30.0) -> Materialized:
    try:
        msg = await nc.request(subjects.checkpoint(volume, VERB), encode(req), timeout=timeout)
    except (NatsTimeout, asyncio.TimeoutError, NoRespondersError) as exc:
        raise CheckpointUnavailable(f"checkpoint service ({volume}) did not answer {VERB}: {exc!r}") from None
    reply = _reply.decode(msg.data)
    if isinstance(reply, Failure):
        raise CheckpointError(reply.code, reply.message)
    return reply
