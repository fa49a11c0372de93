"""A deleted thread's data on its volume (L1.4): its checkpoint refs in the workspace's git dir and, when the
workspace is the thread's own (``threads/<thread>``, which no other thread uses), the workspace and its git dir
too. A workspace the thread shared (one named at creation) keeps its files and the other threads' refs.
Idempotent: a workspace already gone answers as erased. Paths are validated exactly as ``prepare`` validates
them, so a tombstone cannot name a directory outside the tenant root."""

from __future__ import annotations

import asyncio
import shutil
from typing import TYPE_CHECKING

import msgspec
from nats.aio.client import Client as NATS

from .client import ok, request
from .locks import exclusive
from .protocol import CheckpointError, Failure, encode
from .refs import thread_prefix
from .validation import check_token

if TYPE_CHECKING:
    from .git import Workspaces

VERB = "erase"


class Erase(msgspec.Struct, frozen=True, kw_only=True):
    tenant: str
    thread: str
    workspace: str  # relative to the tenant root, as in prepare


class Erased(msgspec.Struct, frozen=True, kw_only=True, tag="erased", tag_field="type"):
    refs: int  # checkpoint refs deleted
    workspace_removed: bool  # the thread's own workspace and its git dir are gone


_request = msgspec.json.Decoder(Erase)
_reply = msgspec.json.Decoder(Erased | Failure)


def decode(data: bytes) -> Erase:
    return _request.decode(data)


async def request_erase(nc: NATS, volume: str, req: Erase, timeout: float = 60.0) -> Erased:
    return ok(_reply.decode(await request(nc, volume, VERB, encode(req), timeout)))


async def erase(ws: Workspaces, req: Erase) -> Erased:
    check_token("tenant", req.tenant)
    check_token("thread", req.thread)
    path, tenant_root = ws._resolve(req.tenant, req.workspace)
    own = path == (tenant_root / "threads" / req.thread)
    async with ws._locked(path) as entry:
        if not path.is_dir():
            return Erased(refs=0, workspace_removed=own)
        repo = await ws._open(entry, req.tenant, req.thread, path, tenant_root)
        async with exclusive(repo):
            out = await ws.git.check(
                repo, "for-each-ref", "--format=%(refname)%00%(objectname)", thread_prefix(req.thread) + "/"
            )
            refs = [line.split("\0") for line in out.decode().splitlines() if line]
            if refs:
                script = b"".join(b"delete %s\0%s\0" % (name.encode(), commit.encode()) for name, commit in refs)
                rc, _, err = await ws.git.run(repo, "update-ref", "--stdin", "-z", input=script)
                if rc != 0:
                    raise CheckpointError("git_error", f"cannot erase refs: {err.decode(errors='replace')[-300:]}")
                for name, _ in refs:
                    repo.tips.pop(name, None)
        if not own:
            return Erased(refs=len(refs), workspace_removed=False)
        for cached in entry.repos.values():
            cached.close()
        entry.repos.clear()
        ws._shadows.pop((req.tenant, req.thread, path), None)
        await asyncio.to_thread(shutil.rmtree, repo.gitdir, True)
        await asyncio.to_thread(shutil.rmtree, path, True)
    return Erased(refs=len(refs), workspace_removed=True)
