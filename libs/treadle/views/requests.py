"""Views of what happens inside a run besides its messages: runtime requests, plans and the activity feed."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from . import View


class FileEdit(View, kw_only=True):
    """A file an edit approval would change, with its diff. ``change``: add, update, delete, move (to
    ``move_to``) or write (the whole new content, created or replaced)."""

    path: str
    change: str = "update"
    diff: str = ""
    move_to: str | None = None


class QuestionOption(View, kw_only=True):
    label: str
    description: str = ""


class Question(View, kw_only=True):
    id: str
    question: str
    header: str = ""
    multi_select: bool = False
    options: list[QuestionOption] = msgspec.field(default_factory=list)
    other: bool = False
    secret: bool = False


class RuntimeRequest(View, kw_only=True):
    """An approval or a question (L11) and its answer, in one shape on every runtime. An approval shows what
    will actually run or change: ``command`` and ``cwd``, or ``files`` with their diffs; ``prompt`` words that
    action, and ``description`` is the model's own account of it (secondary: never the action itself)."""

    id: str
    run_id: str
    node_id: str
    kind: Literal["command", "file_change", "file_read", "patch", "user_input"]
    status: Literal["pending", "resolved", "not_resumable", "cancelled"] = "pending"
    native_ref: str | None = None
    prompt: str = ""
    description: str | None = None
    command: str | None = None
    cwd: str | None = None
    files: list[FileEdit] = msgspec.field(default_factory=list)
    questions: list[Question] = msgspec.field(default_factory=list)
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
