"""How lineage folds into a thread: forks, provider switches, handoffs, merge-back (L5, L6, L7)."""

from __future__ import annotations

from treadle.core import activity
from treadle.core.envelope import Envelope
from treadle.core.lineage.events import (
    ChildForked,
    ContextDelivered,
    ContextRequest,
    ContextResolved,
    DelegationEnded,
    DelegationFinished,
    DelegationStarted,
    HandoffCreated,
    ThreadDelegated,
    ThreadForked,
    TransferFailed,
)
from treadle.core.lineage.model import ContextHandoff, ContextTransfer, Lineage, StartContext
from treadle.core.run.model import ExecutionNode, Run
from treadle.core.view import Folds, ThreadView


def _thread_forked(state: ThreadView, e: Envelope, d: ThreadForked) -> None:
    if state.thread is not None:
        state.thread.parent_thread_id = d.parent_thread_id
    lineage = state.lineage = state.lineage or Lineage()
    lineage.parent_thread_id, lineage.root_thread_id = d.parent_thread_id, d.root_thread_id
    lineage.relationship, lineage.source_point = "fork", dict(d.source_point)
    state.transfers.append(
        ContextTransfer(
            id=d.transfer_id,
            type="fork",
            source_thread_id=d.parent_thread_id,
            source_point=dict(d.source_point),
            fidelity=d.fidelity,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            created_at=e.at,
        )
    )


def _child_forked(state: ThreadView, e: Envelope, d: ChildForked) -> None:
    lineage = state.lineage = state.lineage or Lineage()
    if all(c.get("thread_id") != d.child_thread_id for c in lineage.children):
        lineage.children.append(
            {
                "thread_id": d.child_thread_id,
                "transfer_id": d.transfer_id,
                "source_point": dict(d.source_point),
                "at": e.at.isoformat(),
            }
        )


def context_requested(state: ThreadView, e: Envelope, run: Run, d: ContextRequest) -> None:
    """Folded with the ``run.queued`` that carries it."""
    run.clean_context = d.clean_context
    if d.transfer_id and d.merge_back_from and state.transfer(d.transfer_id) is None:
        state.transfers.append(
            ContextTransfer(
                id=d.transfer_id,
                type="merge_back",
                source_thread_id=d.merge_back_from,
                source_point=dict(d.source_point or {}),
                base_point=d.base_point,
                run_id=run.id,
                created_at=e.at,
            )
        )


def _handoff_created(state: ThreadView, e: Envelope, d: HandoffCreated) -> None:
    if state.handoff(d.handoff_id) is not None:
        return
    state.handoffs.append(
        ContextHandoff(
            id=d.handoff_id,
            run_id=d.run_id,
            strategy=d.strategy,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            reason=d.reason,
            from_provider=d.from_provider,
            to_provider=d.to_provider,
            provider_thread_id=d.provider_thread_id,
            transfer_id=d.transfer_id,
            source_thread_id=d.source_thread_id,
            covered_ordinals=list(d.covered_ordinals),
            text=d.text,
            truncated=d.truncated,
            summariser=d.summariser,
            version=d.version,
            fallback=d.fallback,
            created_at=e.at,
        )
    )
    run = state.run(d.run_id)
    if run is not None and d.handoff_id not in run.handoff_ids:
        run.handoff_ids.append(d.handoff_id)
    activity.record(state, e, "handoff.created", d.run_id, None, f"{d.strategy} for {d.to_provider}")


def _context_resolved(state: ThreadView, e: Envelope, d: ContextResolved) -> None:
    state.start_contexts.append(
        StartContext(
            run_id=d.run_id,
            provider=d.provider,
            provider_thread_id=d.provider_thread_id,
            fresh=d.fresh,
            fork_native_ref=d.fork_native_ref,
            fork_at_turn_ref=d.fork_at_turn_ref,
            handoff_ids=list(d.handoff_ids),
            transfer_ids=list(d.transfers),
        )
    )
    for transfer_id, status in d.transfers.items():
        if (t := state.transfer(transfer_id)) is not None:
            t.status, t.run_id = status, d.run_id  # type: ignore[assignment]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            t.fidelity = t.fidelity or ("native" if status == "resolved_native" else "portable")
            t.handoff_id = next((h for h in d.handoff_ids if (ho := state.handoff(h)) and ho.transfer_id == t.id), None)


