"""How the thread and its messages fold: created whole, or streamed as deltas and completed (L2)."""

from __future__ import annotations

from treadle.core.envelope import Envelope
from treadle.core.thread.events import (
    MessageCompleted,
    MessageCreated,
    MessageDelta,
    ThreadArchived,
    ThreadCreated,
    ThreadDeleted,
    ThreadMoved,
    ThreadRenamed,
    ThreadUnarchived,
)
from treadle.core.thread.model import Message, Move, Thread
from treadle.core.view import Folds, ThreadView


def _message_created(state: ThreadView, e: Envelope, d: MessageCreated) -> None:
    state.text_bytes += len(d.text.encode())
    state.messages.append(
        Message(
            id=d.message_id,
            role=d.role,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            text=d.text,
            run_id=d.run_id,
            author=d.author,
            created_at=e.at,
            command_id=e.command_id,
        )
    )


def message_delta(state: ThreadView, e: Envelope, d: MessageDelta) -> None:
    """The text of a delta (its carried start, if any, is the run's fold: ``run.evolve``)."""
    m = state.message(d.message_id)
    if m is None:
        m = _streamed(state, e, d)
        m.status = "streaming"
    m.text += d.text
    state.text_bytes += len(d.text.encode())


def message_completed(state: ThreadView, e: Envelope, d: MessageCompleted) -> None:
    m = state.message(d.message_id)
    if m is None:
        m = _streamed(state, e, d)
    state.text_bytes += len(d.text.encode()) - len(m.text.encode())
    m.text = d.text
    m.status = d.status  # type: ignore[assignment]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is


def _streamed(state: ThreadView, e: Envelope, d: MessageDelta | MessageCompleted) -> Message:
    """An assistant message streamed by the provider: it begins with its first delta, or with its completion when
    no delta came."""
    m = Message(
        id=d.message_id, role="assistant", run_id=d.run_id, attempt_id=d.attempt_id, node_id=d.node_id, created_at=e.at
    )
    state.messages.append(m)
    return m


def _thread_created(state: ThreadView, e: Envelope, d: ThreadCreated) -> None:
    state.thread = Thread(
        id=d.thread_id,
        tenant=e.tenant,
        title=d.title,
        provider=d.provider,
        model=d.model,
        runtime_mode=d.runtime_mode,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
        workspace=d.workspace,
        created_by=d.created_by,
        created_at=e.at,
        command_id=e.command_id,
        volume=d.volume,
    )


def _thread_moved(state: ThreadView, e: Envelope, d: ThreadMoved) -> None:
    if state.thread is None:
        return
    state.thread.volume = d.to_volume
    state.thread.moves.append(
        Move(from_volume=d.from_volume, to_volume=d.to_volume, reason=d.reason, checkpoint_id=d.checkpoint_id, at=e.at)
    )


def _thread_renamed(state: ThreadView, e: Envelope, d: ThreadRenamed) -> None:
    if state.thread is not None:
        state.thread.title = d.title


def _thread_archived(state: ThreadView, e: Envelope, d: ThreadArchived) -> None:
    if state.thread is not None:
        state.thread.archived = True


def _thread_unarchived(state: ThreadView, e: Envelope, d: ThreadUnarchived) -> None:
    if state.thread is not None:
        state.thread.archived = False


def _thread_deleted(state: ThreadView, e: Envelope, d: ThreadDeleted) -> None:
    """Once the erasure purged the log the tombstone is all there is: the thread is rebuilt from it alone, just
    enough for a repeated delete to find its workspace and home."""
    if state.thread is None:
        state.thread = Thread(
            id=e.thread,
            tenant=e.tenant,
            workspace=d.workspace,
            created_by="",
            created_at=e.at,
            command_id=e.command_id,
            volume=d.volume,
        )
    state.thread.deleted = True
    state.thread.erase_provider_threads = list(d.provider_threads)


FOLDS: Folds = {
    ThreadCreated: _thread_created,
    ThreadMoved: _thread_moved,
    ThreadRenamed: _thread_renamed,
    ThreadArchived: _thread_archived,
    ThreadUnarchived: _thread_unarchived,
    ThreadDeleted: _thread_deleted,
    MessageCreated: _message_created,
    MessageCompleted: message_completed,
}
