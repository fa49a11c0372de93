"""L11: answering a live runtime request (approval or structured question)."""

from __future__ import annotations

from typing import Any

from treadle.core.errors import BadRequest, Conflict, NotFound, check
from treadle.core.providers.model import ProviderSession
from treadle.core.requests.commands import RespondRequest
from treadle.core.requests.model import RuntimeRequest
from treadle.core.view import ThreadView

DECISIONS = ("accept", "accept_for_session", "decline", "cancel")


def answerable(state: ThreadView, body: RespondRequest) -> RuntimeRequest:
    """The pending request ``body`` answers, with the answer's shape checked against the request's kind."""
    req = state.request(body.request_id)
    if req is None:
        raise NotFound(f"request {body.request_id} not found", code="request_not_found")
    if req.status == "not_resumable":
        raise Conflict("the provider callback for this request is gone", code="not_resumable")
    check(
        req.status == "pending",
        Conflict,
        f"request {req.id} is {req.status}",
        code="request_not_pending",
        details={"status": req.status},
    )
    if req.kind == "user_input":
        check(
            body.decision in (None, "cancel"),
            BadRequest,
            "a question takes answers (or decision=cancel)",
            code="invalid_response",
        )
        check(
            body.decision == "cancel" or bool(body.answers) or bool(body.message),
            BadRequest,
            "a question needs answers or a message",
            code="invalid_response",
        )
    elif body.answers is not None and offered_options(req):
        _check_option(req, body)
    else:
        check(
            body.decision in DECISIONS,
            BadRequest,
            f"an approval needs decision: one of {', '.join(DECISIONS)}",
            code="invalid_response",
        )
        check(body.answers is None, BadRequest, "an approval takes a decision, not answers", code="invalid_response")
    return req


def offered_options(req: RuntimeRequest) -> list[str]:
    """The ids of the options an approval offers (an ACP agent's own), in ``detail.options``."""
    options = (req.detail or {}).get("options")
    if not isinstance(options, list):
        return []
    return [str(o["id"]) for o in options if isinstance(o, dict) and o.get("id") is not None]


def _check_option(req: RuntimeRequest, body: RespondRequest) -> None:
    """An approval that offers options is answered ``answers={"option": <id>}`` (a decision may ride along):
    the id must be one the request offered."""
    offered = offered_options(req)
    check(
        set(body.answers or {}) == {"option"},
        BadRequest,
        'an approval takes a decision, or answers {"option": <id>} naming one of its options',
        code="invalid_response",
        details={"field": "answers", "options": offered},
    )
    check(
        body.decision is None or body.decision in DECISIONS,
        BadRequest,
        f"an approval's decision is one of {', '.join(DECISIONS)}",
        code="invalid_response",
    )
    chosen = (body.answers or {})["option"]
    check(
        chosen in offered,
        BadRequest,
        f"no such option: {chosen!r} (offered: {', '.join(offered)})",
        code="invalid_response",
        details={"field": "answers.option", "options": offered},
    )


def holder(state: ThreadView, req: RuntimeRequest) -> ProviderSession | None:
    """The live session whose callback waits for ``req``; None when that session is gone."""
    run = state.run(req.run_id)
    node = run.node(req.node_id) if run else None
    attempt = next((a for a in run.attempts if node and a.id == node.attempt_id), None) if run else None
    session = state.session(attempt.session_id or "") if attempt else None
    return session if session is not None and session.status == "live" else None


def response_record(body: RespondRequest) -> dict[str, Any]:
    """What the thread records of the answer."""
    out: dict[str, Any] = {}
    if body.decision is not None:
        out["decision"] = body.decision
    if body.answers:
        out["answers"] = dict(body.answers)
    if body.message:
        out["message"] = body.message
    return out