def _context_delivered(state: ThreadView, e: Envelope, d: ContextDelivered) -> None:
    context = state.start_context(d.run_id)
    if context is None or context.delivered:
        return
    context.delivered = True
    pth = state.provider_thread_of(d.provider_thread_id)
    for handoff_id in context.handoff_ids:
        if (h := state.handoff(handoff_id)) is None:
            continue
        h.delivered = True
        state.touch_id("handoffs", handoff_id)
        if pth is not None and h.strategy in ("delta", "full_thread_summary"):  # this thread's own runs
            pth.covered_ordinals = sorted(set(pth.covered_ordinals) | set(h.covered_ordinals))
    for transfer_id in context.transfer_ids:
        if (t := state.transfer(transfer_id)) is not None and t.status.startswith("resolved"):
            t.status = "consumed"
    if context.transfer_ids:
        activity.record(state, e, "transfer.consumed", d.run_id, None, ", ".join(context.transfer_ids))


def _transfer_failed(state: ThreadView, e: Envelope, d: TransferFailed) -> None:
    if (t := state.transfer(d.transfer_id)) is not None:
        t.status, t.error, t.run_id = "failed", d.error, d.run_id or t.run_id
    if d.run_id:
        activity.record(state, e, "transfer.failed", d.run_id, None, d.error)


def _thread_delegated(state: ThreadView, e: Envelope, d: ThreadDelegated) -> None:
    if state.thread is not None:
        state.thread.parent_thread_id = d.parent_thread_id
    lineage = state.lineage = state.lineage or Lineage()
    lineage.parent_thread_id, lineage.root_thread_id = d.parent_thread_id, d.root_thread_id
    lineage.relationship = "subagent"
    lineage.source_point = {"thread_id": d.parent_thread_id, "run_id": d.parent_run_id, "node_id": d.parent_node_id}
    lineage.delegation = {
        "parent_run_id": d.parent_run_id,
        "parent_node_id": d.parent_node_id,
        "depth": d.depth,
        "mode": d.mode,
        "role": d.role,
    }


def _delegation_started(state: ThreadView, e: Envelope, d: DelegationStarted) -> None:
    run = state.run(d.run_id)
    if run is None or run.node(d.node_id) is not None:
        return
    run.nodes.append(
        ExecutionNode(
            id=d.node_id,
            run_id=d.run_id,
            attempt_id=d.attempt_id,
            kind="subagent",
            owner="app",
            child_thread_id=d.child_thread_id,
            status="running",
            title=d.title,
            input={**d.input, "child_run_id": d.child_run_id},
            started_at=e.at,
        )
    )
    state.touch_id("runs", d.run_id)
    lineage = state.lineage = state.lineage or Lineage()
    if all(c.get("thread_id") != d.child_thread_id for c in lineage.children):
        lineage.children.append(
            {
                "thread_id": d.child_thread_id,
                "relationship": "subagent",
                "source_point": {"run_id": d.run_id, "node_id": d.node_id},
                "at": e.at.isoformat(),
            }
        )
    activity.record(state, e, "subagent.started", d.run_id, d.node_id, d.title)


def _delegation_finished(state: ThreadView, e: Envelope, d: DelegationFinished) -> None:
    if state.transfer(d.transfer_id) is not None:
        return
    run = state.run(d.run_id)
    node = run.node(d.node_id) if run else None
    if node is not None:
        node.status, node.output, node.ended_at = d.status, d.summary, e.at  # type: ignore[assignment]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
        state.touch_id("runs", d.run_id)
    state.transfers.append(
        ContextTransfer(
            id=d.transfer_id,
            type="delegation_result",
            status="consumed",
            source_thread_id=d.child_thread_id,
            source_point={"thread_id": d.child_thread_id, "run_id": d.child_run_id},
            run_id=d.run_id,
            summary=d.summary,
            created_at=e.at,
        )
    )
    activity.record(state, e, f"subagent.{d.status}", d.run_id, d.node_id, d.summary[:200])


def _delegation_ended(state: ThreadView, e: Envelope, d: DelegationEnded) -> None:
    if state.lineage is not None and state.lineage.delegation is not None:
        state.lineage.delegation["ended"] = d.status


FOLDS: Folds = {
    ThreadForked: _thread_forked,
    ThreadDelegated: _thread_delegated,
    DelegationStarted: _delegation_started,
    DelegationFinished: _delegation_finished,
    DelegationEnded: _delegation_ended,
    ChildForked: _child_forked,
    HandoffCreated: _handoff_created,
    ContextResolved: _context_resolved,
    ContextDelivered: _context_delivered,
    TransferFailed: _transfer_failed,
}
