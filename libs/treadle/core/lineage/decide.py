"""Thread lineage as pure decisions (requirements L6, L7): forks with their stable source points, and what a
message asks of its run's context (merge-back, clean context). Resolving that context when the run starts is
start_context.py."""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.core.commands import Command
from treadle.core.ctx import Ctx
from treadle.core.envelope import Payload
from treadle.core.errors import Conflict, NotFound, Unprocessable, check
from treadle.core.ids import has_prefix
from treadle.core.lineage.commands import ForkThread
from treadle.core.lineage.events import ChildForked, ContextRequest, ThreadForked
from treadle.core.providers.capabilities import subagent_fork_fidelity
from treadle.core.run.model import ExecutionNode, Run
from treadle.core.thread.events import ThreadCreated
from treadle.core.view import ThreadView

MERGEABLE = ("completed", "interrupted", "failed")  # runs whose outcome a merge-back reports (L7.2)
FORKABLE_AFTER_END = ("interrupted", "failed")  # stable only with a checkpoint (L6.3)
ACTIVE = ("queued", "starting", "running", "waiting")


def is_thread_id(value: object) -> bool:
    return has_prefix(value, "thr")


# --- fork (L6.1, L6.3) -------------------------------------------------------------------------------


class ForkPlan(msgspec.Struct, kw_only=True):
    child_id: str
    transfer_id: str
    point: dict[str, Any]
    child_events: list[Payload]
    parent_events: list[Payload]


def _unstable(reason: str, message: str, **details: Any) -> Conflict:
    return Conflict(message, code="unstable_source", details={"reason": reason, **details})


def _run_point(state: ThreadView, run: Run, on_active: str, **extra: Any) -> dict[str, Any]:
    """A run as a fork point: completed, or interrupted/failed with a checkpoint; an active run is replaced
    by the latest completed checkpoint (or refused, as the caller asked)."""
    requested = run
    if run.status in ACTIVE:
        if on_active == "refuse":
            raise _unstable(
                "run_active", f"run {run.id} is still {run.status}; fork from a completed run", run_id=run.id
            )
        earlier = [r for r in state.runs if r.ordinal < run.ordinal and r.status == "completed" and _commit(state, r)]
        if not earlier:
            raise _unstable(
                "run_active",
                f"run {run.id} is {run.status} and no earlier run has a completed checkpoint",
                run_id=run.id,
            )
        run = earlier[-1]
    elif run.status in ("cancelled", "rolled_back"):
        raise _unstable(run.status, f"run {run.id} is {run.status}; it is not a point to fork from", run_id=run.id)
    elif run.status in FORKABLE_AFTER_END and _commit(state, run) is None:
        raise _unstable("no_checkpoint", f"run {run.id} ended {run.status} without a checkpoint", run_id=run.id)
    commit = _commit(state, run)
    if commit is None:
        raise _unstable("no_checkpoint", f"run {run.id} has no checkpoint to give the fork its files", run_id=run.id)
    point = {
        "thread_id": state.thread.id if state.thread else "",
        "run_id": run.id,
        "ordinal": run.ordinal,
        "checkpoint_id": run.checkpoint_id,
        "commit": commit,
        **extra,
    }
    if requested is not run:
        point["substituted_for"] = requested.id  # the active run asked for; its latest completed checkpoint used
    return point


def _subagent_point(state: ThreadView, run: Run, node: ExecutionNode) -> tuple[dict[str, Any], str | None]:
    """L6.4: a completed subagent as a fork point. Its files are the subagent's own end checkpoint (its child
    scope) when one was captured, else its run's. A subagent that owns a provider thread its runtime can fork
    is forked natively there; any other is synthetic, built from the projected graph (lower fidelity)."""
    point = _run_point(state, run, "latest_checkpoint", type="node", node_id=node.id)
    point["subagent_run_id"] = run.id
    end = next(
        (
            c
            for c in reversed(state.checkpoints)
            if c.kind == "node" and c.node_id == node.id and c.commit and c.status not in ("error", "missing")
        ),
        None,
    )
    if end is not None:
        point.update(checkpoint_id=end.id, commit=end.commit, baseline="subagent_end")
    session = state.session(run.attempt.session_id or "")
    caps = session.capabilities if session is not None else None
    if node.native_thread_ref and caps is not None and subagent_fork_fidelity(caps) == "native":
        point["subagent_native_ref"] = node.native_thread_ref
        return point, None
    return point, "synthetic"


def _commit(state: ThreadView, run: Run) -> str | None:
    ckpt = next((c for c in state.checkpoints if c.id == run.checkpoint_id), None)
    return ckpt.commit if ckpt is not None and ckpt.commit and ckpt.status != "error" else None


