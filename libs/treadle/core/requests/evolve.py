"""How runtime requests (approvals and questions) fold into a thread: opened, then resolved (L11)."""

from __future__ import annotations

from treadle.core import activity
from treadle.core.envelope import Envelope
from treadle.core.requests.events import RequestOpened, RequestResolved
from treadle.core.requests.model import RuntimeRequest
from treadle.core.run.model import ExecutionNode
from treadle.core.view import Folds, ThreadView


def _request_opened(state: ThreadView, e: Envelope, d: RequestOpened) -> None:
    state.requests.append(
        RuntimeRequest(
            id=d.request_id,
            run_id=d.run_id,
            node_id=d.node_id,
            kind=d.kind,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
            native_ref=d.native_ref,
            prompt=d.prompt,
            description=d.description,
            command=d.command,
            cwd=d.cwd,
            files=list(d.files),
            questions=list(d.questions),
            detail=d.detail,
            created_at=e.at,
        )
    )
    run = state.run(d.run_id)
    if run is not None:
        run.nodes.append(
            ExecutionNode(
                id=d.node_id,
                run_id=d.run_id,
                attempt_id=d.attempt_id,
                kind="user_input" if d.kind == "user_input" else "approval",
                parent_id=d.parent_id or run.attempt.root_node_id,
                status="waiting",
                title=d.prompt,
                started_at=e.at,
            )
        )
        if not run.terminal:
            run.status = "waiting"
    activity.record(state, e, "request.opened", d.run_id, d.node_id, d.prompt)


def _request_resolved(state: ThreadView, e: Envelope, d: RequestResolved) -> None:
    """Resolved (answered), cancelled or not_resumable; or ``pending`` again: the answer recorded before its
    delivery was refused by the provider, whose callback still waits (``answers``)."""
    req = state.request(d.request_id)
    if req is None:
        return
    reopened = d.status == "pending"
    req.status = d.status  # type: ignore[assignment]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
    req.response = d.response
    req.command_id = e.command_id  # reopened: the refused answer's command, refused again if retried
    run = state.run(d.run_id)
    if run is not None:
        node = run.node(req.node_id)
        if node is not None:
            node.status = "waiting" if reopened else "completed" if d.status == "resolved" else "cancelled"
            node.ended_at = None if reopened else e.at
        if reopened and run.status == "running":
            run.status = "waiting"
        if run.status == "waiting" and not any(r.status == "pending" and r.run_id == run.id for r in state.requests):
            run.status = "running"
    activity.record(state, e, "request.resolved", d.run_id, req.node_id, "reopened" if reopened else d.status)


FOLDS: Folds = {RequestOpened: _request_opened, RequestResolved: _request_resolved}
