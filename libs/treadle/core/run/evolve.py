"""How runs, their attempts and their execution nodes fold into a thread (L2, L3, L9)."""

from __future__ import annotations

from typing import Literal, cast

from treadle.core import activity
from treadle.core.checkpoints.evolve import checkpoint_captured
from treadle.core.envelope import Envelope
from treadle.core.lineage.evolve import context_requested
from treadle.core.run.events import (
    AttemptEnded,
    AttemptStarted,
    NodeCompleted,
    NodeStarted,
    RunCancelled,
    RunCompleted,
    RunDispatched,
    RunEnded,
    RunFailed,
    RunHeld,
    RunInterrupted,
    RunQueued,
    RunStarted,
    RunWarning,
)
from treadle.core.run.model import Attempt, ExecutionNode, Run, script_bytes
from treadle.core.thread.events import MessageDelta
from treadle.core.thread.evolve import message_completed, message_delta
from treadle.core.thread.model import Message
from treadle.core.view import Folds, ThreadView


def _run_queued(state: ThreadView, e: Envelope, d: RunQueued) -> None:
    steer = state.message(d.message_id)
    if steer is not None:  # a steer that came too late for its run moves to the run that supersedes it
        left, at = steer.run_id, state.position("messages", d.message_id)
        steer.run_id, steer.delivered = d.run_id, True
        state.messages_moved(() if at is None else (at,), (left,))
    else:
        state.text_bytes += len(d.text.encode())
        state.messages.append(
            Message(
                id=d.message_id,
                role="user",
                text=d.text,
                run_id=d.run_id,
                author=d.author,
                created_at=e.at,
                command_id=e.command_id,
            )
        )
    if d.supersedes_run_id and (old := state.run(d.supersedes_run_id)) is not None:
        old.superseded_by = d.run_id
        state.touch_id("runs", old.id)
        moved = []
        for i, m in enumerate(state.messages):  # every undelivered steer of the old run rides along with this one
            if m.run_id == old.id and not m.delivered:
                m.run_id, m.delivered = d.run_id, True
                moved.append(i)
        state.messages_moved(moved, (old.id,))
    run = Run(
        id=d.run_id,
        ordinal=d.ordinal,
        message_id=d.message_id,
        mode=d.mode,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
        disposition=d.disposition,
        provider=d.provider,
        model=d.model,
        script=d.script,
        queued_at=e.at,
        supersedes_run_id=d.supersedes_run_id,
    )
    run.attempts.append(Attempt(id=d.attempt_id, run_id=d.run_id, number=1, root_node_id=d.root_node_id))
    run.nodes.append(_root_turn(d.root_node_id, d.run_id, d.attempt_id))
    state.runs.append(run)
    state.text_bytes += script_bytes(d.script)
    if d.context is not None:
        context_requested(state, e, run, d.context)
    if d.dispatched:
        run.status = "starting"
        state.active_run_id = d.run_id
    elif d.front:
        state.queue.insert(0, d.run_id)
    else:
        state.queue.append(d.run_id)


def _root_turn(node_id: str, run_id: str, attempt_id: str) -> ExecutionNode:
    """Every attempt opens with its root turn, the node whose outcome is the run's."""
    return ExecutionNode(id=node_id, run_id=run_id, attempt_id=attempt_id, kind="root_turn", counts_for_run=True)


def _run_dispatched(state: ThreadView, e: Envelope, d: RunDispatched) -> None:
    run = state.run(d.run_id)
    if run is None or run.status != "queued":
        return
    if d.run_id in state.queue:
        state.queue.remove(d.run_id)
    run.status = "starting"
    state.active_run_id = d.run_id


def _run_held(state: ThreadView, e: Envelope, d: RunHeld) -> None:
    """L9.3: the dispatched run waits for provider capacity, visibly: back to ``queued``, with the reason."""
    run = state.run(d.run_id)
    if run is None or run.terminal or run.attempt.id != d.attempt_id or run.attempt.status != "pending":
        return
    run.status = "queued"
    run.waiting_reason = d.reason
    activity.record(state, e, "run.held", d.run_id, None, f"waiting for a provider: {d.reason}")


def _run_started(state: ThreadView, e: Envelope, d: RunStarted) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    run.status = "running"
    run.waiting_reason = None
    run.started_at = run.started_at or e.at
    att = run.attempt
    att.status = "running"
    att.session_id = d.session_id
    att.turn_id = d.turn_id
    att.native_turn_ref = d.native_turn_ref
    att.started_at = e.at
    pth = state.session_thread(d.session_id) or state.provider_thread
    att.provider_thread_id = pth.id if pth else None
    root = run.node(att.root_node_id)
    if root is not None:
        root.status = "running"
        root.started_at = e.at


def _message_delta(state: ThreadView, e: Envelope, d: MessageDelta) -> None:
    if d.started is not None:  # the run's start, carried by its first text: folded as its own event before it was
        _run_started(state, e, d.started)
    message_delta(state, e, d)