def source_point(state: ThreadView, body: ForkThread) -> tuple[dict[str, Any], str | None]:
    """L6.3: the stable point a fork starts from, and its fidelity (``synthetic`` below native) when the point
    cannot be forked natively at all. Unstable points are refused with ``unstable_source`` and a reason."""
    kind, ident = body.source.type, body.source.id
    if kind == "run":
        run = state.run(ident)
        if run is None:
            raise NotFound(f"run {ident} not found on this thread", code="source_not_found")
        return _run_point(state, run, body.on_active, type="run"), None
    if kind == "node":
        for run in state.runs:
            node = run.node(ident)
            if node is None:
                continue
            if node.kind == "root_turn":
                return _run_point(state, run, body.on_active, type="node", node_id=node.id), None
            if node.kind == "subagent" and node.owner == "app":  # its own thread holds what it did
                raise _unstable(
                    "delegated_task",
                    f"node {ident} is a delegated task: fork its thread {node.child_thread_id}",
                    node_id=ident,
                    thread_id=node.child_thread_id,
                )
            if node.kind == "subagent":
                if node.status != "completed":
                    raise _unstable("running_subagent", f"subagent {ident} is {node.status}", node_id=ident)
                return _subagent_point(state, run, node)
            reason = {"tool": "running_tool", "approval": "pending_approval", "user_input": "pending_question"}[
                node.kind
            ]
            if node.status in ("pending", "running", "waiting"):
                raise _unstable(reason, f"{node.kind} node {ident} is {node.status}", node_id=ident)
            raise _unstable(
                "not_a_boundary",
                f"a {node.kind} node is not a fork point; fork from its run",
                node_id=ident,
                run_id=run.id,
            )
        raise NotFound(f"node {ident} not found on this thread", code="source_not_found")
    pth = state.provider_thread_of(ident)
    if pth is None:
        raise NotFound(f"provider thread {ident} not found on this thread", code="source_not_found")
    runs = [r for r in state.runs if r.ordinal in pth.covered_ordinals]
    if body.source.turn is not None:
        runs = [r for r in runs if any(a.native_turn_ref == body.source.turn for a in r.attempts)]
        if not runs:
            raise NotFound(f"turn {body.source.turn} not found on provider thread {ident}", code="source_not_found")
    if not runs:
        raise _unstable("no_turns", f"provider thread {ident} has no completed turn to fork from")
    return _run_point(
        state, runs[-1], body.on_active, type="provider_thread", provider_thread_id=pth.id, turn_ref=body.source.turn
    ), None


def fork(state: ThreadView, command: Command, body: ForkThread, ctx: Ctx) -> ForkPlan:
    """L6.1: the new thread with lineage and a pending transfer, nothing else; the source records its child."""
    source = state.thread
    assert source is not None and body.thread_id is not None
    point, fidelity = source_point(state, body)
    child, transfer_id = body.thread_id, ctx.ids.next("xfer")
    root = state.lineage.root_thread_id if state.lineage and state.lineage.root_thread_id else source.id
    title = body.title or f"Fork of {source.title or source.id}"[:200]
    at = state.run(point["run_id"])
    provider = at.provider if at is not None else source.provider  # the fork goes on where the point was
    created = ThreadCreated(
        thread_id=child,
        title=title,
        provider=provider,
        model=source.model,
        runtime_mode=source.runtime_mode,
        workspace=f"threads/{child}",
        created_by=command.user,
        # On its source's home: its workspace is materialised from a checkpoint the source's volume holds. Until
        # checkpoints are durable off the volume (a store every volume can restore from), that is the only place.
        volume=source.volume,
    )
    forked = ThreadForked(
        parent_thread_id=source.id, root_thread_id=root, transfer_id=transfer_id, source_point=point, fidelity=fidelity
    )
    return ForkPlan(
        child_id=child,
        transfer_id=transfer_id,
        point=point,
        child_events=[created, forked],
        parent_events=[ChildForked(child_thread_id=child, transfer_id=transfer_id, source_point=point)],
    )


# --- merge-back and clean context (L7.1, L5.4) -----------------------------------------------------------


def context_request(
    state: ThreadView, *, clean_context: bool, merge_back_from: str | None, fork_state: ThreadView | None, ctx: Ctx
) -> ContextRequest:
    """What a message asks of its run's context. Merge-back: ``merge_back_from`` must be a fork of this thread
    with completed work after the fork point (or after its previous merge)."""
    if merge_back_from is None:
        return ContextRequest(clean_context=clean_context)
    thread = state.thread
    assert thread is not None
    if fork_state is None or fork_state.thread is None:
        raise NotFound(f"thread {merge_back_from} not found", code="thread_not_found")
    lineage = fork_state.lineage
    check(
        lineage is not None and lineage.parent_thread_id == thread.id,
        Unprocessable,
        f"thread {merge_back_from} is not a fork of this thread",
        code="not_a_fork",
    )
    assert lineage is not None
    merged = [
        t.source_point.get("ordinal", 0)
        for t in state.transfers
        if t.type == "merge_back" and t.source_thread_id == merge_back_from and t.status != "failed"
    ]
    after = max(merged, default=0)
    done = [r for r in fork_state.runs if r.ordinal > after and r.status in MERGEABLE]
    if not done:
        raise Conflict(
            f"fork {merge_back_from} has no finished run to merge since "
            f"{'its last merge' if after else 'the fork point'}",
            code="nothing_to_merge",
        )
    last = done[-1]
    point = lineage.source_point or {}
    return ContextRequest(
        clean_context=clean_context,
        transfer_id=ctx.ids.next("xfer"),
        merge_back_from=merge_back_from,
        base_point={"thread_id": thread.id, "ordinal": point.get("ordinal"), "run_id": point.get("run_id")},
        source_point={"thread_id": merge_back_from, "ordinal": last.ordinal, "run_id": last.id, "after_ordinal": after},
    )
