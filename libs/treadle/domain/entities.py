"""The nouns of LIFECYCLES.md as msgspec Structs.

Entities are the folded state of a thread and are mutated only by :func:`treadle.domain.thread.evolve`
(in place, for speed: a thread fold runs on every event in three workers). Everything else treats them
as read-only values.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

RunStatus = Literal[
    "queued", "starting", "running", "waiting", "completed", "interrupted", "failed", "cancelled", "rolled_back"
]
TERMINAL_RUN_STATUSES: frozenset[str] = frozenset({"completed", "interrupted", "failed", "cancelled", "rolled_back"})
AttemptStatus = Literal["pending", "running", "completed", "interrupted", "failed", "lost", "cancelled"]
NodeKind = Literal["root_turn", "tool", "approval", "user_input", "subagent"]
NodeStatus = Literal["pending", "running", "waiting", "completed", "failed", "interrupted", "cancelled"]
MessageStatus = Literal["streaming", "completed", "incomplete"]
RuntimeMode = Literal["approval_required", "auto_accept_edits", "full_access"]
DispatchMode = Literal[
    "auto", "start_immediately", "queue_after_active", "steer_active", "restart_active", "reject", "rollback_active"
]


class Entity(msgspec.Struct, kw_only=True):
    pass


class Thread(Entity, kw_only=True):
    id: str
    tenant: str
    title: str = ""
    provider: str = "scripted"
    model: str | None = None
    runtime_mode: RuntimeMode = "approval_required"
    workspace: str
    created_by: str
    created_at: datetime
    command_id: str
    parent_thread_id: str | None = None


class Message(Entity, kw_only=True):
    id: str
    role: Literal["user", "assistant", "system"]
    text: str = ""
    status: MessageStatus = "completed"
    run_id: str | None = None
    attempt_id: str | None = None
    node_id: str | None = None
    author: str | None = None
    created_at: datetime
    command_id: str | None = None
    # A steering message (L3.2/L3.3): "native" or "restart" as asked; undelivered until the provider has it.
    steering: Literal["native", "restart"] | None = None
    delivered: bool = True
    script: dict | None = None  # a steering message's script for the scripted provider


class Attempt(Entity, kw_only=True):
    id: str
    run_id: str
    number: int
    reason: Literal["initial", "steering_restart", "provider_recovery", "retry"] = "initial"
    status: AttemptStatus = "pending"
    root_node_id: str
    provider_thread_id: str | None = None
    session_id: str | None = None
    provider_index: int = 0  # the last provider event of this attempt's play folded in (see supervision.react)
    message_ids: list[str] = msgspec.field(default_factory=list)  # its input when not the run's own message
    script: dict | None = None
    interrupt: Literal["requested", "native", "stop_session"] | None = None  # L8: asked, then how it was sent
    interrupt_reason: Literal["user", "steering", "preempted", "rollback"] | None = None
    turn_id: str | None = None
    native_turn_ref: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


class ExecutionNode(Entity, kw_only=True):
    id: str
    run_id: str
    attempt_id: str
    kind: NodeKind
    parent_id: str | None = None
    counts_for_run: bool = False
    status: NodeStatus = "pending"
    title: str = ""
    input: dict | None = None
    output: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    native_thread_ref: str | None = None  # L6.4: a subagent's own provider thread


class Run(Entity, kw_only=True):
    id: str
    ordinal: int
    status: RunStatus = "queued"
    message_id: str
    mode: DispatchMode = "auto"
    disposition: str = "started"
    provider: str
    model: str | None = None
    script: dict | None = None
    attempts: list[Attempt] = msgspec.field(default_factory=list)
    nodes: list[ExecutionNode] = msgspec.field(default_factory=list)
    checkpoint_id: str | None = None
    error: str | None = None
    supersedes_run_id: str | None = None  # L3.4: a steer that arrived after this run's predecessor had answered
    superseded_by: str | None = None
    progress: Progress | None = None  # from the root todo list (L12.2)
    handoff_ids: list[str] = msgspec.field(default_factory=list)  # L5.5: the context handoffs it consumed
    clean_context: bool = False  # L5.4: the user asked for a fresh provider thread with a full summary
    waiting_reason: str | None = None  # L9.3: why a dispatched run is back in ``queued`` (capacity, tenant_quota)
    queued_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def attempt(self) -> Attempt:
        return self.attempts[-1]

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_RUN_STATUSES

    def node(self, node_id: str) -> ExecutionNode | None:
        for n in reversed(self.nodes):
            if n.id == node_id:
                return n
        return None


class Progress(Entity, kw_only=True):
    done: int = 0
    total: int = 0


class ProviderCapabilities(Entity, kw_only=True):
    """What an adapter can do, published when a session starts (LIFECYCLES "Capabilities")."""

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


class RuntimeRequest(Entity, kw_only=True):
    id: str
    run_id: str
    node_id: str
    kind: Literal["command", "file_change", "file_read", "patch", "user_input"]
    status: Literal["pending", "resolved", "not_resumable", "cancelled"] = "pending"
    native_ref: str | None = None
    prompt: str = ""
    detail: dict | None = None
    response: dict | None = None
    created_at: datetime
    command_id: str | None = None  # the answer's command (a retried answer gets its receipt again)


class TodoItem(Entity, kw_only=True):
    text: str
    status: Literal["pending", "in_progress", "completed"] = "pending"


class Plan(Entity, kw_only=True):
    """A proposed plan (durable) or a run's live todo list (L12.1)."""

    id: str
    run_id: str
    node_id: str | None = None
    kind: Literal["proposed_plan", "todo_list"]
    text: str = ""
    items: list[TodoItem] = msgspec.field(default_factory=list)
    status: Literal["open", "final", "accepted", "implemented"] = "open"
    root: bool = False  # the run's own list (its root turn's), which drives the run's progress (L12.2)
    implemented_by: str | None = None  # the run or thread that implements a proposed plan (L12.3)


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


class ContextTransfer(Entity, kw_only=True):
    """Context crossing a thread boundary (L6 fork, L7 merge-back), resolved lazily by the first run that needs
    it. ``source_point``/``base_point``: ``{"thread_id", "ordinal", "run_id"?, "node_id"?, "checkpoint_id"?}``."""

    id: str
    type: Literal["fork", "merge_back"]
    status: Literal["pending", "resolved_native", "resolved_portable", "consumed", "failed"] = "pending"
    source_thread_id: str
    source_point: dict = msgspec.field(default_factory=dict)
    base_point: dict | None = None
    fidelity: Literal["native", "portable", "synthetic"] | None = None  # L6.4: synthetic forks are lower fidelity
    run_id: str | None = None  # the run that resolved (and consumed) it
    handoff_id: str | None = None
    error: str | None = None
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
    relationship: Literal["fork"] | None = None
    source_point: dict | None = None
    children: list[dict] = msgspec.field(default_factory=list)  # {thread_id, transfer_id, source_point}


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


class Activity(Entity, kw_only=True):
    """One line of the activity feed (L12.4): always carries its run and node."""

    at: datetime
    kind: str
    run_id: str
    node_id: str | None = None
    summary: str = ""


class ChildCheckpoint(Entity, kw_only=True):
    """What a root checkpoint says about a child scope of its run (L10.3)."""

    checkpoint_id: str
    node_id: str | None = None
    scope: str
    status: str
    files: int = 0


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
