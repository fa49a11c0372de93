"""L11.2/L11.3: answering a live runtime request as two pure steps around one effect.

``decide`` reads the thread and the command (and whether this worker already had the provider take this very
answer) and returns events, a receipt and the effects the worker must carry out: at most one ``DeliverAnswer``
to the host holding the request's session. The worker delivers it, then hands what the host said to
``settle``, which returns the events to record — or the typed refusal. A request whose callback is gone is
``not_resumable``: that is recorded first, then the command is refused (``Refusal``)."""

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
    """``events`` to append; ``delivered``: the provider has the answer (so a retry must not deliver it again);
    ``retry``: the provider failed, nothing decided (the worker retries, as after an unavailable log)."""

    events: list[ev.Payload]
    delivered: bool = False
    refusal: Refusal | None = None
    retry: str | None = None


def _resolved(req_id: str, run_id: str, body: RespondRequest) -> ev.RequestResolved:
    return ev.RequestResolved(request_id=req_id, run_id=run_id, response=requests.response_record(body))


def _gone(req_id: str, run_id: str) -> Refusal:
    return Refusal(
        events=[ev.RequestResolved(request_id=req_id, run_id=run_id, status="not_resumable")],
        error=Conflict(GONE_MESSAGE, code="not_resumable"),
    )


def decide(state: ThreadView, command: Command, *, delivered: bool = False) -> Decision:
    """``delivered``: this worker's provider already took this command's answer, but its record is not stored
    yet (an append conflict came in between): record it without asking again."""
    body = command.body
    assert isinstance(body, RespondRequest) and state.thread is not None
    receipt = Accepted(seq=state.seq, thread_id=state.thread.id, disposition="resolved")
    known = state.request(body.request_id)
    if known is not None and known.command_id == command.id:  # a retry of a recorded answer
        receipt.run_id, receipt.duplicate = known.run_id, True
        if known.status == "not_resumable":
            raise Conflict(GONE_MESSAGE, code="not_resumable")
        return Decision(events=[], receipt=receipt)
    if delivered:
        # The provider has this answer already and may have finished its turn since, closing the request
        # before our record landed: the answer was given, so the record says so.
        assert known is not None
        receipt.run_id = known.run_id
        return Decision(events=[_resolved(known.id, known.run_id, body)], receipt=receipt)
    req = requests.answerable(state, body)
    receipt.run_id = req.run_id
    session = requests.holder(state, req)
    if session is None:
        return Decision(events=[], receipt=receipt, refusal=_gone(req.id, req.run_id))
    deliver = DeliverAnswer(
        host_id=session.host_id,
        session_id=session.id,
        request_id=req.id,
        decision=body.decision,
        answers=body.answers,
        message=body.message,
    )
    return Decision(events=[], receipt=receipt, effects=[deliver])


def settle(state: ThreadView, command: Command, outcome: Delivered) -> Settled:
    """The events (or the refusal) once the host answered the ``DeliverAnswer`` that ``decide`` asked for."""
    body = command.body
    assert isinstance(body, RespondRequest)
    req = state.request(body.request_id)
    assert req is not None
    if outcome.status == "accepted":
        return Settled(events=[_resolved(req.id, req.run_id, body)], delivered=True)
    if outcome.status == "failed":
        return Settled(events=[], retry=f"the provider failed to take the answer: {outcome.message}")
    if outcome.status == "refused":
        # the provider refused the answer's content (e.g. an unknown question id): its callback still waits,
        # so the request stays pending and the user can answer again
        raise BadRequest(outcome.message, code="invalid_response")
    return Settled(events=[], refusal=_gone(req.id, req.run_id))
