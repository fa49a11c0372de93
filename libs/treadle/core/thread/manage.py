"""Managing a thread as a whole (L1.3, L1.4): renaming, archiving and deleting it.

Rules: a rename is allowed at any time (a run goes on under the new title); archiving refuses while a run is
active or queued or a rollback waits (409 ``thread_busy``), so an archived thread is always idle, and it
refuses new messages until unarchived; deleting refuses on the same condition (interrupt the run or cancel the
queue first) and appends the tombstone, after which every command but a delete finds no thread. Repeating a
change appends nothing, and a repeated delete answers again so the erasure can resume from the tombstone."""

from __future__ import annotations

from treadle.core.commands import Accepted, Command
from treadle.core.envelope import Payload
from treadle.core.errors import BadRequest, Conflict, NotFound
from treadle.core.rollback import decide as rollback
from treadle.core.thread.commands import DeleteThread, UpdateThread
from treadle.core.thread.events import ThreadArchived, ThreadDeleted, ThreadRenamed, ThreadUnarchived
from treadle.core.thread.model import Thread
from treadle.core.view import ThreadView

Decision = tuple[list[Payload], Accepted]


def live_thread(state: ThreadView, command: Command) -> Thread:
    """The thread a command is for; a deleted one is not found, like another tenant's."""
    if state.thread is None or (state.thread.deleted and not isinstance(command.body, DeleteThread)):
        raise NotFound(f"thread {command.thread} not found", code="thread_not_found")
    return state.thread


def check_idle(state: ThreadView, doing: str) -> None:
    """409 ``thread_busy`` while a run is active or queued or a rollback waits."""
    if state.active_run_id is not None or state.queue or rollback.pending(state) is not None:
        raise Conflict(
            f"a run is active or queued on this thread: interrupt it or cancel the queue before {doing} it",
            code="thread_busy",
            details={"active_run_id": state.active_run_id, "queued": len(state.queue)},
        )


def update_thread(state: ThreadView, command: Command, body: UpdateThread) -> Decision:
    thread = live_thread(state, command)
    if body.title is None and body.archived is None:
        raise BadRequest("name at least one of title and archived", code="empty_update")
    events: list[Payload] = []
    if body.title is not None and body.title != thread.title:
        events.append(ThreadRenamed(title=body.title, by=command.user))
    if body.archived is True and not thread.archived:
        check_idle(state, "archiving")
        events.append(ThreadArchived(by=command.user))
    elif body.archived is False and thread.archived:
        events.append(ThreadUnarchived(by=command.user))
    receipt = Accepted(seq=0 if events else state.seq, thread_id=thread.id, duplicate=not events)
    return events, receipt


def delete_thread(state: ThreadView, command: Command, body: DeleteThread) -> Decision:
    thread = live_thread(state, command)
    if thread.deleted:
        return [], Accepted(seq=state.seq, thread_id=thread.id, disposition="deleted", duplicate=True)
    check_idle(state, "deleting")
    tombstone = ThreadDeleted(
        by=command.user,
        workspace=thread.workspace,
        volume=thread.volume,
        provider_threads=[p.id for p in state.provider_threads],
    )
    return [tombstone], Accepted(seq=0, thread_id=thread.id, disposition="deleted")


def check_open(thread: Thread) -> None:
    """A new message needs an unarchived thread."""
    if thread.archived:
        raise Conflict("the thread is archived: unarchive it to send", code="thread_archived")
