"""Views of what happens inside a run besides its messages: runtime requests, plans and the activity feed."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from . import View


class RuntimeRequest(View, kw_only=True):
    """An approval or a question (L11) and its answer."""

    id: str
    run_id: str
    node_id: str
    kind: Literal["command", "file_change", "file_read", "patch", "user_input"]
    status: Literal["pending", "resolved", "not_resumable", "cancelled"] = "pending"
    native_ref: str | None = None
    prompt: str = ""
    detail: dict[str, Any] | None = None
    response: dict[str, Any] | None = None
    created_at: datetime


class TodoItem(View, kw_only=True):
    text: str
    status: Literal["pending", "in_progress", "completed"] = "pending"


class Plan(View, kw_only=True):
    """A proposed plan (durable) or a run's live todo list (L12.1)."""

    id: str
    run_id: str
    node_id: str | None = None
    kind: Literal["proposed_plan", "todo_list"]
    text: str = ""
    items: list[TodoItem] = msgspec.field(default_factory=list)
    status: Literal["open", "final", "accepted", "implemented"] = "open"
    root: bool = False  # the run's own list, which drives the run's progress (L12.2)
    implemented_by: str | None = None  # the run or thread that implements a proposed plan (L12.3)


class Activity(View, kw_only=True):
    """One line of the activity feed (L12.4): always carries its run and node."""

    at: datetime
    kind: str
    run_id: str
    node_id: str | None = None
    summary: str = ""
