"""Typed tool failures: the API's error (its code, message and details) plus a coarse ``kind`` an agent can branch
on without knowing every code, sent as the JSON text of an ``is_error`` result."""

from __future__ import annotations

import msgspec
from mcp.server.mcpserver.exceptions import ToolError

from ..errors import ApiError

KINDS = (
    "not_found",
    "invalid_request",
    "unauthorized",
    "mode_escalation_denied",
    "capability_denied",
    "parent_not_active",
    "not_sendable",
    "not_interruptible",
    "conflict",
    "quota_exceeded",
    "unavailable",
    "internal",
)

# Codes only the tools answer (no HTTP route makes a delegated task); ``schemas/mcp-tools.json`` lists them.
CODES = {
    "parent_not_active": "delegate_task: the parent thread has no active run (or not that one) to delegate from",
    "task_not_found": "task_status, task_cancel: the thread is not a delegated task",
    "invalid_interaction_mode": "delegate_task: interaction_mode is not default or plan",
}


def kind_of(tool: str, exc: ApiError) -> str:
    if exc.code in ("idempotency_key_reused", "invalid_idempotency_key"):
        return "invalid_request"
    if exc.code == "parent_not_active":
        return "parent_not_active"
    if exc.status == 404:
        return "not_found"
    if exc.status == 401:
        return "unauthorized"
    if exc.status == 403:
        return "mode_escalation_denied" if exc.code == "mode_not_allowed" else "capability_denied"
    if exc.status == 429:
        return "quota_exceeded"
    if exc.status == 503:
        return "unavailable"
    if exc.status >= 500:
        return "internal"
    if exc.status in (409, 422) and tool in ("thread_interrupt", "task_cancel"):
        return "not_interruptible"
    if exc.status in (409, 422) and tool in ("thread_send", "thread_start"):
        return "not_sendable"
    if exc.status == 409:
        return "conflict"
    return "invalid_request"


def tool_error(tool: str, exc: ApiError) -> ToolError:
    error = {"code": exc.code, "kind": kind_of(tool, exc), "message": exc.message, "details": exc.details}
    return ToolError(msgspec.json.encode({"error": error}).decode())


def invalid(tool: str, message: str, **details: object) -> ToolError:
    return tool_error(tool, ApiError(400, "bad_request", message, dict(details)))
