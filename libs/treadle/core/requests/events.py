"""Events of runtime requests (approvals, questions)."""

from __future__ import annotations

from typing import Any

from treadle.core.envelope import Payload, event


@event("request.opened")
class RequestOpened(Payload, kw_only=True):
    request_id: str
    run_id: str
    node_id: str
    attempt_id: str
    parent_id: str | None = None  # the node that asked (a subagent's requests nest under it)
    kind: str
    native_ref: str | None = None
    prompt: str = ""
    detail: dict[str, Any] | None = None


@event("request.resolved")
class RequestResolved(Payload, kw_only=True):
    request_id: str
    run_id: str
    status: str = "resolved"
    response: dict[str, Any] | None = None
