"""The thread tools: each one is an adapter over the use case the HTTP route calls (``treadle.usecases``), with
the caller's bearer token and tenant; arguments become the contract's types (``usecases.arguments.parse``: the same
limits, the same typed refusals), results are the public views, failures typed (:mod:`.errors`). A
``client_request_id`` is the route's ``Idempotency-Key``, so a retried call is the same call."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ListToolsResult
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from treadle.api import CreateThreadRequest, ForkBody, SendMessageRequest, UpdateThreadRequest
from treadle.api.limits import MAX_NAME_CHARS, MAX_TITLE_CHARS
from treadle.core.errors import DomainError
from treadle.providers.registry import offered
from treadle.usecases import lineage, messages, runs
from treadle.usecases import threads as thread_cases
from treadle.usecases.arguments import parse

from ..errors import ApiError
from . import schedules, tasks
from .base import CREDENTIAL_KEY, MAX_WAIT_SECONDS, SCRIPT, Ports, RequestId, ThreadId, guarded, key, ports
from .errors import CODES, KINDS, invalid, tool_error

MAX_THREADS_AT_ONCE = 20
MAX_READ_ITEMS = 200
MAX_TEXT_CHARS = 20_000  # per item of a read: an agent's context is the scarce thing, not the API's
SEND_MODES = {"auto": "auto", "queue": "queue_after_active", "steer": "steer_active", "restart": "restart_active"}


class NewThread(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(default="", max_length=MAX_TITLE_CHARS)
    provider: str = "scripted"
    model: str | None = None
    runtime_mode: str = "approval_required"
    text: str | None = Field(default=None, description="a first message: starts the thread's first run")
    script: dict[str, Any] | None = Field(default=None, description=SCRIPT)


async def _create(call: Ports, spec: NewThread, request_id: str | None) -> dict[str, Any]:
    """A thread and, with a text, its first message: both checked before either is made (bad input changes
    nothing)."""
    thread = parse(CreateThreadRequest, spec.model_dump(exclude={"text", "script"}))
    first = parse(SendMessageRequest, {"text": spec.text, "script": spec.script}) if spec.text is not None else None
    if first is not None:
        messages.within(call.limits, first.text, first.script)
    made = await thread_cases.create(call.who, call.commands, call.policies, thread, key(request_id, "create"))
    answer: dict[str, Any] = msgspec.to_builtins(made)
    if first is not None:
        idem = key(request_id, "send")
        sent = await messages.send(call.who, call.commands, call.limits, made.thread_id, first, idem)
        answer["message"] = msgspec.to_builtins(sent)
    return answer


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


def server() -> MCPServer:
    mcp = _Server(
        "treadle",
        instructions="Treadle's orchestrator: create, read, steer and wait for app threads of your tenant.",
        warn_on_duplicate_tools=False,
    )

    @mcp.tool()
    async def capabilities(ctx: Context) -> dict[str, Any]:
        """What this caller may use: providers, runtime modes, send modes and the tools' limits."""
        call = await guarded("capabilities", ports(ctx))
        policy = await call.policies.get(call.who.tenant)
        return {
            "tenant": call.who.tenant,
            "user": call.who.user,
            "providers": offered(),
            "runtime_modes": list(policy.allowed_modes),
            "send_modes": list(SEND_MODES),
            "limits": {
                "create_threads": MAX_THREADS_AT_ONCE,
                "read_items": MAX_READ_ITEMS,
                "text_chars": MAX_TEXT_CHARS,
                "wait_seconds": MAX_WAIT_SECONDS,
                "message_chars": call.limits.text_chars,
            },
        }

    @mcp.tool()
    async def thread_start(
        ctx: Context,
        title: Annotated[str, Field(max_length=MAX_TITLE_CHARS)] = "",
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
        return await guarded(
            "thread_start", _create(await guarded("thread_start", ports(ctx)), spec, client_request_id)
        )

    @mcp.tool()
    async def create_threads(
        ctx: Context,
        threads: Annotated[list[NewThread], Field(min_length=1, max_length=MAX_THREADS_AT_ONCE)],
        client_request_id: RequestId = None,
    ) -> dict[str, Any]:
        """Create 1–20 threads at once (each may start with a first message); in the order given."""
        call = await guarded("create_threads", ports(ctx))
        made: list[dict[str, Any]] = []
        for i, spec in enumerate(threads):
            try:
                made.append(await _create(call, spec, key(client_request_id, str(i))))
            except (ApiError, DomainError) as exc:  # those made stay made: the same client_request_id answers them
                status = exc.status
                failed = exc if isinstance(exc, ApiError) else ApiError(status, exc.code, exc.message, exc.details)
                failed.details = {**failed.details, "index": i, "created": made}
                raise tool_error("create_threads", failed) from None
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
        provider: Annotated[str | None, Field(max_length=MAX_NAME_CHARS)] = None,
        archived: Annotated[
            Literal["exclude", "include", "only"], Field(description="archived threads: left out, listed too, alone")
        ] = "exclude",
    ) -> dict[str, Any]:
        """The tenant's threads, newest first: ``{items, next_cursor, seq}``; pass ``next_cursor`` for more.
        ``search`` and ``archived`` are the list's own (``GET /v1/threads?q=&archived=``); ``status`` and
        ``provider`` filter each page, so a page may hold fewer than ``limit`` and still have a ``next_cursor``."""

        async def listed() -> dict[str, Any]:
            call = await ports(ctx)
            found, more = await thread_cases.page(call.who, call.reads, limit, cursor, search, archived)
            items = [summary for summary in map(msgspec.json.decode, found) if _listed(summary, status, provider)]
            return {"items": items, "next_cursor": more, "seq": None}

        return await guarded("thread_list", listed())

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

        async def read() -> dict[str, Any]:
            call = await ports(ctx)
            # a thread of no one's (or another tenant's) is a 404 from the read itself, as on the list routes
            # every read reflects the thread's last event when it came: ``min_seq`` (still accepted) asks no more
            seq, total, window = await messages.items(call.who, call.reads, thread_id, view, after, limit)
            items = [msgspec.json.decode(raw) for raw in window]
            truncated = [_bounded(item, max_chars) for item in items]
            end = min(after, total) + len(items)
            return {
                "thread_id": thread_id,
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

        async def send() -> dict[str, Any]:
            call = await ports(ctx)
            fields = {"text": text, "mode": SEND_MODES[mode], "target_run_id": target_run_id}
            message = parse(SendMessageRequest, {**fields, "provider": provider, "model": model, "script": script})
            idem = key(client_request_id, "send")
            sent = await messages.send(call.who, call.commands, call.limits, thread_id, message, idem)
            answer: dict[str, Any] = msgspec.to_builtins(sent)
            return answer

        return await guarded("thread_send", send())

    @mcp.tool()
    async def thread_wait(
        ctx: Context,
        thread_id: ThreadId,
        run_id: str | None = None,
        timeout_seconds: Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)] = 30.0,
    ) -> dict[str, Any]:
        """Wait until the run (default: the thread's latest) has ended, up to ``timeout_seconds``. A wait that
        times out changes nothing: ``timed_out`` is true and ``run`` is the run as it is now."""

        async def wait() -> dict[str, Any]:
            call = await ports(ctx)
            run, seq, ended = await runs.wait(call.who, call.reads, thread_id, run_id, timeout_seconds)
            return {"timed_out": not ended, "run": msgspec.to_builtins(run) if run else None, "seq": seq}

        return await guarded("thread_wait", wait())

    @mcp.tool()
    async def thread_interrupt(ctx: Context, run_id: str, client_request_id: RequestId = None) -> dict[str, Any]:
        """Ask the run to stop (L8): acknowledged now; ``thread_wait`` says when it is interrupted."""

        async def interrupt() -> dict[str, Any]:
            call = await ports(ctx)
            idem = key(client_request_id, "interrupt")
            acknowledged = await runs.interrupt(call.who, call.commands, call.reads, run_id, "run", idem)
            answer: dict[str, Any] = msgspec.to_builtins(acknowledged)
            return answer

        return await guarded("thread_interrupt", interrupt())

    @mcp.tool()
    async def thread_update(
        ctx: Context,
        thread_id: ThreadId,
        title: Annotated[str | None, Field(max_length=MAX_TITLE_CHARS)] = None,
        archived: Annotated[
            bool | None, Field(description="true: archive (no run active or queued); false: unarchive")
        ] = None,
        client_request_id: RequestId = None,
    ) -> dict[str, Any]:
        """Rename a thread, or archive it (out of the default list, no new messages) or unarchive it (L1.3): an
        agent tidying up the child threads it made. ``changed`` is false when it already was so. Deleting a
        thread (erasing its data) is not a tool: it is left to people (HTTP, SDK, CLI, console)."""

        async def update() -> dict[str, Any]:
            call = await ports(ctx)
            body = parse(UpdateThreadRequest, {"title": title, "archived": archived})
            idem = key(client_request_id, "update")
            updated = await thread_cases.update(call.who, call.commands, thread_id, body, idem)
            answer: dict[str, Any] = msgspec.to_builtins(updated)
            return answer

        return await guarded("thread_update", update())

    @mcp.tool()
    async def thread_fork(
        ctx: Context,
        thread_id: ThreadId,
        source_type: Literal["run", "node", "provider_thread"],
        source_id: str,
        title: Annotated[str, Field(max_length=MAX_TITLE_CHARS)] = "",
        on_active: Literal["latest_checkpoint", "refuse"] = "latest_checkpoint",
        client_request_id: RequestId = None,
    ) -> dict[str, Any]:
        """Fork the thread at a run, node or provider thread (L6): a new thread with lineage and a pending
        context transfer."""

        async def fork() -> dict[str, Any]:
            call = await ports(ctx)
            source = {"type": source_type, "id": source_id}
            body = parse(ForkBody, {"source": source, "title": title, "on_active": on_active})
            idem = key(client_request_id, "fork")
            forked = await lineage.fork(call.who, call.commands, thread_id, body, idem)
            answer: dict[str, Any] = msgspec.to_builtins(forked)
            return answer

        return await guarded("thread_fork", fork())

    @mcp.tool()
    async def thread_transfers(ctx: Context, thread_id: ThreadId) -> dict[str, Any]:
        """The thread's context transfers (fork, merge-back), its lineage and its provider handoffs."""

        async def read() -> dict[str, Any]:
            call = await ports(ctx)
            head, seq = await thread_cases.head(call.who, call.reads, thread_id)
            return {
                "thread_id": thread_id,
                "transfers": msgspec.to_builtins(head.transfers),
                "lineage": msgspec.to_builtins(head.lineage),
                "handoffs": msgspec.to_builtins(head.handoffs),
                "seq": seq,
            }

        return await guarded("thread_transfers", read())

    tasks.register(mcp)
    schedules.register(mcp)
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
