"""Delegated tasks (issue 21, part 3): a child thread of the parent's active run, shown as an app-owned
``subagent`` node of that run; its status as the child and the parent's record have it; its cancellation. The
coordinator finalises the node from the child's run-ended event, so a wait here only watches: timing out never
cancels the child."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec

from treadle.core.delegation import task_key
from treadle.core.errors import BadRequest, Conflict, DomainError, Forbidden, NotFound
from treadle.core.lineage.commands import DelegateTask
from treadle.core.run.model import TERMINAL_RUN_STATUSES
from treadle.usecases.ids import checked
from treadle.usecases.ports import Caller, CommandBus, ThreadReads
from treadle.usecases.runs import interrupt


class ParentNotActive(Conflict):
    code = "parent_not_active"


async def parent(who: Caller, reads: ThreadReads, named: str | None, session_thread: str | None) -> tuple[str, str]:
    """The parent thread and its active run: a provider session's own thread (``session_thread``), else the
    one a user's client names."""
    if session_thread is not None:
        if named is not None and named != session_thread:
            raise Forbidden("a session delegates from its own thread", details={"thread_id": named})
        named = session_thread
    if named is None:
        raise BadRequest("parent_thread_id is required with a user token", details={"fields": ["parent_thread_id"]})
    thread = checked(named, "thr")
    view = await reads.active_run(who.tenant, thread)
    if view.active_run_id is None:
        raise ParentNotActive(f"thread {thread} has no active run to delegate from", details={"thread_id": thread})
    return thread, view.active_run_id


async def delegate(
    who: Caller,
    commands: CommandBus,
    reads: ThreadReads,
    task: DelegateTask,
    *,
    parent_thread_id: str | None,
    session_thread: str | None,
    client_request_id: str | None,
) -> dict[str, Any]:
    """``task`` from the parent thread's active run (its ``parent_run_id`` is filled here): the child's ids, made
    at once."""
    thread, run_id = await parent(who, reads, parent_thread_id, session_thread)
    task = msgspec.structs.replace(task, parent_run_id=run_id)
    key = task_key(who.tenant, run_id, client_request_id) if client_request_id is not None else None
    accepted = await commands.send(
        tenant=who.tenant, user=who.user, verb="delegate", thread=thread, body=task, idempotency_key=key
    )
    return {
        "task_id": accepted.thread_id,
        "thread_id": accepted.thread_id,
        "run_id": accepted.run_id,
        "parent_thread_id": thread,
        "parent_run_id": run_id,
        "mode": task.mode,
        "duplicate": accepted.duplicate,
        "seq": accepted.seq,
    }


async def status(who: Caller, reads: ThreadReads, task_id: str) -> dict[str, Any]:
    """A task as its child thread and its parent's record have it; ``finalised`` once the parent's node is.
    Only the fields it answers with are read: a poll costs the same however long the threads are."""
    child = await reads.first_run(who.tenant, checked(task_id, "thr"))
    delegation = child.lineage.delegation if child.lineage is not None else None
    if child.lineage is None or delegation is None or not child.lineage.parent_thread_id:
        raise NotFound(f"thread {task_id} is not a delegated task", code="task_not_found")
    run = child.runs[0] if child.runs else None
    parent_view = await reads.run_and_transfers(who.tenant, child.lineage.parent_thread_id, delegation["parent_run_id"])
    transfer = next(
        (t for t in parent_view.transfers if t.type == "delegation_result" and t.source_thread_id == task_id), None
    )
    if transfer is not None and (run is None or run.status not in TERMINAL_RUN_STATUSES):
        # The parent records the result after the child's run ended, so a child read before that record may be
        # older than it: read the child again, never answer "finalised" beside a running child.
        again = await reads.first_run(who.tenant, task_id)
        run = again.runs[0] if again.runs else None
    node_id = delegation["parent_node_id"]
    parent_run = next((r for r in parent_view.runs if r.id == delegation["parent_run_id"]), None)
    node = next((n for n in parent_run.nodes if n.id == node_id), None) if parent_run else None
    state = run.status if run else "queued"
    return {
        "task_id": task_id,
        "thread_id": task_id,
        "run_id": run.id if run else None,
        "status": state,
        "done": state in TERMINAL_RUN_STATUSES,
        "finalised": transfer is not None,
        "result": {"status": node.status if node else None, "summary": transfer.summary} if transfer else None,
        "parent_thread_id": child.lineage.parent_thread_id,
        "parent_run_id": delegation["parent_run_id"],
        "node_id": node_id,
        "mode": delegation.get("mode"),
        "seq": child.seq,
    }


async def wait(who: Caller, reads: ThreadReads, task_id: str, timeout: float) -> dict[str, Any]:
    """Until the parent's node is finalised or ``timeout`` passes (the projections, polled); never cancels."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        found: dict[str, Any] | None
        try:
            found = await status(who, reads, task_id)
        except DomainError as exc:
            if exc.status != 404 or time.monotonic() >= deadline:  # a child made a moment ago may not be read yet
                raise
            found = None
        if found is not None and (found["finalised"] or time.monotonic() >= deadline):
            return {**found, "timed_out": not found["finalised"]}
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.25)


async def cancel(
    who: Caller, commands: CommandBus, reads: ThreadReads, task_id: str, key: str | None
) -> dict[str, Any]:
    """Interrupt a task's run (cancelled if it had not started): acknowledged now."""
    found = await status(who, reads, task_id)
    if found["run_id"] is None:
        raise Conflict(f"task {task_id} has no run yet; retry", code="run_not_active")
    acknowledged = await interrupt(who, commands, reads, found["run_id"], "run", key)
    return {"task_id": task_id, "run_id": acknowledged.run_id, "disposition": acknowledged.disposition}
