"""Lineage of a forked thread, context transfers, handoffs and each run's start context."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from treadle.core.entity import Entity


class ContextTransfer(Entity, kw_only=True):
    """Context crossing a thread boundary (L6 fork, L7 merge-back), resolved lazily by the first run that needs
    it. ``source_point``/``base_point``: ``{"thread_id", "ordinal", "run_id"?, "node_id"?, "checkpoint_id"?}``."""

    id: str
    type: Literal["fork", "merge_back", "delegation_result"]
    status: Literal["pending", "resolved_native", "resolved_portable", "consumed", "failed"] = "pending"
    source_thread_id: str
    source_point: dict[str, Any] = msgspec.field(default_factory=dict)
    base_point: dict[str, Any] | None = None
    fidelity: Literal["native", "portable", "synthetic"] | None = None  # L6.4: synthetic forks are lower fidelity
    run_id: str | None = None  # the run that resolved (and consumed) it
    handoff_id: str | None = None
    error: str | None = None
    summary: str | None = None  # a delegation result: the child's last assistant text, else its status
    created_at: datetime | None = None


class ContextHandoff(Entity, kw_only=True):
    """L5.5: the text injected with a run's user message, stored before any provider sees it."""

    id: str
    run_id: str
    strategy: Literal["delta", "full_thread_summary", "fork_context", "merge_back"]
    reason: str = ""
    from_provider: str | None = None
    to_provider: str
    provider_thread_id: str | None = None
    transfer_id: str | None = None
    source_thread_id: str | None = None
    covered_ordinals: list[int] = msgspec.field(default_factory=list)
    text: str
    truncated: bool = False
    summariser: str = "local"  # L5.5: "local" (deterministic) or "provider:<name>"
    version: int = 1
    fallback: str | None = None  # why a configured provider-backed summariser was not used
    delivered: bool = False
    created_at: datetime | None = None


class Lineage(Entity, kw_only=True):
    """Where a thread sits in its tree (L6.1): its parent and root, and the threads forked from it."""

    parent_thread_id: str | None = None
    root_thread_id: str | None = None
    relationship: Literal["fork", "subagent"] | None = None
    source_point: dict[str, Any] | None = None
    # a delegated task's thread: {parent_run_id, parent_node_id, depth, mode, role, ended?}
    delegation: dict[str, Any] | None = None
    children: list[dict[str, Any]] = msgspec.field(default_factory=list)  # {thread_id, transfer_id, source_point}


class StartContext(Entity, kw_only=True):
    """How a run's provider context was resolved (L5.2, L6.2): which provider thread, and what came with it."""

    run_id: str
    provider: str
    provider_thread_id: str
    fresh: bool  # a new provider thread, not a resumed one
    fork_native_ref: str | None = None  # native fork of this provider thread...
    fork_at_turn_ref: str | None = None  # ...after this provider turn
    handoff_ids: list[str] = msgspec.field(default_factory=list)
    transfer_ids: list[str] = msgspec.field(default_factory=list)
    delivered: bool = False
