"""The thread tools: each one is the HTTP route's own command or read (``deps``, ``lists``, ``control``,
``lineage``), with the caller's bearer token and tenant; results are the public views, failures typed
(:mod:`.errors`). A ``client_request_id`` is the route's ``Idempotency-Key``, so a retried call is the same call."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ListToolsResult
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from treadle.core.run.model import TERMINAL_RUN_STATUSES
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.projections import parts
from treadle.providers.registry import offered
from treadle.views.thread import RunView, ThreadHead, ThreadView, run_view, thread_head

from .. import control, deps, lineage, lists
from ..deps import app_state, check_message_size, check_new_thread_mode, path_id, principal
from ..errors import ApiError
from . import tasks
from .base import (
    CREDENTIAL_KEY,
    MAX_WAIT_SECONDS,
    SCRIPT,
    RequestId,
    ThreadId,
    builtins,
    guarded,
    key,
    request_of,
)
from .errors import CODES, KINDS, invalid, tool_error

MAX_THREADS_AT_ONCE = 20
MAX_READ_ITEMS = 200
MAX_TEXT_CHARS = 20_000  # per item of a read: an agent's context is the scarce thing, not the API's
SEND_MODES = {"auto": "auto", "queue": "queue_after_active", "steer": "steer_active", "restart": "restart_active"}


class NewThread(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(default="", max_length=200)
    provider: str = "scripted"
    model: str | None = None
    runtime_mode: str = "approval_required"
    text: str | None = Field(default=None, description="a first message: starts the thread's first run")
    script: dict[str, Any] | None = Field(default=None, description=SCRIPT)


async def _create(request: Request[Any, Any, Any], spec: NewThread, request_id: str | None) -> dict[str, Any]:
    who = await principal(request)
    await check_new_thread_mode(request, who.tenant, spec.runtime_mode)
    body = CreateThread(title=spec.title, provider=spec.provider, model=spec.model, runtime_mode=spec.runtime_mode)
    accepted = await app_state(request).commands.send(
        tenant=who.tenant,
        user=who.user,
        verb="create",
        thread=None,
        body=body,
        idempotency_key=key(request_id, "create"),
    )
    made: dict[str, Any] = {"thread_id": accepted.thread_id, "seq": accepted.seq}
    if spec.text is not None:
        made["message"] = await _send(
            request, accepted.thread_id or "", spec.text, "auto", None, key(request_id, "send"), script=spec.script
        )
    return made


async def _send(
    request: Request[Any, Any, Any],
    thread: str,
    text: str,
    mode: str,
    target_run_id: str | None,
    idem: str | None,
    **more: Any,
) -> dict[str, Any]:
    who = await principal(request)
    thread = path_id(thread, "thr")
    if target_run_id is not None:
        path_id(target_run_id, "run")
    check_message_size(request, text, more.get("script"))
    body = SendMessage(text=text, mode=SEND_MODES[mode], target_run_id=target_run_id, **more)
    accepted = await app_state(request).commands.send(
        tenant=who.tenant, user=who.user, verb="send", thread=thread, body=body, idempotency_key=idem
    )
    return {
        "thread_id": thread,
        "message_id": accepted.message_id,
        "run_id": accepted.run_id,
        "disposition": accepted.disposition,
        "seq": accepted.seq,
    }


def _bounded(item: dict[str, Any], max_chars: int) -> bool:
    """Cut an item's text to ``max_chars``; True when something was cut."""
    text = item.get("text")
    if isinstance(text, str) and len(text) > max_chars:
        item["text"] = text[:max_chars]
        item["text_chars"] = len(text)
        item["truncated"] = True
        return True
    return False


ThreadStatus = Literal["active", "idle", "completed", "failed", "interrupted", "cancelled", "rolled_back"]


def _listed(summary: dict[str, Any], status: str | None, provider: str | None) -> bool:
    if provider is not None and summary.get("provider") != provider:
        return False
    if status is None:
        return True
    if summary.get("active_run_id"):
        return status == "active"
    return (summary.get("last_run_status") or "idle") == status


