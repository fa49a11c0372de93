"""The schedule tools, adapters over ``usecases.schedules``: an agent schedules a follow-up message on its own
thread (a provider session's credential names it; a user's token may name any thread of its tenant), lists that
thread's schedules and deletes one. The tenant's quota and policy apply as on the HTTP route."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from treadle.api.limits import MAX_TEXT_CHARS
from treadle.api.schedules import ScheduleBody
from treadle.core.errors import Forbidden
from treadle.usecases import schedules
from treadle.usecases.arguments import parse

from ..deps import app_state
from .base import Ports, ThreadId, guarded, ports, request_of


def _thread(call: Ports, thread_id: str) -> str:
    """A provider session schedules on its own thread only."""
    if call.session_thread is not None and thread_id != call.session_thread:
        raise Forbidden("a session schedules follow-ups on its own thread only", code="forbidden")
    return thread_id


def register(mcp: MCPServer) -> None:
    @mcp.tool()
    async def schedule_follow_up(
        ctx: Context,
        thread_id: ThreadId,
        text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)],
        cron: Annotated[str | None, Field(max_length=120, description="5 fields, e.g. '0 9 * * mon'")] = None,
        timezone: Annotated[str, Field(max_length=64, description="IANA zone of the cron expression")] = "UTC",
        interval_seconds: Annotated[int | None, Field(ge=60, description="every N seconds instead of cron")] = None,
        on_active: Literal["skip", "queue", "dispatch"] = "skip",
    ) -> dict[str, Any]:
        """Schedule a message to this thread on a cron expression or an interval; ``on_active`` says what a
        firing does while a run is still active. Answers the schedule and its next firing times."""

        async def create() -> dict[str, Any]:
            call = await ports(ctx)
            fields = {"text": text, "cron": cron, "timezone": timezone, "interval_seconds": interval_seconds}
            body = parse(ScheduleBody, {**fields, "on_active": on_active})
            book = app_state(request_of(ctx)).schedules
            view = await schedules.create(
                call.who, book, call.policies, call.reads, call.limits, _thread(call, thread_id), body
            )
            answer: dict[str, Any] = msgspec.to_builtins(view)
            return answer

        return await guarded("schedule_follow_up", create())

    @mcp.tool()
    async def schedule_list(ctx: Context, thread_id: ThreadId) -> dict[str, Any]:
        """This thread's schedules."""

        async def listed() -> dict[str, Any]:
            call = await ports(ctx)
            book = app_state(request_of(ctx)).schedules
            found = await schedules.listed(call.who, book, _thread(call, thread_id))
            return {"schedules": msgspec.to_builtins(found)}

        return await guarded("schedule_list", listed())

    @mcp.tool()
    async def schedule_delete(ctx: Context, thread_id: ThreadId, schedule_id: ThreadId) -> dict[str, Any]:
        """Delete one of this thread's schedules."""

        async def remove() -> dict[str, Any]:
            call = await ports(ctx)
            book = app_state(request_of(ctx)).schedules
            await schedules.remove(call.who, book, schedule_id, _thread(call, thread_id))
            return {"schedule_id": schedule_id, "deleted": True}

        return await guarded("schedule_delete", remove())
