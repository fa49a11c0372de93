"""The delegation tools (issue 21, part 3), adapters over ``usecases.tasks``: ``delegate_task`` makes a child
thread of the parent run, shown as an app-owned ``subagent`` node of that run; ``task_status`` reads it;
``task_cancel`` interrupts it. The parent is the credential's thread for an agent inside a provider session, the
named ``parent_thread_id`` for a user's own client — in both cases the thread's active run is the parent run."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from treadle.api.limits import MAX_NAME_CHARS, MAX_ROLE_CHARS, MAX_TEXT_CHARS, MAX_TITLE_CHARS
from treadle.core.lineage.commands import DelegateTask
from treadle.usecases import tasks

from .base import MAX_WAIT_SECONDS, SCRIPT, RequestId, ThreadId, guarded, key, ports

WaitSeconds = Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)]


def register(mcp: MCPServer) -> None:
    @mcp.tool()
    async def delegate_task(
        ctx: Context,
        task: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS - MAX_ROLE_CHARS)],
        provider: str = "scripted",
        model: str | None = None,
        role: Annotated[str, Field(max_length=MAX_ROLE_CHARS, description="role instruction given to the child")] = "",
        title: Annotated[str, Field(max_length=MAX_TITLE_CHARS)] = "",
        mode: Literal["async", "wait"] = "async",
        timeout_seconds: WaitSeconds = 30.0,
        runtime_mode: str | None = None,
        interaction_mode: Literal["default", "plan"] | None = None,
        parent_thread_id: Annotated[
            str | None,
            Field(max_length=MAX_NAME_CHARS, description="required with a user token; a session's own thread"),
        ] = None,
        script: Annotated[dict[str, Any] | None, Field(description=SCRIPT)] = None,
        client_request_id: RequestId = None,
    ) -> dict[str, Any]:
        """Delegate a task to a child thread (lineage ``subagent``) that gets only ``task`` and ``role``; the
        parent run shows it as a subagent node, finalised with the child's result. ``async`` answers at once
        (poll ``task_status``); ``wait`` waits up to ``timeout_seconds`` — a timeout never cancels the child.
        Runtime and interaction modes may only narrow the parent's."""

        async def delegate() -> dict[str, Any]:
            call = await ports(ctx)
            task_body = DelegateTask(
                parent_run_id="", task=task, role=role, title=title, provider=provider, model=model,
                runtime_mode=runtime_mode, interaction_mode=interaction_mode, mode=mode, script=script,
            )  # fmt: skip
            made = await tasks.delegate(
                call.who,
                call.commands,
                call.reads,
                task_body,
                parent_thread_id=parent_thread_id,
                session_thread=call.session_thread,
                client_request_id=client_request_id,
            )
            if mode == "wait":
                made |= await tasks.wait(call.who, call.reads, made["task_id"], timeout_seconds)
            return made

        return await guarded("delegate_task", delegate())

    @mcp.tool()
    async def task_status(ctx: Context, task_id: ThreadId) -> dict[str, Any]:
        """A delegated task: its child run's ``status``, whether the parent's node is ``finalised`` and its
        ``result`` (``summary``: the child's last assistant text, else its status)."""

        async def read() -> dict[str, Any]:
            call = await ports(ctx)
            return await tasks.status(call.who, call.reads, task_id)

        return await guarded("task_status", read())

    @mcp.tool()
    async def task_cancel(ctx: Context, task_id: ThreadId, client_request_id: RequestId = None) -> dict[str, Any]:
        """Interrupt a delegated task's run (cancelled if it had not started): acknowledged now; the parent's
        node is finalised when the child's run has ended."""

        async def cancel() -> dict[str, Any]:
            call = await ports(ctx)
            idem = key(client_request_id, "cancel")
            return await tasks.cancel(call.who, call.commands, call.reads, task_id, idem)

        return await guarded("task_cancel", cancel())
