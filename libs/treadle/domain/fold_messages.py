"""How messages fold into a thread: created whole, or streamed as deltas and completed (L2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import events as ev
from .entities import Message

if TYPE_CHECKING:
    from .thread import ThreadState


def _message_created(state: ThreadState, e: ev.Envelope, d: ev.MessageCreated) -> None:
    state.messages.append(
        Message(
            id=d.message_id,
            role=d.role,  # type: ignore[arg-type]
            text=d.text,
            run_id=d.run_id,
            author=d.author,
            created_at=e.at,
            command_id=e.command_id,
        )
    )


def _message_delta(state: ThreadState, e: ev.Envelope, d: ev.MessageDelta) -> None:
    m = state.message(d.message_id)
    if m is None:
        m = _streamed(state, e, d)
        m.status = "streaming"
    m.text += d.text


def _message_completed(state: ThreadState, e: ev.Envelope, d: ev.MessageCompleted) -> None:
    m = state.message(d.message_id)
    if m is None:
        m = _streamed(state, e, d)
    m.text = d.text
    m.status = d.status  # type: ignore[assignment]


def _streamed(state: ThreadState, e: ev.Envelope, d: ev.MessageDelta | ev.MessageCompleted) -> Message:
    """An assistant message streamed by the provider: it begins with its first delta, or with its completion when
    no delta came."""
    m = Message(
        id=d.message_id, role="assistant", run_id=d.run_id, attempt_id=d.attempt_id, node_id=d.node_id, created_at=e.at
    )
    state.messages.append(m)
    return m


FOLDS = {ev.MessageCreated: _message_created, ev.MessageDelta: _message_delta, ev.MessageCompleted: _message_completed}
