"""The API's lists, paged with opaque cursors, all in one shape: ``{"items", "next_cursor", "seq"}``.

A thread's lists (runs, messages, activity, requests, checkpoints, handoffs) are in the order things happened
and only ever grow at the end, so a cursor is the index of the next item: pages never skip or repeat an item
while the thread grows. A page is read from the stored items alone (the projection keeps each item of a long
list apart), so its cost is the page's, not the thread's. The tenant's threads are newest first; a cursor
there is the last thread of the page. Cursors are MACed (``cursors``) and bound to the tenant, thread, list
and filter. Every list reads its writes: ``min_seq`` (or ``X-Treadle-Min-Seq``) as the other reads."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
from litestar import Response, get
from litestar.params import FromPath, QueryParameter

from treadle.usecases import messages, threads
from treadle.usecases.ports import ArchivedFilter
from treadle.views.pages import (
    ActivityPage,
    CheckpointPage,
    HandoffPage,
    MessagePage,
    RequestPage,
    RunPage,
    ThreadPage,
)

from . import cursors
from .deps import (
    HttpRequest,
    MinSeq,
    MinSeqHeader,
    Reads,
    Who,
    app_state,
    documented,
    folded_doc,
    fresh,
    json_response,
    path_id,
    wanted_seq,
)
from .errors import ApiError
from .openapi import PARAMS, PATH_ID, THREAD_READ, errors
from .params import number

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
SCAN = 1000  # items a filtered page looks at, at most: a page may hold fewer than `limit` and still go on
REQUEST_STATUSES = ("pending", "resolved", "not_resumable", "cancelled")
MAX_SEARCH = 200  # characters of a thread-title search

Limit = Annotated[str | None, QueryParameter(description=f"items per page, 1..{MAX_LIMIT} ({DEFAULT_LIMIT})")]
Cursor = Annotated[str | None, QueryParameter(description="the next_cursor of the previous page")]
Search = Annotated[
    str | None,
    QueryParameter(description=f"only threads whose title contains this, ignoring case (1..{MAX_SEARCH} characters)"),
]
Archived = Annotated[
    str | None,
    QueryParameter(
        description="archived threads: exclude (the default: left out), include (listed with the others) or only"
    ),
]
ARCHIVED_CHOICES = ("exclude", "include", "only")
CURSOR = {400: ("invalid_cursor",)}  # _position, _thread_list


class _RunOf(msgspec.Struct):
    run_id: str | None = None


class _StatusOf(msgspec.Struct):
    status: str = ""


class _TitleOf(msgspec.Struct):
    title: str = ""
    archived: bool = False


_run_of = msgspec.json.Decoder(_RunOf)
_status_of = msgspec.json.Decoder(_StatusOf)
_title_of = msgspec.json.Decoder(_TitleOf)
_raw_items = msgspec.json.Decoder(list[msgspec.Raw])
# The sequence and one list of a whole thread document, its items left as JSON.
_DOCS: dict[str, Any] = {
    name: msgspec.defstruct(f"{name}_doc", [("seq", int), (name, list[msgspec.Raw])])
    for name in ("runs", "messages", "activity", "requests", "checkpoints", "handoffs")
}


def _limit(value: str | None) -> int:
    return number(value, "limit", low=1, high=MAX_LIMIT) or DEFAULT_LIMIT


def _position(request: HttpRequest, tenant: str, cursor: str | None, **bound: str) -> cursors.Position | None:
    if cursor is None:
        return None
    try:
        return cursors.decode(app_state(request).cursor_key, tenant, cursor, **bound)
    except cursors.InvalidCursor as exc:
        raise ApiError(400, "invalid_cursor", f"cursor: {exc}", {"parameter": "cursor"}) from None


def _page(items: list[bytes], next_cursor: str | None, seq: int | None) -> Response[bytes]:
    tail = msgspec.json.encode({"next_cursor": next_cursor, "seq": seq})
    return json_response(b'{"items":[' + b",".join(items) + b"]," + tail[1:])


async def items(
    request: HttpRequest, tenant: str, thread: str, name: str, start: int, count: int
) -> tuple[int, int, list[bytes]]:
    """(seq, total, items start..start+count) of the thread's list ``name``, reflecting its last event at least:
    from the stored items when the projection has them, else from the thread folded from its log (when the
    projection is behind, or not (wholly) stored in this view version)."""
    store = app_state(request).projections

    async def stored() -> tuple[int, tuple[int, int, list[bytes]]] | None:
        if name == "requests":  # a short list stored whole, not item by item
            if (part := await store.part(tenant, thread, name)) is None:
                return None
            every = _raw_items.decode(part[1])
            return part[0], (part[0], len(every), [bytes(r) for r in every[start : start + count]])
        got = await store.slice(tenant, thread, name, start, count)
        return None if got is None else (got.seq, (got.seq, got.total, got.items))

    if (found := await fresh(request, tenant, thread, stored)) is not None:
        return found[1]
    doc = await folded_doc(request, tenant, thread)
    whole: Any = msgspec.json.decode(doc, type=_DOCS[name])
    every = getattr(whole, name)
    return whole.seq, len(every), [bytes(r) for r in every[start : start + count]]


async def _thread_list(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    thread_id: str,
    name: str,
    limit: str | None,
    cursor: str | None,
    min_seq: str | None,
    *,
    keep: Callable[[bytes], bool] | None = None,
    filter: str = "",
) -> Response[bytes]:
    """One page of a thread's list ``name``; with ``keep``, only the items it accepts (a filter, named by
    ``filter`` in the cursor), looking at ``SCAN`` items at most."""
    thread = path_id(thread_id, "thr")
    count = _limit(limit)
    wanted_seq(request, min_seq)  # validated: a malformed one is a 400 (every list waits for the last event)
    position = _position(request, who.tenant, cursor, list=name, thread=thread, filter=filter)
    start = position.index if position else 0
    seq, total, window = await messages.items(
        who, reads, thread, name, start, count if keep is None else max(count, SCAN)
    )
    if start > total:
        raise ApiError(400, "invalid_cursor", "cursor: beyond the end of the list", {"parameter": "cursor"})
    items, end = window, start + len(window)
    if keep is not None:
        items = []
        for i, item in enumerate(window):
            if keep(item):
                items.append(item)
                if len(items) == count:
                    end = start + i + 1
                    break
    more = cursors.encode(app_state(request).cursor_key, who.tenant, cursors.at(name, thread, filter, end))
    return _page(items, more if end < total else None, seq)


@get(
    "/v1/threads",
    summary="The tenant's threads, newest first, a page at a time",
    tags=["threads"],
    responses=documented(ThreadPage) | errors(PARAMS, CURSOR),
)
async def list_threads(
    who: Who, reads: Reads, limit: Limit = None, cursor: Cursor = None, q: Search = None, archived: Archived = None
) -> Response[bytes]:
    found, more = await threads.page(who, reads, _limit(limit), cursor, q, _archived(archived))
    return _page(found, more, None)


def _archived(value: str | None) -> ArchivedFilter:
    if value is None or value == "exclude":
        return "exclude"
    if value == "include":
        return "include"
    if value == "only":
        return "only"
    raise ApiError(
        400,
        "invalid_parameter",
        f"archived must be one of {', '.join(ARCHIVED_CHOICES)}",
        {"parameter": "archived", "choices": list(ARCHIVED_CHOICES)},
    )


async def threads_page(
    request: HttpRequest,
    tenant: str,
    count: int,
    cursor: str | None,
    q: str | None,
    archived: ArchivedFilter = "include",
) -> tuple[list[bytes], str | None]:
    """A page of the tenant's thread summaries, newest first, and the next page's cursor (None: the last).
    Leaving archived threads out (or keeping them alone) filters a scan, as a search does."""
    if q is not None or archived != "include":
        return await _search_threads(request, tenant, _needle(q) if q is not None else None, count, cursor, archived)
    position = _position(request, tenant, cursor, list="threads")
    after = (position.score, position.after_id) if position else None
    rows = await app_state(request).projections.threads(tenant, count + 1, after)
    page = rows[:count]
    more = None
    if len(rows) > count:
        score, last, _ = page[-1]
        more = cursors.encode(app_state(request).cursor_key, tenant, cursors.after_thread(score, last))
    return [summary for _, _, summary in page if summary], more


def _needle(q: str) -> str:
    if not 1 <= len(q) <= MAX_SEARCH:
        raise ApiError(
            400,
            "invalid_parameter",
            f"q must be 1..{MAX_SEARCH} characters",
            {"parameter": "q", "low": 1, "high": MAX_SEARCH},
        )
    return q.casefold()


def _kept(summary: bytes, needle: str | None, archived: ArchivedFilter) -> bool:
    found = _title_of.decode(summary)
    if archived != "include" and found.archived != (archived == "only"):
        return False
    return needle is None or needle in found.title.casefold()


async def _search_threads(
    request: HttpRequest,
    tenant: str,
    needle: str | None,
    count: int,
    cursor: str | None,
    archived: ArchivedFilter = "include",
) -> tuple[list[bytes], str | None]:
    """The tenant's threads whose title contains ``needle`` (None: any) and kept by ``archived``, newest first,
    looking at ``SCAN`` threads at most (a page's worth when none of those is left out): a page may hold fewer than ``count`` and still go on. The cursor is
    bound to the filter by a digest (a search may be longer than a cursor), so it continues only the same one."""
    bound = "" if needle is None else "q=" + hashlib.sha256(needle.encode(errors="surrogatepass")).hexdigest()[:32]
    if archived != "include":
        bound += f"&archived={archived}"
    position = _position(request, tenant, cursor, list="threads", filter=bound)
    after = (position.score, position.after_id) if position else None
    # A page's worth first: when nothing in it is filtered out (the default list of a tenant with few archived
    # threads), that is the answer, and only a filtered page reads on, up to SCAN.
    projections = app_state(request).projections
    rows = await projections.threads(tenant, count + 1, after)
    if len(rows) > count and sum(1 for _, _, s in rows[:count] if s and _kept(s, needle, archived)) < count:
        rows = await projections.threads(tenant, SCAN + 1, after)
    items: list[bytes] = []
    end: tuple[int, str] | None = None
    for i, (score, thread, summary) in enumerate(rows[:SCAN]):
        if summary and _kept(summary, needle, archived):
            items.append(summary)
            if len(items) == count:
                end = (score, thread) if i + 1 < len(rows) else None
                break
    else:
        end = rows[SCAN - 1][:2] if len(rows) > SCAN else None
    more = (
        cursors.encode(app_state(request).cursor_key, tenant, cursors.after_thread(end[0], end[1], bound))
        if end
        else None
    )
    return items, more


@get(
    "/v1/threads/{thread_id:str}/runs",
    summary="The thread's runs in the order they were queued, a page at a time",
    tags=["runs"],
    responses=documented(RunPage) | errors(PARAMS, PATH_ID, THREAD_READ, CURSOR),
)
async def list_runs(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    thread_id: FromPath[str],
    limit: Limit = None,
    cursor: Cursor = None,
    min_seq: MinSeq = None,
    x_treadle_min_seq: MinSeqHeader = None,
) -> Response[bytes]:
    return await _thread_list(request, who, reads, thread_id, "runs", limit, cursor, min_seq)


@get(
    "/v1/threads/{thread_id:str}/messages",
    summary="The thread's messages in the order they were created, a page at a time",
    tags=["messages"],
    responses=documented(MessagePage) | errors(PARAMS, PATH_ID, THREAD_READ, CURSOR),
)
async def list_messages(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    thread_id: FromPath[str],
    limit: Limit = None,
    cursor: Cursor = None,
    min_seq: MinSeq = None,
    x_treadle_min_seq: MinSeqHeader = None,
) -> Response[bytes]:
    return await _thread_list(request, who, reads, thread_id, "messages", limit, cursor, min_seq)


@get(
    "/v1/threads/{thread_id:str}/activity",
    summary="Activity (L12.4), each entry with its run and node ids, oldest first, a page at a time",
    tags=["runs"],
    responses=documented(ActivityPage) | errors(PARAMS, PATH_ID, THREAD_READ, CURSOR),
)
async def list_activity(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    thread_id: FromPath[str],
    run_id: Annotated[str | None, QueryParameter(description="only this run's activity")] = None,
    limit: Limit = None,
    cursor: Cursor = None,
    min_seq: MinSeq = None,
    x_treadle_min_seq: MinSeqHeader = None,
) -> Response[bytes]:
    if run_id is None:
        return await _thread_list(request, who, reads, thread_id, "activity", limit, cursor, min_seq)
    wanted_run = path_id(run_id, "run")
    return await _thread_list(
        request,
        who,
        reads,
        thread_id,
        "activity",
        limit,
        cursor,
        min_seq,
        keep=lambda item: _run_of.decode(item).run_id == wanted_run,
        filter=f"run_id={wanted_run}",
    )


@get(
    "/v1/threads/{thread_id:str}/requests",
    summary="The thread's runtime requests (L11) in the order they were opened; status=pending: those waiting",
    tags=["requests"],
    responses=documented(RequestPage) | errors(PARAMS, PATH_ID, THREAD_READ, CURSOR),
)
async def list_requests(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    thread_id: FromPath[str],
    status: Annotated[str | None, QueryParameter(description=", ".join(REQUEST_STATUSES))] = None,
    limit: Limit = None,
    cursor: Cursor = None,
    min_seq: MinSeq = None,
    x_treadle_min_seq: MinSeqHeader = None,
) -> Response[bytes]:
    if status is None:
        return await _thread_list(request, who, reads, thread_id, "requests", limit, cursor, min_seq)
    if status not in REQUEST_STATUSES:
        raise ApiError(
            400,
            "invalid_parameter",
            f"status must be one of {', '.join(REQUEST_STATUSES)}",
            {"parameter": "status", "allowed": list(REQUEST_STATUSES)},
        )
    return await _thread_list(
        request,
        who,
        reads,
        thread_id,
        "requests",
        limit,
        cursor,
        min_seq,
        keep=lambda item: _status_of.decode(item).status == status,
        filter=f"status={status}",
    )


@get(
    "/v1/threads/{thread_id:str}/checkpoints",
    summary="The thread's checkpoints (L10) in the order they were captured, a page at a time",
    tags=["checkpoints"],
    responses=documented(CheckpointPage) | errors(PARAMS, PATH_ID, THREAD_READ, CURSOR),
)
async def list_checkpoints(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    thread_id: FromPath[str],
    limit: Limit = None,
    cursor: Cursor = None,
    min_seq: MinSeq = None,
    x_treadle_min_seq: MinSeqHeader = None,
) -> Response[bytes]:
    return await _thread_list(request, who, reads, thread_id, "checkpoints", limit, cursor, min_seq)


@get(
    "/v1/threads/{thread_id:str}/handoffs",
    summary="The thread's context handoffs (L5.5) in the order they were made, a page at a time",
    tags=["lineage"],
    responses=documented(HandoffPage) | errors(PARAMS, PATH_ID, THREAD_READ, CURSOR),
)
async def list_handoffs(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    thread_id: FromPath[str],
    limit: Limit = None,
    cursor: Cursor = None,
    min_seq: MinSeq = None,
    x_treadle_min_seq: MinSeqHeader = None,
) -> Response[bytes]:
    return await _thread_list(request, who, reads, thread_id, "handoffs", limit, cursor, min_seq)


ROUTES = [list_threads, list_runs, list_messages, list_activity, list_requests, list_checkpoints, list_handoffs]
