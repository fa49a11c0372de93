"""The delegation tools (issue 21, part 3): ``delegate_task`` makes a child thread of the parent run, shown as an
app-owned ``subagent`` node of that run; ``task_status`` reads it; ``task_cancel`` interrupts it. The parent is
the credential's thread for an agent inside a provider session, the named ``parent_thread_id`` for a user's
own client — in both cases the thread's active run is the parent run. The coordinator finalises the node from
the child's run-ended event, so a wait here only watches: timing out never cancels the child."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Annotated, Any, Literal

from litestar import Request
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from treadle.core.delegation import task_key
from treadle.core.lineage.commands import DelegateTask
from treadle.core.run.model import TERMINAL_RUN_STATUSES
from treadle.projections import parts
from treadle.views.thread import ThreadView

from .. import control
from ..deps import app_state, path_id, principal, thread_read
from ..errors import ApiError
from .base import MAX_WAIT_SECONDS, SCRIPT, RequestId, ThreadId, credential_of, guarded, key, request_of

WaitSeconds = Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)]


def _whole(view: ThreadView) -> ThreadView:
    """A thread not (wholly) projected yet is read whole: its document has every field the parts reads give."""
    return view


async def _parent(request: Request[Any, Any, Any], tenant: str, named: str | None) -> tuple[str, str]:
    """The parent thread and its active run."""
    credential = credential_of(request)
    if credential is not None:
        if named is not None and named != credential.thread:
            raise ApiError(403, "forbidden", "a session delegates from its own thread", {"thread_id": named})
        named = credential.thread
    if named is None:
        raise ApiError(
            400, "bad_request", "parent_thread_id is required with a user token", {"fields": ["parent_thread_id"]}
        )
    thread = path_id(named, "thr")
    view = await thread_read(request, tenant, thread, parts.active_run, _whole)
    if view.active_run_id is None:
        raise ApiError(
            409, "parent_not_active", f"thread {thread} has no active run to delegate from", {"thread_id": thread}
        )
    return thread, view.active_run_id


async def status_of(request: Request[Any, Any, Any], tenant: str, task_id: str) -> dict[str, Any]:
    """A task as its child thread and its parent's record have it; ``finalised`` once the parent's node is."""
    # Only the fields it answers with, from the stored parts: a poll costs the same however long the threads are.
    child = await thread_read(request, tenant, path_id(task_id, "thr"), parts.first_run, _whole)
    delegation = child.lineage.delegation if child.lineage is not None else None
    if child.lineage is None or delegation is None or not child.lineage.parent_thread_id:
        raise ApiError(404, "task_not_found", f"thread {task_id} is not a delegated task")
    run = child.runs[0] if child.runs else None
    read_parent = partial(parts.run_and_transfers, run_id=delegation["parent_run_id"])
    parent = await thread_read(request, tenant, child.lineage.parent_thread_id, read_parent, _whole)
    transfer = next(
        (t for t in parent.transfers if t.type == "delegation_result" and t.source_thread_id == task_id), None
    )
    if transfer is not None and (run is None or run.status not in TERMINAL_RUN_STATUSES):
        # The parent records the result after the child's run ended, so a child read before that record may be
        # older than it: read the child again, never answer "finalised" beside a running child.
        again = await thread_read(request, tenant, path_id(task_id, "thr"), parts.first_run, _whole)
        run = again.runs[0] if again.runs else None
    node_id = delegation["parent_node_id"]
    parent_run = next((r for r in parent.runs if r.id == delegation["parent_run_id"]), None)
    node = next((n for n in parent_run.nodes if n.id == node_id), None) if parent_run else None
    status = run.status if run else "queued"
    return {
        "task_id": task_id,
        "thread_id": task_id,
        "run_id": run.id if run else None,
        "status": status,
        "done": status in TERMINAL_RUN_STATUSES,
        "finalised": transfer is not None,
        "result": {"status": node.status if node else None, "summary": transfer.summary} if transfer else None,
        "parent_thread_id": child.lineage.parent_thread_id,
        "parent_run_id": delegation["parent_run_id"],
        "node_id": node_id,
        "mode": delegation.get("mode"),
        "seq": child.seq,
    }


async def wait_for(request: Request[Any, Any, Any], tenant: str, task_id: str, timeout: float) -> dict[str, Any]:
    """Until the parent's node is finalised or ``timeout`` passes (the projections, polled); never cancels."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            status = await status_of(request, tenant, task_id)
        except ApiError as exc:
            if exc.status != 404 or time.monotonic() >= deadline:  # a child made a moment ago may not be read yet
                raise
            status = None
        if status is not None and (status["finalised"] or time.monotonic() >= deadline):
            return {**status, "timed_out": not status["finalised"]}
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.25)


