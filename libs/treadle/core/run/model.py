"""Runs, their attempts and execution nodes, and the progress a todo list gives a run."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from treadle.core.entity import Entity
from treadle.core.thread.model import DispatchMode

RunStatus = Literal[
    "queued", "starting", "running", "waiting", "completed", "interrupted", "failed", "cancelled", "rolled_back"
]


TERMINAL_RUN_STATUSES: frozenset[str] = frozenset({"completed", "interrupted", "failed", "cancelled", "rolled_back"})


AttemptStatus = Literal["pending", "running", "completed", "interrupted", "failed", "lost", "cancelled"]


NodeKind = Literal["root_turn", "tool", "approval", "user_input", "subagent", "reasoning"]  # reasoning: the model's own


NodeStatus = Literal["pending", "running", "waiting", "completed", "failed", "interrupted", "cancelled"]


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
    script: dict[str, Any] | None = None
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
    input: dict[str, Any] | None = None
    output: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    native_thread_ref: str | None = None  # L6.4: a subagent's own provider thread
    owner: Literal["provider", "app"] = "provider"  # app: a delegated task (its child thread), not the runtime's
    child_thread_id: str | None = None  # an app-owned subagent's thread


class Run(Entity, kw_only=True):
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


def script_bytes(script: dict[str, Any] | None) -> int:
    """A run script's size as the thread-text quota counts it: its JSON."""
    return len(msgspec.json.encode(script)) if script is not None else 0
