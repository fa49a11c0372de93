"""L11.2/L11.3 without I/O: answering a runtime request is decided (``answers.decide``: events and the
``DeliverAnswer`` effect), the worker delivers it, and the host's reply is settled (``answers.settle``: the
events, or the typed refusal). A callback that is gone is recorded ``not_resumable``, then refused."""

from __future__ import annotations

import pytest

from tests.unit.domain_helpers import apply, command
from treadle.core import events as ev
from treadle.core.errors import BadRequest, Conflict, NotFound
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.requests import answers
from treadle.core.requests.commands import RespondRequest
from treadle.core.state import ThreadState


def waiting(*more) -> ThreadState:
    """A thread whose run r1 plays on session ps_1 (host h1) and waits on approval q1 (and question q2)."""
    return apply(
        ThreadState(),
        [
            ev.ThreadCreated(thread_id="th", workspace="threads/th", created_by="alice"),
            ev.RunQueued(
                run_id="r1",
                ordinal=1,
                message_id="m1",
                text="go",
                root_node_id="n1",
                attempt_id="a1",
                mode="auto",
                disposition="started",
                dispatched=True,
                provider="scripted",
            ),
            ev.ProviderAttached(
                session_id="ps_1",
                provider="scripted",
                host_id="h1",
                boot_id="b",
                provider_thread_id="pth_1",
                native_ref="scripted-pth_1",
                capabilities=ProviderCapabilities(),
            ),
            ev.RunStarted(run_id="r1", attempt_id="a1", session_id="ps_1", turn_id="t1"),
            ev.RequestOpened(request_id="q1", run_id="r1", node_id="nq1", attempt_id="a1", kind="command"),
            ev.RequestOpened(request_id="q2", run_id="r1", node_id="nq2", attempt_id="a1", kind="user_input"),
            *more,
        ],
    )


def answer(request_id: str = "q1", id: str = "cmd_answer", **kw):
    kw = kw or {"decision": "accept"}
    return command(RespondRequest(request_id=request_id, **kw), thread="th", id=id)


def test_L11_2_an_answer_is_one_delivery_to_the_session_that_asked_and_nothing_recorded_before_it():
    state = waiting()
    decision = answers.decide(state, answer(decision="accept", message="ok"))
    assert decision.events == [] and decision.refusal is None
    assert decision.effects == [
        answers.DeliverAnswer(host_id="h1", session_id="ps_1", request_id="q1", decision="accept", message="ok")
    ]
    assert (decision.receipt.thread_id, decision.receipt.run_id, decision.receipt.disposition) == (
        "th",
        "r1",
        "resolved",
    )
    assert not decision.receipt.duplicate


def test_L11_2_a_question_is_delivered_with_its_answers():
    [deliver] = answers.decide(waiting(), answer("q2", answers={"0": "blue"})).effects
    assert (deliver.request_id, deliver.answers, deliver.decision) == ("q2", {"0": "blue"}, None)


def test_L11_2_an_answer_the_host_took_resolves_the_request_and_completes_its_node():
    state, cmd = waiting(), answer()
    settled = answers.settle(state, cmd, answers.Delivered(status="accepted"))
    assert settled.delivered and settled.refusal is None and settled.retry is None
    assert settled.events == [ev.RequestResolved(request_id="q1", run_id="r1", response={"decision": "accept"})]
    apply(state, settled.events, cmd.id)
    assert state.request("q1").status == "resolved" and state.run("r1").node("nq1").status == "completed"
    assert state.run("r1").status == "waiting"  # q2 still waits


def test_L11_2_a_retried_answer_gets_its_first_receipt_and_asks_the_host_nothing():
    state, cmd = waiting(), answer()
    apply(state, answers.settle(state, cmd, answers.Delivered(status="accepted")).events, cmd.id)
    again = answers.decide(state, cmd)
    assert again.events == [] and again.effects == [] and again.refusal is None
    assert again.receipt.duplicate and again.receipt.run_id == "r1"


def test_L11_2_an_answer_delivered_but_not_recorded_yet_is_recorded_without_asking_again():
    """The append after a delivery conflicted: the worker knows the provider has it (``delivered``)."""
    state = waiting()
    decision = answers.decide(state, answer(), delivered=True)
    assert decision.effects == [] and decision.refusal is None
    assert decision.events == [ev.RequestResolved(request_id="q1", run_id="r1", response={"decision": "accept"})]
    # even when the provider finished its turn since and the request is closed meanwhile
    closed = waiting(ev.RequestResolved(request_id="q1", run_id="r1", status="cancelled"))
    assert answers.decide(closed, answer(), delivered=True).events == decision.events


