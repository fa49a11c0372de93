"""L11.2/L11.3: answering a live runtime request as two pure steps around one effect.

The answer is recorded before it is delivered: a provider that takes it and ends its turn at once closes the
requests still pending (as ``cancelled``), and an answer recorded after that would show the user's answered
question as cancelled in the feed and the node tree. So ``decide`` returns the record (``request.resolved``) and
the ``DeliverAnswer`` effect the worker carries out once the record is stored; ``settle`` says what the host's
reply means for the command and ``after`` what is recorded after it: nothing when it took the answer,
``not_resumable`` when nobody holds the callback any more (then the command is refused), the request pending
again when the provider refused the answer's content (its callback still waits: the user may answer again).
A provider that failed to take it leaves the record standing: the command's retry delivers it again.

"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import msgspec

from treadle.core import events as ev
from treadle.core.commands import Accepted, Command, RespondRequest
from treadle.core.errors import BadRequest, Conflict, DomainError
from treadle.core.requests import decide as requests
from treadle.core.view import ThreadView

GONE_MESSAGE = "the provider callback for this request is gone"
REFUSED_MESSAGE = "the provider refused this answer; the request waits for another"


class DeliverAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """Effect: hand the answer to the live callback of ``request_id`` in ``session_id`` on ``host_id``."""

    host_id: str
    session_id: str
    request_id: str
    decision: str | None = None
    answers: dict[str, str] | None = None
    message: str | None = None


class Delivered(msgspec.Struct, frozen=True, kw_only=True):
    """What became of a ``DeliverAnswer``. ``accepted``: the callback took it. ``refused``: the provider refused
    its content (the callback still waits). ``failed``: the provider failed to take it (a retry may help).
    ``gone``: nobody holds the callback any more (the host is unreachable, or does not know the session)."""

    status: Literal["accepted", "refused", "failed", "gone"]
    message: str = ""


@dataclass
class Refusal:
    """Record ``events`` (as the coordinator, not as the user), then refuse the command with ``error``."""

    events: list[ev.Payload]
    error: DomainError
    actor: str = "coordinator"


@dataclass
class Decision:
    events: list[ev.Payload]
    receipt: Accepted
    effects: list[DeliverAnswer] = field(default_factory=list)
    refusal: Refusal | None = None


@dataclass
class Settled:
    """What the host's reply to a recorded answer means for the command: ``error``, its refusal (after ``after``'s
    events are recorded); ``retry``: the provider failed to take it, asking again may help."""

    error: DomainError | None = None
    retry: str | None = None


def _resolved(req_id: str, run_id: str, body: RespondRequest) -> ev.RequestResolved:
    return ev.RequestResolved(request_id=req_id, run_id=run_id, response=requests.response_record(body))


def _gone(req_id: str, run_id: str) -> Refusal:
    return Refusal(
        events=[ev.RequestResolved(request_id=req_id, run_id=run_id, status="not_resumable")],
        error=Conflict(GONE_MESSAGE, code="not_resumable"),
    )


def _delivery(host_id: str, session_id: str, req_id: str, body: RespondRequest) -> DeliverAnswer:
    return DeliverAnswer(
        host_id=host_id,
        session_id=session_id,
        request_id=req_id,
        decision=body.decision,
        answers=body.answers,
        message=body.message,
    )


def decide(state: ThreadView, command: Command) -> Decision:
    """The record of a new answer and its delivery. A retry of a recorded answer records nothing and delivers it
    again while the session that asked is live (the first worker may have stopped between the record and the
    delivery): the host takes the same answer twice as once, so the provider never gets it twice."""
    body = command.body
    assert isinstance(body, RespondRequest) and state.thread is not None
    receipt = Accepted(seq=state.seq, thread_id=state.thread.id, disposition="resolved")
    known = state.request(body.request_id)
    if known is not None and known.command_id == command.id:  # a retry of a recorded answer
        receipt.run_id, receipt.duplicate = known.run_id, True
        if known.status == "not_resumable":
            raise Conflict(GONE_MESSAGE, code="not_resumable")
        if known.status == "pending":  # this very answer was refused by the provider, and the request reopened
            raise BadRequest(REFUSED_MESSAGE, code="invalid_response")
        session = requests.holder(state, known) if known.status == "resolved" else None
        effects = [] if session is None else [_delivery(session.host_id, session.id, known.id, body)]
        return Decision(events=[], receipt=receipt, effects=effects)
    req = requests.answerable(state, body)
    receipt.run_id = req.run_id
    session = requests.holder(state, req)
    if session is None:
        return Decision(events=[], receipt=receipt, refusal=_gone(req.id, req.run_id))
    deliver = _delivery(session.host_id, session.id, req.id, body)
    return Decision(events=[_resolved(req.id, req.run_id, body)], receipt=receipt, effects=[deliver])


def settle(outcome: Delivered, *, again: bool) -> Settled:
    """What the host's reply to the delivery of a recorded answer means; ``again``: a retried command's."""
    if outcome.status == "failed":
        return Settled(retry=f"the provider failed to take the answer: {outcome.message}")
    if outcome.status == "refused":  # its content (e.g. an unknown question id): the callback still waits
        return Settled(error=BadRequest(outcome.message, code="invalid_response"))
    if outcome.status == "gone" and not again:  # a retry's session ending after the first delivery is no news
        return Settled(error=Conflict(GONE_MESSAGE, code="not_resumable"))
    return Settled()


def after(state: ThreadView, command: Command, outcome: Delivered, *, again: bool) -> list[ev.Payload]:
    """The events recorded after a delivery that did not land, on the thread as it is now: the request pending
    again when the provider refused the answer (the user may answer again; this command, retried, is refused
    the same way), and ``not_resumable`` when nobody holds its callback. A provider that failed to take the
    answer leaves the record as it is: the command's retry delivers it again. Nothing once the record is no
    longer this command's."""
    body = command.body
    assert isinstance(body, RespondRequest)
    req = state.request(body.request_id)
    if req is None or req.status != "resolved" or req.command_id != command.id:
        return []
    if outcome.status == "refused":
        return [ev.RequestResolved(request_id=req.id, run_id=req.run_id, status="pending")]
    if outcome.status == "gone" and not again:
        return _gone(req.id, req.run_id).events
    return []
