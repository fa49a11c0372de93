"""L11.2/L11.3 without I/O: answering a runtime request is decided (``answers.decide``: its record and the
``DeliverAnswer`` effect carried out once the record is stored), and the host's reply is settled
(``answers.settle``: the command's refusal or a retry; ``answers.after``: what is recorded after it). A callback
that is gone is recorded ``not_resumable``, then refused; an answer the provider refuses reopens the request."""

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


def test_L11_2_an_answer_is_recorded_then_delivered_once_to_the_session_that_asked():
    state = waiting()
    decision = answers.decide(state, answer(decision="accept", message="ok"))
    assert decision.refusal is None
    assert decision.events == [
        ev.RequestResolved(request_id="q1", run_id="r1", response={"decision": "accept", "message": "ok"})
    ]
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


def test_L11_2_an_answer_the_host_took_stays_resolved_with_its_node_completed():
    state, cmd = waiting(), answer()
    apply(state, answers.decide(state, cmd).events, cmd.id)
    took = answers.Delivered(status="accepted")
    assert answers.settle(took, again=False) == answers.Settled()
    assert answers.after(state, cmd, took, again=False) == []
    assert state.request("q1").status == "resolved" and state.run("r1").node("nq1").status == "completed"
    assert state.run("r1").status == "waiting"  # q2 still waits


def test_L11_2_a_retried_answer_gets_its_first_receipt_records_nothing_and_is_offered_only_to_a_live_session():
    """The worker that recorded it may have stopped before delivering it: the retry delivers the same answer (the
    host takes it twice as once); once the session is gone there is nobody to offer it to, and nothing to refuse."""
    state, cmd = waiting(), answer()
    first = answers.decide(state, cmd)
    apply(state, first.events, cmd.id)
    again = answers.decide(state, cmd)
    assert again.events == [] and again.refusal is None and again.effects == first.effects
    assert again.receipt.duplicate and again.receipt.run_id == "r1"
    apply(state, [ev.ProviderStopped(session_id="ps_1", reason="idle")])
    later = answers.decide(state, cmd)
    assert later.events == [] and later.effects == [] and later.refusal is None and later.receipt.duplicate
    gone = answers.Delivered(status="gone")
    assert answers.settle(gone, again=True) == answers.Settled()
    assert answers.after(state, cmd, gone, again=True) == []


def test_L11_2_content_the_provider_refuses_is_invalid_response_and_the_request_pends_again():
    state, cmd = waiting(), answer("q2", answers={"colour": "x"})
    apply(state, answers.decide(state, cmd).events, cmd.id)
    refused = answers.Delivered(status="refused", message="no such question: colour")
    error = answers.settle(refused, again=False).error
    assert error is not None and (error.code, error.message) == ("invalid_response", "no such question: colour")
    reopen = answers.after(state, cmd, refused, again=False)
    assert reopen == [ev.RequestResolved(request_id="q2", run_id="r1", status="pending")]
    apply(state, reopen, cmd.id)
    req = state.request("q2")
    assert (req.status, req.response, req.command_id) == ("pending", None, "cmd_answer")
    assert state.run("r1").node("nq2").status == "waiting" and state.run("r1").status == "waiting"
    assert answers.decide(state, answer("q2", id="cmd_again", answers={"0": "x"})).effects  # answerable again
    with pytest.raises(BadRequest) as retried:  # the refused command itself, retried: refused again, nothing done
        answers.decide(state, cmd)
    assert retried.value.code == "invalid_response"


def test_L11_2_an_answer_the_provider_failed_to_take_stays_recorded_and_the_retry_delivers_it_again():
    state, cmd = waiting(), answer()
    first = answers.decide(state, cmd)
    apply(state, first.events, cmd.id)
    failed = answers.Delivered(status="failed", message="boom")
    settled = answers.settle(failed, again=False)
    assert settled.error is None and settled.retry == "the provider failed to take the answer: boom"
    assert answers.after(state, cmd, failed, again=False) == []
    again = answers.decide(state, cmd)
    assert again.events == [] and again.effects == first.effects and again.receipt.duplicate


def test_L11_2_a_record_closed_since_another_way_is_left_as_it_is():
    state, cmd = waiting(), answer()
    apply(state, answers.decide(state, cmd).events, cmd.id)
    apply(state, [ev.RequestResolved(request_id="q1", run_id="r1", status="not_resumable")], "recovery")
    assert answers.after(state, cmd, answers.Delivered(status="refused", message="x"), again=False) == []


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
    state, cmd = waiting(), answer()
    apply(state, answers.decide(state, cmd).events, cmd.id)
    gone = answers.Delivered(status="gone", message=message)
    error = answers.settle(gone, again=False).error
    assert error is not None and (error.code, error.status) == ("not_resumable", 409)
    recorded = answers.after(state, cmd, gone, again=False)
    assert recorded == [ev.RequestResolved(request_id="q1", run_id="r1", status="not_resumable")]
    apply(state, recorded, cmd.id)
    with pytest.raises(Conflict) as retried:  # the same command again: refused the same way, nothing recorded
        answers.decide(state, cmd)
    assert retried.value.code == "not_resumable"


def test_L11_2_an_approval_offering_options_is_answered_by_option_id_and_an_unknown_id_is_refused():
    """An ACP agent's approval carries its own options (``detail.options``): ``answers={"option": <id>}``
    picks one, as docs/providers.md documents; an id it did not offer is a typed 400 and nothing is delivered."""
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