def test_L11_2_content_the_provider_refuses_is_invalid_response_and_the_request_stays_pending():
    state = waiting()
    with pytest.raises(BadRequest) as refused:
        answers.settle(
            state,
            answer("q2", answers={"colour": "x"}),
            answers.Delivered(status="refused", message="no such question: colour"),
        )
    assert (refused.value.code, refused.value.message) == ("invalid_response", "no such question: colour")
    assert state.request("q2").status == "pending"


def test_L11_2_a_provider_that_failed_to_take_the_answer_is_retried_not_decided():
    settled = answers.settle(waiting(), answer(), answers.Delivered(status="failed", message="boom"))
    assert settled.events == [] and settled.refusal is None and not settled.delivered
    assert settled.retry == "the provider failed to take the answer: boom"


def test_L11_2_answers_are_checked_before_any_delivery():
    with pytest.raises(NotFound) as missing:
        answers.decide(waiting(), answer("q9"))
    assert missing.value.code == "request_not_found"
    with pytest.raises(BadRequest) as shape:
        answers.decide(waiting(), answer("q1", answers={"0": "x"}))
    assert shape.value.code == "invalid_response"
    done = waiting(ev.RequestResolved(request_id="q1", run_id="r1"))
    with pytest.raises(Conflict) as closed:
        answers.decide(done, answer(id="cmd_other"))
    assert closed.value.code == "request_not_pending"


def test_L11_3_a_request_whose_session_is_gone_is_recorded_not_resumable_then_refused_without_delivery():
    state, cmd = waiting(ev.ProviderStopped(session_id="ps_1", reason="host_lost")), answer()
    decision = answers.decide(state, cmd)
    assert decision.effects == [] and decision.events == []
    refusal = decision.refusal
    assert refusal is not None and refusal.actor == "coordinator"
    assert refusal.events == [ev.RequestResolved(request_id="q1", run_id="r1", status="not_resumable")]
    assert (refusal.error.code, refusal.error.status) == ("not_resumable", 409)
    apply(state, refusal.events, cmd.id)
    assert state.request("q1").status == "not_resumable"
    with pytest.raises(Conflict) as retried:  # the same command again: refused the same way, nothing recorded
        answers.decide(state, cmd)
    assert retried.value.code == "not_resumable"
    with pytest.raises(Conflict) as other:  # another answer: refused too, the request never pends again
        answers.decide(state, answer(id="cmd_later"))
    assert other.value.code == "not_resumable"


@pytest.mark.parametrize("message", ["", "unknown_session: session ps_1 is not live here"])
def test_L11_3_a_callback_the_host_no_longer_holds_is_not_resumable(message):
    settled = answers.settle(waiting(), answer(), answers.Delivered(status="gone", message=message))
    assert settled.events == [] and not settled.delivered
    assert settled.refusal is not None and settled.refusal.error.code == "not_resumable"
    assert settled.refusal.events == [ev.RequestResolved(request_id="q1", run_id="r1", status="not_resumable")]


def test_L11_2_an_approval_offering_options_is_answered_by_option_id_and_an_unknown_id_is_refused():
    """An ACP agent's approval carries its own options (``detail.options``): ``answers={"option": <id>}``
    picks one, as the README documents; an id it did not offer is a typed 400 and nothing is delivered."""
    offered = {
        "options": [{"id": "allow", "label": "Allow", "kind": "allow_once"}, {"id": "reject", "label": "Reject"}]
    }
    state = waiting(
        ev.RequestOpened(request_id="q3", run_id="r1", node_id="nq3", attempt_id="a1", kind="command", detail=offered)
    )
    decision = answers.decide(state, answer("q3", answers={"option": "reject"}))
    [deliver] = decision.effects
    assert (deliver.request_id, deliver.answers, deliver.decision) == ("q3", {"option": "reject"}, None)
    for bad, field in (({"option": "nope"}, "answers.option"), ({"option": "allow", "x": "y"}, "answers")):
        with pytest.raises(BadRequest) as refused:
            answers.decide(state, answer("q3", answers=bad))
        assert refused.value.code == "invalid_response" and refused.value.details["field"] == field
        assert refused.value.details["options"] == ["allow", "reject"]
    # an approval without options still takes a decision only
    with pytest.raises(BadRequest):
        answers.decide(state, answer("q1", answers={"option": "allow"}))
