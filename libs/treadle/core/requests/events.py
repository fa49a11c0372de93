"""Events of runtime requests (approvals, questions)."""

from __future__ import annotations

from typing import Any

from treadle.core.envelope import Payload, event
from treadle.core.requests.model import FileEdit, Question


@event("request.opened", local=True, other_runs=False, provider_threads=False, indexes=("request_id", "node_id"))
class RequestOpened(Payload, kw_only=True):
    request_id: str
    run_id: str
    node_id: str
    attempt_id: str
    parent_id: str | None = None  # the node that asked (a subagent's requests nest under it)
    kind: str
    native_ref: str | None = None
    prompt: str = ""  # the action in Treadle's words (model.action_prompt); a question's questions
    detail: dict[str, Any] | None = None
    description: str | None = None  # the model's own words about the action
    command: str | None = None
    cwd: str | None = None
    files: list[FileEdit] = []
    questions: list[Question] = []


@event("request.resolved", local=True, other_runs=False, provider_threads=False)
class RequestResolved(Payload, kw_only=True):
    request_id: str
    run_id: str
    status: str = "resolved"
    response: dict[str, Any] | None = None
