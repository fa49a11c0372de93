"""Rollbacks, in the order requested."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from treadle.core.checkpoints.model import FileChange
from treadle.core.entity import Entity


class Rollback(Entity, kw_only=True):
    """A rollback of a thread to a run (L10.5) or of a child node to its checkpoint (L10.6), as audited."""

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
    after_run_id: str | None = None  # waits for this run, interrupted for the rollback, to end
    provider_context: Literal["kept", "divergent", "rolled_back"] = "divergent"
    provider_thread_id: str | None = None  # the provider thread asked to drop turns natively (L10.5)
    provider_session_id: str | None = None  # ...through this session
    provider_turns: int = 0  # the turns it was asked to drop (then dropped, when ``rolled_back``)
    provider_error: str | None = None  # why the native rollback was not done (the provider's message)
    undo_ref: str | None = None
    undo_commit: str | None = None
    files: list[FileChange] = msgspec.field(default_factory=list)
    error: str | None = None
    requested_by: str | None = None
    started_at: datetime
    ended_at: datetime | None = None