EndStatus = Literal["completed", "failed", "interrupted", "cancelled"]  # a run's, its attempt's and root node's


def _run_ended(state: ThreadView, e: Envelope, d: RunEnded) -> None:
    """Every event that ends a run: the status it ends in is the event's trait (``ends_run``)."""
    status = cast("EndStatus", d.TRAITS.ends_run)
    if d.started is not None:  # the run's start, carried: folded as its own event before this one was
        _run_started(state, e, d.started)
    if d.message is not None:  # the turn's last message, carried: folded as its own event before this one was
        message_completed(state, e, d.message)
    run = state.run(d.run_id)
    if run is None or run.terminal:
        return
    if d.checkpoint is not None:
        checkpoint_captured(state, e, d.checkpoint)
        run.checkpoint_id = d.checkpoint.checkpoint_id
    run.status = status
    run.waiting_reason = None
    run.ended_at = e.at
    run.error = d.error
    for att in run.attempts:
        if att.id == d.attempt_id:
            att.status = status
            att.ended_at = e.at
            root = run.node(att.root_node_id)
            if root is not None:
                root.status = status
                root.ended_at = e.at
    if state.active_run_id == d.run_id:
        state.active_run_id = None
    if d.run_id in state.queue:
        state.queue.remove(d.run_id)
    for plan in state.plans:  # L2.3: the run's todo lists are final with it
        if plan.run_id == d.run_id and plan.status == "open" and plan.kind == "todo_list":
            plan.status = "final"
    # Coverage goes to the provider thread the run actually ran on (L5.3: switching leaves several).
    ended = next((a for a in run.attempts if a.id == d.attempt_id), None)
    pth = state.provider_thread_of(ended.provider_thread_id if ended else None) or state.provider_thread
    if pth is not None and status == "completed" and not state.covers(pth, run.ordinal):
        pth.covered_ordinals.append(run.ordinal)


def _attempt_started(state: ThreadView, e: Envelope, d: AttemptStarted) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    run.attempts.append(
        Attempt(
            id=d.attempt_id,
            run_id=d.run_id,
            number=len(run.attempts) + 1,
            reason=d.reason,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            root_node_id=d.root_node_id,
            message_ids=list(d.message_ids),
            script=d.script,
        )
    )
    for message_id in d.message_ids:  # the steers a restart carries over: not the message the event names
        if (m := state.message(message_id)) is not None:
            m.delivered = True
            state.touch_id("messages", message_id)
    run.nodes.append(_root_turn(d.root_node_id, d.run_id, d.attempt_id))
    run.status = "starting"


def _attempt_ended(state: ThreadView, e: Envelope, d: AttemptEnded) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    for att in run.attempts:
        if att.id == d.attempt_id:
            att.status = d.status  # type: ignore[assignment]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            att.error = d.reason
            att.ended_at = e.at
            for node in run.nodes:
                # an app-owned node (a delegated task) ends with its child thread, not with the attempt
                open_ = node.status in ("pending", "running", "waiting") and node.owner == "provider"
                if node.attempt_id == att.id and open_:
                    node.status = "interrupted" if d.status == "interrupted" else "failed"
                    node.ended_at = e.at
    activity.record(state, e, "attempt.ended", d.run_id, None, f"attempt {d.status}: {d.reason or ''}".strip())


def _node_started(state: ThreadView, e: Envelope, d: NodeStarted) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    run.nodes.append(
        ExecutionNode(
            id=d.node_id,
            run_id=d.run_id,
            attempt_id=d.attempt_id,
            kind=d.kind,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            parent_id=d.parent_id,
            status="running",
            title=d.title,
            input=d.input,
            started_at=e.at,
            native_thread_ref=d.native_thread_ref,
        )
    )
    activity.record(state, e, f"{d.kind}.started", d.run_id, d.node_id, d.title)


def _node_completed(state: ThreadView, e: Envelope, d: NodeCompleted) -> None:
    run = state.run(d.run_id)
    node = run.node(d.node_id) if run else None
    if node is None:
        return
    node.status = d.status  # type: ignore[assignment]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
    node.output = d.output
    node.ended_at = e.at
    activity.record(state, e, f"{node.kind}.{d.status}", d.run_id, d.node_id, node.title)


def _run_warning(state: ThreadView, e: Envelope, d: RunWarning) -> None:
    activity.record(state, e, "runtime.warning", d.run_id, None, d.message)


FOLDS: Folds = {
    RunQueued: _run_queued,
    RunDispatched: _run_dispatched,
    RunHeld: _run_held,
    RunStarted: _run_started,
    MessageDelta: _message_delta,
    RunCompleted: _run_ended,
    RunFailed: _run_ended,
    RunInterrupted: _run_ended,
    RunCancelled: _run_ended,
    AttemptStarted: _attempt_started,
    AttemptEnded: _attempt_ended,
    NodeStarted: _node_started,
    NodeCompleted: _node_completed,
    RunWarning: _run_warning,
}
