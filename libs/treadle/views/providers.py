"""Views of a thread's provider side: sessions, provider threads and what the live provider can do."""

from __future__ import annotations

from typing import Literal

import msgspec

from . import View


class ProviderCapabilities(View, kw_only=True):
    """What an adapter can do, published when a session starts (docs/requirements.md "Capabilities")."""

    version: int = 1
    create_empty_thread: bool = False
    read_snapshot: bool = False
    rollback: bool = False
    fork: bool = False
    fork_subagent: bool = False
    native_turn_ids: bool = True
    interrupt: bool = True
    active_steering: bool = False
    terminal_status: Literal["strong", "weak", "none"] = "strong"
    streaming: bool = True
    approvals: list[str] = msgspec.field(default_factory=list)
    approvals_live_only: bool = True
    structured_questions: bool = False
    plan_updates: bool = False
    todo_list: bool = False
    proposed_plan: bool = False
    subagents: bool = False
    max_handoff_chars: int = 100_000
    identity: Literal["strong", "weak", "none"] = "strong"
    orchestrator: bool = False  # issue 21: the session's runtime can call Treadle's MCP tools


class ProviderSession(View, kw_only=True):
    id: str
    provider: str
    host_id: str
    boot_id: str
    status: Literal["live", "stopped", "error"] = "live"
    reason: str | None = None
    capabilities: ProviderCapabilities = msgspec.field(default_factory=ProviderCapabilities)


class ProviderThreadSettings(View, kw_only=True):
    """What a provider thread was started under (L5.4)."""

    model: str | None = None
    runtime_mode: str = "approval_required"
    workspace: str = ""


class ProviderThread(View, kw_only=True):
    id: str
    provider: str
    native_ref: str
    session_id: str | None = None
    status: Literal["active", "unloaded", "unusable", "divergent"] = "active"
    covered_ordinals: list[int] = msgspec.field(default_factory=list)
    replaces: str | None = None
    settings: ProviderThreadSettings | None = None


class CapabilityView(View, kw_only=True):
    """What a client can do with the thread's live provider, as typed results."""

    interrupt: Literal["available", "destructive", "unavailable"]
    steering: Literal["native", "restart", "queue_only"]
    approvals: Literal["structured", "none"]
    questions: Literal["structured", "text_only"]
    plans: Literal["available", "unavailable"]
    terminal_status: Literal["strong", "weak", "none"]
    rollback: Literal["native", "fresh_thread"] = "fresh_thread"
    fork: Literal["native", "portable"] = "portable"
    subagent_fork: Literal["native", "synthetic", "unavailable"] = "unavailable"
    orchestrator: Literal["mcp", "none"] = "none"  # issue 21: the agent can call Treadle's MCP tools
