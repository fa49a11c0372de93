"""Runtime requests: approvals and questions a provider asks while a run waits."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from treadle.core.entity import Entity


class RuntimeRequest(Entity, kw_only=True):
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
    command_id: str | None = None  # the answer's command (a retried answer gets its receipt again)
