"""Views of runs: a run with its attempts and execution nodes, a user or assistant message, the queue."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from . import View

RunStatus = Literal[
    "queued", "starting", "running", "waiting", "completed", "interrupted", "failed", "cancelled", "rolled_back"
]
DispatchMode = Literal[
    "auto", "start_immediately", "queue_after_active", "steer_active", "restart_active", "reject", "rollback_active"
]


class Message(View, kw_only=True):
    id: str
    role: Literal["user", "assistant", "system"]
    text: str = ""
    status: Literal["streaming", "completed", "incomplete"] = "completed"
    run_id: str | None = None
    attempt_id: str | None = None
    node_id: str | None = None
    author: str | None = None
    created_at: datetime
    steering: Literal["native", "restart"] | None = None  # a steering message (L3.2/L3.3) as asked
    delivered: bool = True  # a steer: whether the provider has it
    script: dict[str, Any] | None = None  # a steering message's script for the scripted provider


class Attempt(View, kw_only=True):
    id: str
    run_id: str
    number: int
    reason: Literal["initial", "steering_restart", "provider_recovery", "retry"] = "initial"
    status: Literal["pending", "running", "completed", "interrupted", "failed", "lost", "cancelled"] = "pending"
    root_node_id: str
    provider_thread_id: str | None = None
    session_id: str | None = None
    message_ids: list[str] = msgspec.field(default_factory=list)  # its input when not the run's own message
    script: dict[str, Any] | None = None
    interrupt: Literal["requested", "native", "stop_session"] | None = None  # L8: asked, then how it was sent
    interrupt_reason: Literal["user", "steering", "preempted", "rollback"] | None = None
    turn_id: str | None = None
    native_turn_ref: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


class ExecutionNode(View, kw_only=True):
    id: str
    run_id: str
    attempt_id: str
    kind: Literal["root_turn", "tool", "approval", "user_input", "subagent", "reasoning"]
    parent_id: str | None = None
    counts_for_run: bool = False
    status: Literal["pending", "running", "waiting", "completed", "failed", "interrupted", "cancelled"] = "pending"
    title: str = ""
    input: dict[str, Any] | None = None
    output: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    native_thread_ref: str | None = None  # L6.4: a subagent's own provider thread
    owner: Literal["provider", "app"] = "provider"  # app: a delegated task (its child thread), not the runtime's
    child_thread_id: str | None = None  # an app-owned subagent's thread


class Progress(View, kw_only=True):
    done: int = 0
    total: int = 0


class Run(View, kw_only=True):
    id: str
    ordinal: int
    status: RunStatus = "queued"
    message_id: str
    mode: DispatchMode = "auto"
    disposition: str = "started"
    provider: str
    model: str | None = None
    script: dict[str, Any] | None = None
    attempts: list[Attempt] = msgspec.field(default_factory=list)
    nodes: list[ExecutionNode] = msgspec.field(default_factory=list)
    checkpoint_id: str | None = None
    error: str | None = None
    supersedes_run_id: str | None = None  # L3.4
    superseded_by: str | None = None
    progress: Progress | None = None  # from the root todo list (L12.2)
    handoff_ids: list[str] = msgspec.field(default_factory=list)  # L5.5: the context handoffs it consumed
    clean_context: bool = False  # L5.4
    waiting_reason: str | None = None  # L9.3: why a dispatched run is back in ``queued``
    queued_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None


class QueuedRun(View, kw_only=True):
    run_id: str
    ordinal: int
    message_id: str
    text: str
    mode: str
    queued_at: str


class QueueView(View, kw_only=True):
    """Runs waiting behind the active one, in the order they will start (L3.6)."""

    thread_id: str
    active_run_id: str | None
    queue: list[QueuedRun]
