"""Runtime requests: approvals and questions a provider asks while a run waits.

Every runtime's request has one shape. An approval says what will actually run or change: the exact
``command`` and its working directory ``cwd``, or the ``files`` an edit touches with a diff each; ``prompt`` is
Treadle's wording of that action, and ``description`` is the model's own account of it (secondary: a model may
describe ``rm -rf ~`` as "list the files"). A question lists its ``questions``, each option ``{label,
description}``. ``detail`` keeps what only one runtime knows."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from treadle.core.entity import Entity


class FileEdit(msgspec.Struct, kw_only=True):
    """One file an edit approval would change. ``change``: add, update, delete, move (to ``move_to``) or write
    (the file's whole new content, created or replaced)."""

    path: str
    change: str = "update"
    diff: str = ""
    move_to: str | None = None


class QuestionOption(msgspec.Struct, kw_only=True):
    label: str
    description: str = ""


class Question(msgspec.Struct, kw_only=True):
    id: str
    question: str
    header: str = ""
    multi_select: bool = False
    options: list[QuestionOption] = msgspec.field(default_factory=list)
    other: bool = False  # a free answer besides the options
    secret: bool = False


class RuntimeRequest(Entity, kw_only=True):
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
    command_id: str | None = None  # the answer's command (a retried answer gets its receipt again)


MAX_DIFF_CHARS = 64 * 1024  # per file: a request is one event, and an event fits one broker message


def clipped_diff(diff: str, limit: int = MAX_DIFF_CHARS) -> str:
    """``diff`` cut to ``limit`` characters at a line end, saying so (the file's whole change is still applied
    as the runtime has it; only what the approval shows is bounded)."""
    if len(diff) <= limit:
        return diff
    cut = diff.rfind("\n", 0, limit) + 1 or limit
    return diff[:cut] + f"[diff cut: {len(diff) - cut} more characters]\n"


_VERBS = {"add": "Create", "update": "Edit", "delete": "Delete", "write": "Write", "move": "Move"}


def action_prompt(*, command: str | None = None, cwd: str | None = None, files: list[FileEdit] | None = None) -> str:
    """Treadle's wording of what an approval lets happen, from the action itself (never from the model's words)."""
    if command is not None:
        return f"Run `{command}`" + (f" in {cwd}" if cwd else "")
    parts = []
    for f in files or []:
        verb = _VERBS.get(f.change, f.change.capitalize() or "Change")
        parts.append(f"{verb} {f.path}" + (f" to {f.move_to}" if f.move_to else ""))
    return "; ".join(parts)
