"""Views of checkpoints (L10) and of rollbacks as audited."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from . import View


class FileChange(View, kw_only=True):
    path: str
    change: Literal["added", "modified", "deleted", "renamed"]
    added: int = 0
    removed: int = 0


class ChildCheckpoint(View, kw_only=True):
    """What a root checkpoint says about a child scope of its run (L10.3)."""

    checkpoint_id: str
    node_id: str | None = None
    scope: str
    status: str
    files: int = 0


class Checkpoint(View, kw_only=True):
    id: str
    scope: str = "root"
    ordinal: int
    run_id: str | None = None
    kind: Literal["baseline", "run", "node"] = "run"
    status: str = "completed"
    ref: str | None = None
    commit: str | None = None
    tree: str | None = None
    unchanged: bool = False
    files: list[FileChange] = msgspec.field(default_factory=list)
    stale: bool = False
    created_at: datetime
    node_id: str | None = None
    children: list[ChildCheckpoint] = msgspec.field(default_factory=list)
    skipped: list[str] = msgspec.field(default_factory=list)  # "<path> (submodule|too_large)"
    files_total: int | None = None  # set when `files` was cut: how many files changed


class Rollback(View, kw_only=True):
    """A rollback of a thread to a run (L10.5) or of a child node to its checkpoint (L10.6)."""

    id: str
    command_id: str
    kind: Literal["thread", "node"]
    status: Literal["in_progress", "completed", "failed"] = "in_progress"
    to_run_ordinal: int | None = None
    node_id: str | None = None
    checkpoint_id: str
    commit: str
    rolled_back_run_ids: list[str] = msgspec.field(default_factory=list)
    stale_checkpoint_ids: list[str] = msgspec.field(default_factory=list)
    touches_parent_workspace: bool = False
    after_run_id: str | None = None
    provider_context: Literal["kept", "divergent", "rolled_back"] = "divergent"
    provider_thread_id: str | None = None
    provider_session_id: str | None = None
    provider_turns: int = 0
    provider_error: str | None = None
    undo_ref: str | None = None
    undo_commit: str | None = None
    files: list[FileChange] = msgspec.field(default_factory=list)
    error: str | None = None
    requested_by: str | None = None
    started_at: datetime
    ended_at: datetime | None = None


class RollbackView(Rollback, kw_only=True):
    """A rollback as the rollback routes answer it: with its thread and the thread's sequence the answer
    reflects (a read with ``min_seq`` of it sees the rollback's effects, however far the projection lags)."""

    thread_id: str
    seq: int


def rollback_view(rollback: Rollback, thread_id: str, seq: int) -> RollbackView:
    return RollbackView(**msgspec.structs.asdict(rollback), thread_id=thread_id, seq=seq)
