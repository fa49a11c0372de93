"""Events of workspace checkpoints."""

from __future__ import annotations

from treadle.core.checkpoints.model import ChildCheckpoint, FileChange
from treadle.core.envelope import Payload, event


@event("checkpoint.captured", local=True, other_runs=False, provider_threads=False)
class CheckpointCaptured(Payload, kw_only=True):
    checkpoint_id: str
    run_id: str | None = None
    scope: str = "root"
    ordinal: int
    kind: str = "run"
    status: str = "completed"
    ref: str | None = None
    commit: str | None = None
    tree: str | None = None
    unchanged: bool = False
    files: list[FileChange] = []
    node_id: str | None = None  # a child scope's node (L10.3)
    children: list[ChildCheckpoint] = []  # a root checkpoint's summaries of its run's child scopes (L10.3)
    skipped: list[str] = []  # paths a checkpoint leaves alone: "<path> (submodule)"
    files_total: int | None = None  # set when `files` was cut (at 1,000): the number of files changed
