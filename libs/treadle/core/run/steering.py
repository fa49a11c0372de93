"""How follow-up input folds into a thread: steers, queue order, edits of a queued run (L3), interrupts (L8)."""

from __future__ import annotations

from treadle.core import activity
from treadle.core.envelope import Envelope
from treadle.core.run.events import InterruptRequested, InterruptSent, RunSteered, SteerDelivered, SteerJoined
from treadle.core.run.model import Attempt, Run, script_bytes
from treadle.core.thread.events import QueueReordered, RunEdited
from treadle.core.thread.model import Message
from treadle.core.view import Folds, ThreadView


def undelivered_steers(state: ThreadView, run: Run) -> list[Message]:
    return [m for m in state.run_messages(run.id) if m.steering is not None and not m.delivered]


def _run_steered(state: ThreadView, e: Envelope, d: RunSteered) -> None:
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
            steering=d.steering,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            delivered=False,
            script=d.script,
        )
    )
    activity.record(state, e, "run.steered", d.run_id, None, d.steering)


def _steer_delivered(state: ThreadView, e: Envelope, d: SteerDelivered) -> None:
    if (m := state.message(d.message_id)) is not None:
        m.delivered = True


def _steer_joined(state: ThreadView, e: Envelope, d: SteerJoined) -> None:
    """The steer moves to where the runtime took it in: after the text the runtime streamed before it, which may
    have been stored after the steer was accepted (issue 25). Its delivery stays ``steer.delivered``'s to record."""
    m = state.message(d.message_id)
    if m is None or m.steering is None or m.run_id != d.run_id or state.messages[-1] is m:
        return
    at = next(i for i in range(len(state.messages) - 1, -1, -1) if state.messages[i] is m)  # a recent message
    state.messages.append(state.messages.pop(at))
    state.messages_moved(range(at, len(state.messages)))  # it and every message after it changed places


def _attempt_of(state: ThreadView, run_id: str, attempt_id: str) -> Attempt | None:
    run = state.run(run_id)
    for att in run.attempts if run else ():
        if att.id == attempt_id:
            return att
    return None


def _interrupt_requested(state: ThreadView, e: Envelope, d: InterruptRequested) -> None:
    if (att := _attempt_of(state, d.run_id, d.attempt_id)) is not None and att.interrupt is None:
        att.interrupt, att.interrupt_reason = "requested", d.reason  # type: ignore[assignment]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
    activity.record(state, e, "interrupt.requested", d.run_id, None, d.reason)


def _interrupt_sent(state: ThreadView, e: Envelope, d: InterruptSent) -> None:
    if (att := _attempt_of(state, d.run_id, d.attempt_id)) is not None:
        att.interrupt = d.path  # type: ignore[assignment]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is


def _queue_reordered(state: ThreadView, e: Envelope, d: QueueReordered) -> None:
    state.queue = list(d.order)


def _run_edited(state: ThreadView, e: Envelope, d: RunEdited) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    if (m := state.message(run.message_id)) is not None:
        state.text_bytes += len(d.text.encode()) - len(m.text.encode())
        m.text = d.text
        state.touch_id("messages", run.message_id)
    state.text_bytes += script_bytes(d.script) - script_bytes(run.script)
    run.script = d.script
    state.touch_id("runs", d.run_id)


FOLDS: Folds = {
    RunSteered: _run_steered,
    SteerDelivered: _steer_delivered,
    SteerJoined: _steer_joined,
    InterruptRequested: _interrupt_requested,
    InterruptSent: _interrupt_sent,
    QueueReordered: _queue_reordered,
    RunEdited: _run_edited,
}
