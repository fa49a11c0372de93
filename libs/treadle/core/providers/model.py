"""Provider sessions, provider threads, their settings and declared capabilities."""

from __future__ import annotations

from typing import Literal

import msgspec

from treadle.core.entity import Entity


class ProviderCapabilities(Entity, kw_only=True):
    """What an adapter can do, published when a session starts (docs/requirements.md "Capabilities")."""

    version: int = 1
    create_empty_thread: bool = False
    read_snapshot: bool = False
    rollback: bool = False
    fork: bool = False
    fork_subagent: bool = False  # L6.4: a subagent's own provider thread can be forked natively
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
    orchestrator: bool = False  # issue 21: the session's runtime can call Treadle's MCP tools (with its credential)


class ProviderSession(Entity, kw_only=True):
    id: str
    provider: str
    host_id: str
    boot_id: str
    status: Literal["live", "stopped", "error"] = "live"
    reason: str | None = None
    capabilities: ProviderCapabilities = msgspec.field(default_factory=ProviderCapabilities)


class ProviderThreadSettings(Entity, kw_only=True):
    """What a provider thread was started under (L5.4): a run asking for other settings gets another thread."""

    model: str | None = None  # None: the provider's default
    runtime_mode: str = "approval_required"
    workspace: str = ""


class ProviderThread(Entity, kw_only=True):
    id: str
    provider: str
    native_ref: str
    session_id: str | None = None
    status: Literal["active", "unloaded", "unusable", "divergent"] = "active"  # divergent: files rolled back under it
    covered_ordinals: list[int] = msgspec.field(default_factory=list)
    replaces: str | None = None  # L9.4: built from app context after this provider thread could not resume
    settings: ProviderThreadSettings | None = None  # None: recorded before settings were (taken as compatible)


class ProviderTurn(Entity, kw_only=True):
    id: str
    provider_thread_id: str
    attempt_id: str
    native_ref: str | None = None
