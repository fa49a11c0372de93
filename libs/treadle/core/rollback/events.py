"""Events of rollbacks (of a thread to a run, of a node to a checkpoint)."""

from __future__ import annotations

from treadle.core.checkpoints.model import FileChange
from treadle.core.envelope import Payload, event


@event("rollback.started", local=False, other_runs=True, provider_threads=True)
class RollbackStarted(Payload, kw_only=True):
    """A rollback was accepted: new runs wait until it completes or fails. ``kind=thread`` rolls the thread
    back to run ``to_run_ordinal``; ``kind=node`` restores a child node's checkpoint (L10.6)."""

    rollback_id: str
    kind: str
    to_run_ordinal: int | None = None
    node_id: str | None = None
    checkpoint_id: str
    commit: str
    rolled_back_run_ids: list[str] = []
    stale_checkpoint_ids: list[str] = []
    touches_parent_workspace: bool = False
    after_run_id: str | None = None  # carried out once this run (interrupted for it) has ended


@event("rollback.completed", local=False, other_runs=True, provider_threads=True)
class RollbackCompleted(Payload, kw_only=True):
    """The files are restored (``files``: what changed). Later runs are ``rolled_back``, later checkpoints
    stale; ``provider_context`` says what became of the provider conversation."""

    rollback_id: str
    undo_ref: str
    undo_commit: str
    files: list[FileChange] = []
    # kept: the provider thread saw none of the rolled-back runs; rolled_back: it dropped their turns
    # natively (``provider_thread_id`` kept, ``provider_turns_dropped``); divergent: it still remembers them,
    # so the next run opens a fresh one (``provider_error``: why a native rollback was not done, if tried).
    provider_context: str = "divergent"
    skipped: list[str] = []
    provider_thread_id: str | None = None
    provider_turns_dropped: int = 0
    provider_error: str | None = None


@event("rollback.provider_requested", local=False, other_runs=True, provider_threads=True)
class RollbackProviderRequested(Payload, kw_only=True):
    """The files are restored and provider thread ``provider_thread_id`` is asked (through ``session_id`` on
    ``host_id``) to drop its last ``turns`` turns (L10.5). Recorded before the host is asked: a coordinator
    that dies after this asks that same session again (hosts answer a rollback id once), never another."""

    rollback_id: str
    provider_thread_id: str
    session_id: str
    host_id: str
    turns: int


@event("rollback.failed", local=False, other_runs=True, provider_threads=True)
class RollbackFailed(Payload, kw_only=True):
    """The restore could not be done; nothing is marked rolled back (files may be as the error says)."""

    rollback_id: str
    error: str
