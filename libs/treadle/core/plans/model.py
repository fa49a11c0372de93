"""Plans and todo lists."""

from __future__ import annotations

from typing import Literal

import msgspec

from treadle.core.entity import Entity


class TodoItem(Entity, kw_only=True):
    text: str
    status: Literal["pending", "in_progress", "completed"] = "pending"


PlanKind = Literal["proposed_plan", "todo_list"]


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
