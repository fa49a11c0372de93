"""HTTP routes for thread lineage: fork (L6, over ``usecases.lineage``), handoff artifacts (L5.5) and the
lineage tree."""

from __future__ import annotations

from litestar import get, post
from litestar.params import FromPath, JSONBody

from treadle.api import ForkBody, Forked
from treadle.projections import parts
from treadle.usecases import lineage
from treadle.views.lineage import HandoffView, LineageNode, LineageView
from treadle.views.thread import ThreadHead, handoff_view, lineage_node, thread_head

from .deps import (
    HttpRequest,
    IdempotencyKey,
    MinSeq,
    Who,
    app_state,
    path_id,
    thread_of,
    thread_read,
    thread_view,
    wanted_seq,
)
from .errors import ApiError
from .openapi import ADMITTED, BODY, COMMAND, FORK, ON_THREAD, PARAMS, PATH_ID, THREAD_READ, errors

MAX_DEPTH = 64  # a lineage deeper than this is cut off in the tree view
MAX_NODES = 500


@post(
    "/v1/threads/{thread_id:str}/fork",
    status_code=201,
    summary="Fork a thread at a run, node or provider thread (L6): lineage and a pending context transfer",
    tags=["lineage"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, ADMITTED, FORK),
)
async def fork_thread(
    request: HttpRequest,
    who: Who,
    thread_id: FromPath[str],
    data: JSONBody[ForkBody],
    idempotency_key: IdempotencyKey = None,
) -> Forked:
    return await lineage.fork(who, app_state(request).commands, thread_id, data, idempotency_key)


@get(
    "/v1/handoffs/{handoff_id:str}",
    summary="A context handoff artifact (L5.5) and the run that consumed it",
    tags=["lineage"],
    responses=errors(PARAMS, PATH_ID, {404: ("handoff_not_found",)}),
)
async def get_handoff(request: HttpRequest, who: Who, handoff_id: FromPath[str], min_seq: MinSeq = None) -> HandoffView:
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
async def get_lineage(request: HttpRequest, who: Who, thread_id: FromPath[str], min_seq: MinSeq = None) -> LineageView:
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
        try:
            root = await head_of(parent, False)
        except ApiError:  # a deleted ancestor (L1.4): the tree starts below it
            break
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
