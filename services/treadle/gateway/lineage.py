"""HTTP routes for thread lineage: fork (L6), handoff artifacts (L5.5) and the lineage tree."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from litestar import Request, get, post
from litestar.params import FromPath, JSONBody

from treadle.core.lineage.commands import ForkSource, ForkThread
from treadle.projections import parts
from treadle.views.lineage import HandoffView, LineageNode, LineageView
from treadle.views.thread import ThreadHead, handoff_view, lineage_node, thread_head

from .deps import IdempotencyKey, MinSeq, app_state, path_id, principal, thread_of, thread_read, thread_view, wanted_seq
from .errors import ApiError
from .openapi import ADMITTED, BODY, COMMAND, FORK, ON_THREAD, PARAMS, PATH_ID, THREAD_READ, errors

MAX_DEPTH = 64  # a lineage deeper than this is cut off in the tree view
MAX_NODES = 500


class ForkSourceBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    type: Literal["run", "node", "provider_thread"]
    id: str
    turn: str | None = None


class ForkBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    source: ForkSourceBody
    title: str = ""
    on_active: Literal["latest_checkpoint", "refuse"] = "latest_checkpoint"


class Forked(msgspec.Struct, kw_only=True):
    thread_id: str
    parent_thread_id: str
    seq: int  # of the parent's record of the fork


_PREFIXES = {"run": "run", "node": "node", "provider_thread": "pth"}


@post(
    "/v1/threads/{thread_id:str}/fork",
    status_code=201,
    summary="Fork a thread at a run, node or provider thread (L6): lineage and a pending context transfer",
    tags=["lineage"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, ADMITTED, FORK),
)
async def fork_thread(
    request: Request[Any, Any, Any],
    thread_id: FromPath[str],
    data: JSONBody[ForkBody],
    idempotency_key: IdempotencyKey = None,
) -> Forked:
    who = await principal(request)
    thread = path_id(thread_id, "thr")
    source = data.source
    path_id(source.id, _PREFIXES[source.type])
    body = ForkThread(
        source=ForkSource(type=source.type, id=source.id, turn=source.turn), title=data.title, on_active=data.on_active
    )
    accepted = await app_state(request).commands.send(
        tenant=who.tenant, user=who.user, verb="fork", thread=thread, body=body, idempotency_key=idempotency_key
    )
    return Forked(thread_id=accepted.thread_id, parent_thread_id=thread, seq=accepted.seq)


@get(
    "/v1/handoffs/{handoff_id:str}",
    summary="A context handoff artifact (L5.5) and the run that consumed it",
    tags=["lineage"],
    responses=errors(PARAMS, PATH_ID, {404: ("handoff_not_found",)}),
)
async def get_handoff(
    request: Request[Any, Any, Any], handoff_id: FromPath[str], min_seq: MinSeq = None
) -> HandoffView:
    who = await principal(request)
    handoff_id = path_id(handoff_id, "hoff")
    thread = await thread_of(request, who.tenant, handoff_id, wanted_seq(request, min_seq))
    view = handoff_view(await thread_view(request, who.tenant, thread, min_seq), handoff_id) if thread else None
    if view is None:
        raise ApiError(404, "handoff_not_found", f"handoff {handoff_id} not found")
    return view


@get(
    "/v1/threads/{thread_id:str}/lineage",
    summary="The thread's lineage tree, from its root (L6)",
    tags=["lineage"],
    responses=errors(PARAMS, PATH_ID, THREAD_READ),
)
async def get_lineage(request: Request[Any, Any, Any], thread_id: FromPath[str], min_seq: MinSeq = None) -> LineageView:
    who = await principal(request)
    thread = path_id(thread_id, "thr")

    async def head_of(thread: str, own: bool) -> ThreadHead:
        return await thread_read(
            request, who.tenant, thread, parts.head, thread_head, min_seq if own else None, own=own
        )

    root = await head_of(thread, True)
    for _ in range(MAX_DEPTH):  # up to the root
        parent = root.lineage.parent_thread_id if root.lineage else None
        if parent is None:
            break
        root = await head_of(parent, False)
    seen: set[str] = set()

    async def build(head: ThreadHead, depth: int) -> LineageNode:
        seen.add(head.thread.id)
        children = []
        for child in head.lineage.children if head.lineage and depth < MAX_DEPTH else []:
            if child["thread_id"] in seen or len(seen) >= MAX_NODES:
                continue
            try:
                children.append(await build(await head_of(child["thread_id"], False), depth + 1))
            except ApiError:  # a child not readable yet (being created): leave it out
                continue
        return lineage_node(head, children)

    return LineageView(thread_id=thread, root_thread_id=root.thread.id, tree=await build(root, 0))


ROUTES = [fork_thread, get_handoff, get_lineage]
