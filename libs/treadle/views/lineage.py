"""Views of lineage (L6/L7) and context handoffs (L5.5): where a thread sits in its tree, the context that
crossed into it, and the handoff texts its runs consumed."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from . import View


class ContextTransfer(View, kw_only=True):
    """Context crossing a thread boundary (L6 fork, L7 merge-back), resolved by the first run that needs it.
    ``source_point``/``base_point``: ``{"thread_id", "ordinal", "run_id"?, "node_id"?, "checkpoint_id"?}``."""

    id: str
    type: Literal["fork", "merge_back", "delegation_result"]
    status: Literal["pending", "resolved_native", "resolved_portable", "consumed", "failed"] = "pending"
    source_thread_id: str
    source_point: dict[str, Any] = msgspec.field(default_factory=dict)
    base_point: dict[str, Any] | None = None
    fidelity: Literal["native", "portable", "synthetic"] | None = None
    run_id: str | None = None
    handoff_id: str | None = None
    error: str | None = None
    summary: str | None = None  # a delegation result: the child's last assistant text, else its status
    created_at: datetime | None = None


class ContextHandoff(View, kw_only=True):
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
    summariser: str = "local"  # "local" (deterministic) or "provider:<name>"
    version: int = 1
    fallback: str | None = None  # why a configured provider-backed summariser was not used
    delivered: bool = False
    created_at: datetime | None = None


class Lineage(View, kw_only=True):
    """Where a thread sits in its tree (L6.1): its parent and root, and the threads forked from it."""

    parent_thread_id: str | None = None
    root_thread_id: str | None = None
    relationship: Literal["fork", "subagent"] | None = None
    source_point: dict[str, Any] | None = None
    # a delegated task's thread: {parent_run_id, parent_node_id, depth, mode, role, ended?}
    delegation: dict[str, Any] | None = None
    children: list[dict[str, Any]] = msgspec.field(default_factory=list)  # {thread_id, transfer_id, source_point}


class StartContext(View, kw_only=True):
    """How a run's provider context was resolved (L5.2, L6.2): which provider thread, and what came with it."""

    run_id: str
    provider: str
    provider_thread_id: str
    fresh: bool
    fork_native_ref: str | None = None
    fork_at_turn_ref: str | None = None
    handoff_ids: list[str] = msgspec.field(default_factory=list)
    transfer_ids: list[str] = msgspec.field(default_factory=list)
    delivered: bool = False


class HandoffView(ContextHandoff, kw_only=True):
    """A handoff as ``/v1/handoffs/{id}`` serves it: with its thread and the ordinal of the run that consumed it."""

    thread_id: str
    run_ordinal: int | None = None


class HandoffRef(View, kw_only=True):
    """A handoff named in a lineage node (its text is at ``/v1/handoffs/{id}``)."""

    id: str
    run_id: str
    strategy: str
    to_provider: str


class LineageNode(View, kw_only=True):
    thread_id: str
    title: str
    provider: str
    relationship: str | None = None
    source_point: dict[str, Any] | None = None
    runs: int
    transfers: list[ContextTransfer]
    handoffs: list[HandoffRef]
    children: list[LineageNode]


class LineageView(View, kw_only=True):
    """A thread's lineage tree, from its root (L6)."""

    thread_id: str
    root_thread_id: str
    tree: LineageNode
