"""Events of the thread itself, its messages and its queue."""

from __future__ import annotations

from typing import Any

from treadle.core.envelope import Payload, event
from treadle.core.run.started import RunStarted

# The provider of a thread.created that names none. Events are stored without their default values
# (omit_defaults), so this value is part of the stored format: the log's threads of this provider carry it
# only through here. The one provider name in the core; changing it means rewriting those events.
DEFAULT_PROVIDER = "scripted"


@event("thread.created", local=True, other_runs=False, provider_threads=True)
class ThreadCreated(Payload, kw_only=True):
    thread_id: str
    title: str = ""
    provider: str = DEFAULT_PROVIDER
    model: str | None = None
    runtime_mode: str = "approval_required"
    workspace: str
    created_by: str
    # The workspace volume the thread lives on (its home): every request about its workspace or its provider
    # sessions goes there. Threads stored before homes existed lived on the one volume, "local".
    volume: str = "local"


@event("thread.moved", local=True, other_runs=True, provider_threads=True)
class ThreadMoved(Payload, kw_only=True):
    """The thread's home changed (a volume forgotten, an operator's move): its workspace is restored on
    ``to_volume`` from ``checkpoint_id`` (None: its last durable checkpoint, or empty when it has none), or from
    a later capture of it that the archive holds and this log has not recorded yet."""

    from_volume: str
    to_volume: str
    reason: str
    checkpoint_id: str | None = None


@event("message.created", local=True, other_runs=False, provider_threads=False)
class MessageCreated(Payload, kw_only=True):
    message_id: str
    role: str
    text: str
    run_id: str | None = None
    author: str | None = None


@event("message.delta", local=True, other_runs=False, provider_threads=False)
class MessageDelta(Payload, kw_only=True):
    """Coalesced assistant text (≤ 1 per message per 250 ms or 4 KiB); the first one opens the message.

    ``started``: the run's start, when the provider reported it with the turn's first text (a start waits briefly
    for the first output). It folds exactly as a ``run.started`` right before this event would; logs written
    before have that event instead, and a start with no text soon after still gets its ``run.started``."""

    message_id: str
    run_id: str
    attempt_id: str
    node_id: str
    text: str
    started: RunStarted | None = None


@event("message.completed", local=True, other_runs=False, provider_threads=False)
class MessageCompleted(Payload, kw_only=True):
    """An assistant message's whole text. A turn's last one reported with the turn's end rides in the run's end.

    Since the run's end carries that one (``RunEnded.message``, the same fields), an ordinary run has no event of
    this type; logs written before have one right before the end. Webhooks still send it as this type."""

    message_id: str
    run_id: str
    attempt_id: str
    node_id: str
    text: str
    status: str = "completed"


@event("queue.reordered", local=True, other_runs=True, provider_threads=True)
class QueueReordered(Payload, kw_only=True):
    order: list[str]


@event("run.edited", local=False, other_runs=True, provider_threads=True)
class RunEdited(Payload, kw_only=True):
    """A queued run's message was edited before it started (L3.6)."""

    run_id: str
    text: str
    script: dict[str, Any] | None = None


# Management of the thread (L1.3, L1.4): one event per fact, so each is its own audit line and its own subject
# (``…thread.renamed``), filterable on the broker, and a fold per fact stays trivial. Not ``local`` (they name no
# run or message), and their folds rewrite no item of the long lists: the projection writes the thread's field.
@event("thread.renamed", local=False, other_runs=False, provider_threads=False)
class ThreadRenamed(Payload, kw_only=True):
    title: str
    by: str


@event("thread.archived", local=False, other_runs=False, provider_threads=False)
class ThreadArchived(Payload, kw_only=True):
    """Out of the default list; refuses new messages until unarchived. History and workspace stay."""

    by: str


@event("thread.unarchived", local=False, other_runs=False, provider_threads=False)
class ThreadUnarchived(Payload, kw_only=True):
    by: str


@event("thread.deleted", local=False, other_runs=False, provider_threads=False)
class ThreadDeleted(Payload, kw_only=True):
    """The tombstone: the one event of the thread the log keeps once its data is erased. It carries what the
    erasure needs to be resumed from it alone (the workspace and its home volume) and who deleted it."""

    by: str
    workspace: str
    volume: str = "local"
    provider_threads: list[str] = []  # their ids: the provider-native state kept off the node goes too