class _Server(MCPServer):
    """Arguments that fail their schema are a typed ``invalid_request`` too, naming the fields (not the values);
    a provider session's credential sees and calls only its own tools."""

    async def _handle_list_tools(self, ctx: Any, params: Any) -> ListToolsResult:
        credential = ctx.request.scope.get(CREDENTIAL_KEY) if ctx.request is not None else None
        tools = await self.list_tools()
        if credential is not None:
            tools = [t for t in tools if t.name in credential.capabilities]
        return ListToolsResult(tools=tools)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        credential = context.request_context.request.scope.get(CREDENTIAL_KEY) if context else None  # type: ignore[union-attr]
        if credential is not None and name not in credential.capabilities:
            raise tool_error(name, ApiError(403, "forbidden", f"this session may not call {name}", {"tool": name}))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                fields = sorted({".".join(map(str, e["loc"])) for e in exc.__cause__.errors()})
                raise invalid(name, f"invalid arguments: {', '.join(fields)}", fields=fields) from None
            if isinstance(exc.__cause__, ToolError):  # ours, which the SDK prefixed: the JSON alone, parseable
                raise exc.__cause__ from None
            raise


async def _waited_run(run_id: str | None, snap: parts.Snapshot) -> tuple[RunView | None, int]:
    """``thread_wait``'s read: the run (the thread's newest without an id) and the sequence it reflects."""
    run = await (parts.run(snap, run_id) if run_id is not None else parts.latest_run(snap))
    return run, snap.sequence


def _run_of(run_id: str | None, view: ThreadView) -> tuple[RunView | None, int]:
    """The same answer from the whole document (a thread not wholly projected yet)."""
    target = run_id or (view.runs[-1].id if view.runs else None)
    return (run_view(view, target) if target else None), view.seq


async def _head(snap: parts.Snapshot) -> tuple[ThreadHead, int]:
    """``thread_transfers``' read: the thread's lineage, transfers and handoffs, without its runs."""
    return await parts.head(snap), snap.sequence


def _head_of(view: ThreadView) -> tuple[ThreadHead, int]:
    return thread_head(view), view.seq