def register(mcp: MCPServer) -> None:
    @mcp.tool()
    async def delegate_task(
        ctx: Context,
        task: Annotated[str, Field(min_length=1, max_length=92_000)],
        provider: str = "scripted",
        model: str | None = None,
        role: Annotated[str, Field(max_length=8000, description="role instruction given to the child")] = "",
        title: Annotated[str, Field(max_length=200)] = "",
        mode: Literal["async", "wait"] = "async",
        timeout_seconds: WaitSeconds = 30.0,
        runtime_mode: str | None = None,
        interaction_mode: Literal["default", "plan"] | None = None,
        parent_thread_id: Annotated[
            str | None, Field(max_length=64, description="required with a user token; a session's own thread")
        ] = None,
        script: Annotated[dict[str, Any] | None, Field(description=SCRIPT)] = None,
        client_request_id: RequestId = None,
    ) -> dict[str, Any]:
        """Delegate a task to a child thread (lineage ``subagent``) that gets only ``task`` and ``role``; the
        parent run shows it as a subagent node, finalised with the child's result. ``async`` answers at once
        (poll ``task_status``); ``wait`` waits up to ``timeout_seconds`` — a timeout never cancels the child.
        Runtime and interaction modes may only narrow the parent's."""
        request = request_of(ctx)

        async def delegate() -> dict[str, Any]:
            who = await principal(request)
            thread, run_id = await _parent(request, who.tenant, parent_thread_id)
            body = DelegateTask(
                parent_run_id=run_id, task=task, role=role, title=title, provider=provider, model=model,
                runtime_mode=runtime_mode, interaction_mode=interaction_mode, mode=mode, script=script,
            )  # fmt: skip
            idem = task_key(who.tenant, run_id, client_request_id) if client_request_id is not None else None
            accepted = await app_state(request).commands.send(
                tenant=who.tenant, user=who.user, verb="delegate", thread=thread, body=body, idempotency_key=idem
            )
            made = {
                "task_id": accepted.thread_id,
                "thread_id": accepted.thread_id,
                "run_id": accepted.run_id,
                "parent_thread_id": thread,
                "parent_run_id": run_id,
                "mode": mode,
                "duplicate": accepted.duplicate,
                "seq": accepted.seq,
            }
            if mode == "wait":
                made |= await wait_for(request, who.tenant, accepted.thread_id, timeout_seconds)
            return made

        return await guarded("delegate_task", delegate())

    @mcp.tool()
    async def task_status(ctx: Context, task_id: ThreadId) -> dict[str, Any]:
        """A delegated task: its child run's ``status``, whether the parent's node is ``finalised`` and its
        ``result`` (``summary``: the child's last assistant text, else its status)."""
        request = request_of(ctx)

        async def read() -> dict[str, Any]:
            return await status_of(request, (await principal(request)).tenant, task_id)

        return await guarded("task_status", read())

    @mcp.tool()
    async def task_cancel(ctx: Context, task_id: ThreadId, client_request_id: RequestId = None) -> dict[str, Any]:
        """Interrupt a delegated task's run (cancelled if it had not started): acknowledged now; the parent's
        node is finalised when the child's run has ended."""
        request = request_of(ctx)

        async def cancel() -> dict[str, Any]:
            status = await status_of(request, (await principal(request)).tenant, task_id)
            if status["run_id"] is None:
                raise ApiError(409, "run_not_active", f"task {task_id} has no run yet; retry")
            idem = key(client_request_id, "cancel")
            acknowledged = await control._interrupt(request, status["run_id"], "run", None, idem)
            return {"task_id": task_id, "run_id": acknowledged.run_id, "disposition": acknowledged.disposition}

        return await guarded("task_cancel", cancel())
