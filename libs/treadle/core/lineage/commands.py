"""Forking a thread."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from treadle.api.limits import Id, Model, Name, Role, Task, Title, TurnRef
from treadle.core.thread.events import DEFAULT_PROVIDER


class ForkSource(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """L6.3: a run, a node (root turn or completed subagent) or a provider thread (optionally at a turn)."""

    type: Literal["run", "node", "provider_thread"]
    id: Id
    turn: TurnRef | None = None  # provider_thread only: the native turn ref to fork after


class ForkThread(msgspec.Struct, kw_only=True, tag="thread.fork", forbid_unknown_fields=True):
    """L6.1, sent to the source thread: a new thread with lineage and a pending context transfer."""

    source: ForkSource
    title: Title = ""
    on_active: Literal["latest_checkpoint", "refuse"] = "latest_checkpoint"
    thread_id: Id | None = None  # set by the coordinator from the command id


class DelegateTask(msgspec.Struct, kw_only=True, tag="thread.delegate", forbid_unknown_fields=True):
    """Issue 21, sent to the parent thread: a child thread (lineage ``subagent``) whose first run is ``task``,
    shown as an app-owned node of ``parent_run_id``, which must be the parent's active run."""

    parent_run_id: Name
    task: Task
    role: Role = ""  # the role instruction: the child gets it and the task, nothing of the parent's history
    title: Title = ""
    provider: Name = DEFAULT_PROVIDER
    model: Model | None = None
    runtime_mode: Name | None = None  # None: the parent's; only ever narrower
    interaction_mode: Name | None = None  # default | plan; None: the parent run's; only ever narrower
    mode: Literal["async", "wait"] = "async"
    script: dict[str, Any] | None = None  # the child run's turn options (the scripted provider's script)