def server() -> MCPServer:
    mcp = _Server(
        "treadle",
        instructions="Treadle's orchestrator: create, read, steer and wait for app threads of your tenant.",
        warn_on_duplicate_tools=False,
    )

    @mcp.tool()
    async def capabilities(ctx: Context) -> dict[str, Any]:
        """What this caller may use: providers, runtime modes, send modes and the tools' limits."""
        request = request_of(ctx)
        who = await guarded("capabilities", principal(request))
        policy = await app_state(request).policies.get(who.tenant)
        return {
            "tenant": who.tenant,
            "user": who.user,
            "providers": offered(),
            "runtime_modes": list(policy.allowed_modes),
            "send_modes": list(SEND_MODES),
            "limits": {
                "create_threads": MAX_THREADS_AT_ONCE,
                "read_items": MAX_READ_ITEMS,
                "text_chars": MAX_TEXT_CHARS,
                "wait_seconds": MAX_WAIT_SECONDS,
                "message_chars": app_state(request).settings.max_text_chars,
            },
        }

    @mcp.tool()
    async def thread_start(
        ctx: Context,
        title: Annotated[str, Field(max_length=200)] = "",
        provider: str = "scripted",
        model: str | None = None,
        runtime_mode: str = "approval_required",
        text: str | None = None,
        script: Annotated[dict[str, Any] | None, Field(description=SCRIPT)] = None,
        client_request_id: RequestId = None,
    ) -> dict[str, Any]:
        """Create a thread (no provider work until its first run) and, with ``text``, send its first message."""
        spec = NewThread(
            title=title, provider=provider, model=model, runtime_mode=runtime_mode, text=text, script=script
        )
        return await guarded("thread_start", _create(request_of(ctx), spec, client_request_id))

    @mcp.tool()
    async def create_threads(
        ctx: Context,
        threads: Annotated[list[NewThread], Field(min_length=1, max_length=MAX_THREADS_AT_ONCE)],
        client_request_id: RequestId = None,
    ) -> dict[str, Any]:
        """Create 1–20 threads at once (each may start with a first message); in the order given."""
        request = request_of(ctx)
        made: list[dict[str, Any]] = []
        for i, spec in enumerate(threads):
            try:
                made.append(await _create(request, spec, key(client_request_id, str(i))))
            except ApiError as exc:  # those made stay made: the same client_request_id answers them again
                exc.details = {**exc.details, "index": i, "created": made}
                raise tool_error("create_threads", exc) from None
        return {"threads": made}

    @mcp.tool()
    async def thread_list(
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=MAX_READ_ITEMS)] = 50,
        cursor: Annotated[str | None, Field(max_length=2000)] = None,
        search: Annotated[str | None, Field(min_length=1, max_length=200, description="in the title, any case")] = None,
        status: Annotated[
            ThreadStatus | None, Field(description="active: a run under way; else the last run's")
        ] = None,
        provider: Annotated[str | None, Field(max_length=64)] = None,
    ) -> dict[str, Any]:
        """The tenant's threads, newest first: ``{items, next_cursor, seq}``; pass ``next_cursor`` for more.
        ``search`` is the list's own (``GET /v1/threads?q=``); ``status`` and ``provider`` filter each page,
        so a page may hold fewer than ``limit`` and still have a ``next_cursor``."""
        call = lists.list_threads.fn(request_of(ctx), limit=str(limit), cursor=cursor, q=search)
        page = builtins(await guarded("thread_list", call))
        page["items"] = [t for t in page["items"] if _listed(t, status, provider)]
        return page

    @mcp.tool()
    async def thread_read(
        ctx: Context,
        thread_id: ThreadId,
        view: Literal["messages", "activity"] = "messages",
        after: Annotated[int, Field(ge=0, le=10_000_000, description="position: items already read")] = 0,
        limit: Annotated[int, Field(ge=1, le=MAX_READ_ITEMS)] = 50,
        max_chars: Annotated[int, Field(ge=1, le=MAX_TEXT_CHARS)] = 4000,
        min_seq: Annotated[int | None, Field(ge=1)] = None,
    ) -> dict[str, Any]:
        """Messages or activity of a thread from position ``after``; read again with ``next_position`` for what
        came since. Texts longer than ``max_chars`` are cut and flagged ``truncated``."""
        request = request_of(ctx)

        async def read() -> dict[str, Any]:
            who = await principal(request)
            thread = path_id(thread_id, "thr")
            # a thread of no one's (or another tenant's) is a 404 from the read itself, as on the list routes
            # every read reflects the thread's last event when it came: ``min_seq`` (still accepted) asks no more
            seq, total, window = await lists._items(request, who.tenant, thread, view, after, limit)
            items = [msgspec.json.decode(raw) for raw in window]
            truncated = [_bounded(item, max_chars) for item in items]
            end = min(after, total) + len(items)
            return {
                "thread_id": thread,
                "view": view,
                "items": items,
                "next_position": end,
                "has_more": end < total,
                "truncated": any(truncated),
                "seq": seq,
            }

        return await guarded("thread_read", read())

    @mcp.tool()
    async def thread_send(
        ctx: Context,
        thread_id: ThreadId,
        text: str,
        mode: Literal["auto", "queue", "steer", "restart"] = "auto",
        target_run_id: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        script: Annotated[dict[str, Any] | None, Field(description=SCRIPT)] = None,
        client_request_id: RequestId = None,
    ) -> dict[str, Any]:
        """Send a message: starts a run, queues it, steers the active run or restarts it with this message."""
        call = _send(
            request_of(ctx),
            thread_id,
            text,
            mode,
            target_run_id,
            key(client_request_id, "send"),
            provider=provider,
            model=model,
            script=script,
        )
        return await guarded("thread_send", call)

    @mcp.tool()
    async def thread_wait(
        ctx: Context,
        thread_id: ThreadId,
        run_id: str | None = None,
        timeout_seconds: Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)] = 30.0,
    ) -> dict[str, Any]:
        """Wait until the run (default: the thread's latest) has ended, up to ``timeout_seconds``. A wait that
        times out changes nothing: ``timed_out`` is true and ``run`` is the run as it is now."""
        request = request_of(ctx)

        async def wait() -> dict[str, Any]:
            who = await principal(request)
            thread = path_id(thread_id, "thr")
            wanted = path_id(run_id, "run") if run_id is not None else None
            deadline = time.monotonic() + timeout_seconds
            delay = 0.02
            while True:
                # The run alone, read from its stored parts: a poll costs the same however long the thread is
                run, seq = await deps.thread_read(
                    request, who.tenant, thread, partial(_waited_run, wanted), partial(_run_of, wanted)
                )
                if wanted is not None and run is None:
                    raise ApiError(404, "run_not_found", f"run {wanted} not found")
                ended = run is None or run.status in TERMINAL_RUN_STATUSES
                if ended or time.monotonic() >= deadline:
                    return {"timed_out": not ended, "run": msgspec.to_builtins(run) if run else None, "seq": seq}
                await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))  # the projection, polled
                delay = min(delay * 2, 0.25)

        return await guarded("thread_wait", wait())

    @mcp.tool()
    async def thread_interrupt(ctx: Context, run_id: str, client_request_id: RequestId = None) -> dict[str, Any]:
        """Ask the run to stop (L8): acknowledged now; ``thread_wait`` says when it is interrupted."""
        call = control._interrupt(request_of(ctx), run_id, "run", None, key(client_request_id, "interrupt"))
        return builtins(await guarded("thread_interrupt", call))

    @mcp.tool()
    async def thread_fork(
        ctx: Context,
        thread_id: ThreadId,
        source_type: Literal["run", "node", "provider_thread"],
        source_id: str,
        title: Annotated[str, Field(max_length=200)] = "",
        on_active: Literal["latest_checkpoint", "refuse"] = "latest_checkpoint",
        client_request_id: RequestId = None,
    ) -> dict[str, Any]:
        """Fork the thread at a run, node or provider thread (L6): a new thread with lineage and a pending
        context transfer."""
        body = lineage.ForkBody(
            source=lineage.ForkSourceBody(type=source_type, id=source_id), title=title, on_active=on_active
        )
        call = lineage.fork_thread.fn(
            request_of(ctx), thread_id=thread_id, data=body, idempotency_key=key(client_request_id, "fork")
        )
        return builtins(await guarded("thread_fork", call))

    @mcp.tool()
    async def thread_transfers(ctx: Context, thread_id: ThreadId) -> dict[str, Any]:
        """The thread's context transfers (fork, merge-back), its lineage and its provider handoffs."""
        request = request_of(ctx)

        async def read() -> dict[str, Any]:
            who = await principal(request)
            head, seq = await deps.thread_read(request, who.tenant, path_id(thread_id, "thr"), _head, _head_of)
            return {
                "thread_id": thread_id,
                "transfers": msgspec.to_builtins(head.transfers),
                "lineage": msgspec.to_builtins(head.lineage),
                "handoffs": msgspec.to_builtins(head.handoffs),
                "seq": seq,
            }

        return await guarded("thread_transfers", read())

    tasks.register(mcp)
    return mcp


def tool_schemas() -> dict[str, Any]:
    """Every tool's name, description and input/output JSON Schema, as ``tools/list`` answers (``make schemas``
    writes it to ``schemas/mcp-tools.json``)."""
    tools = server()._tool_manager.list_tools()
    return {
        "title": "Treadle MCP tools",
        "description": "The tools of the orchestrator's MCP server at /mcp (issue 21); failures are is_error results "
        "whose text is {error: {code, kind, message, details}}",
        "kinds": list(KINDS),
        "codes": CODES,
        "tools": {
            t.name: {"description": t.description, "input_schema": t.parameters, "output_schema": t.output_schema}
            for t in tools
        },
    }
