"""Workspace checkpoints, their file changes and child scopes."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from treadle.core.entity import Entity


class FileChange(Entity, kw_only=True):
    path: str
    change: Literal["added", "modified", "deleted", "renamed"]
    added: int = 0
    removed: int = 0


class Checkpoint(Entity, kw_only=True):
    id: str
    scope: str = "root"
    ordinal: int
    run_id: str | None = None
    kind: Literal["baseline", "run", "node"] = "run"  # node: the end of a child scope (L10.3)
    status: str = "completed"
    ref: str | None = None
    commit: str | None = None
    tree: str | None = None
    unchanged: bool = False
    files: list[FileChange] = msgspec.field(default_factory=list)
    stale: bool = False
    created_at: datetime
    node_id: str | None = None  # the child node of a child scope (L10.3)
    children: list[ChildCheckpoint] = msgspec.field(default_factory=list)  # a root checkpoint's child scopes
    skipped: list[str] = msgspec.field(default_factory=list)  # paths left out: "<path> (submodule|too_large)"
    files_total: int | None = None  # set when `files` was cut: how many files changed


class ChildCheckpoint(Entity, kw_only=True):
    """What a root checkpoint says about a child scope of its run (L10.3)."""

    checkpoint_id: str
    node_id: str | None = None
    scope: str
    status: str
    files: int = 0
