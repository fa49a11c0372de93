from typing import get_args

import pytest

from tests.unit.domain_helpers import T0, apply, command, ctx, new_thread, run_command, send
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.decide import decide
from treadle.core.errors import BadRequest, Conflict, NotFound
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.run import supervision as sv
from treadle.core.state import ThreadState, provider_cause
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.core.thread.decide import dispatch_next
from treadle.providers.registry import CATALOGUE


def test_L1_1_thread_create_creates_only_the_thread():
    state = new_thread(title="t")
    assert state.thread is not None and state.thread.title == "t"
    assert state.sessions == [] and state.provider_threads == [] and state.runs == []
    assert state.thread.workspace == f"threads/{state.thread.id}"


def test_L1_1_retried_create_returns_the_original_receipt():
    state = ThreadState()
    cmd = command(CreateThread(title="t"), thread="thr_a")
    events, first = run_command(state, cmd)
    again, second = decide(state, cmd, __import__("treadle.core.ctx", fromlist=["Ctx"]).Ctx.for_command(cmd, CATALOGUE))
    assert again == [] and second.duplicate and second.thread_id == first.thread_id


def test_L2_1_message_appends_message_run_root_node_attempt_and_dispatch():
    state = new_thread()
    events, receipt = send(state, "do it")
    assert [type(e) for e in events] == [ev.RunQueued] and events[0].dispatched
    run = state.runs[0]
    assert run.ordinal == 1 and run.status == "starting" and receipt.disposition == "started"
    assert run.nodes[0].kind == "root_turn" and run.nodes[0].counts_for_run
    assert len(run.attempts) == 1 and run.attempts[0].status == "pending"
    assert state.messages[0].role == "user" and state.messages[0].text == "do it"


def test_L2_1_duplicate_send_returns_same_receipt_and_appends_nothing():
    state = new_thread()
    cmd = command(SendMessage(text="x"), thread=state.thread.id)
    _, first = run_command(state, cmd)
    events, second = run_command(state, cmd)
    assert events == [] and second.duplicate
    assert (second.message_id, second.run_id, second.disposition) == (first.message_id, first.run_id, first.disposition)


def _provider_event(state, body, run=None, session="ps_1"):
    run = run or state.active_run
    return pe.ProviderEvent(
        id="evt_p",
        tenant="acme",
        thread=state.thread.id,
        session_id=session,
        provider_thread_id="pth_1",
        run_id=run.id,
        attempt_id=run.attempt.id,
        at=T0,
        body=body,
    )


def _started(state):
    apply(
        state,
        [
            ev.ProviderAttached(
                session_id="ps_1",
                provider="scripted",
                host_id="h",
                boot_id="b",
                provider_thread_id="pth_1",
                native_ref="n",
                capabilities=ProviderCapabilities(),
            )
        ],
    )
    apply(state, sv.react(state, _provider_event(state, pe.TurnStarted(native_turn_ref="t1")), ctx()).events)
    return state.active_run


def test_L2_2_turn_started_makes_root_node_and_run_running():
    state = new_thread()
    send(state)
    run = _started(state)
    assert run.status == "running" and run.nodes[0].status == "running"
    assert run.attempt.status == "running" and run.attempt.native_turn_ref == "t1" and run.attempt.session_id == "ps_1"


def _capture(run, status="completed"):
    return ev.CheckpointCaptured(
        checkpoint_id="ckpt_1", run_id=run.id, ordinal=run.ordinal, status=status, ref="refs/x", commit="c", tree="t"
    )


def test_L2_3_finalization_closes_everything_before_the_terminal_status():
    state = new_thread()
    send(state)
    run = _started(state)
    apply(
        state,
        sv.react(
            state,
            _provider_event(state, pe.TextDelta(message_id="msg_1", node_id=run.attempt.root_node_id, text="partial")),
            ctx(),
        ).events,
    )
    apply(state, sv.react(state, _provider_event(state, pe.ToolStarted(node_id="node_t", title="ls")), ctx()).events)
    reaction = sv.react(state, _provider_event(state, pe.TurnCompleted(status="completed")), ctx())
    assert reaction.finalize is not None and reaction.events == []
    events = sv.finalize(state, run, reaction.finalize, _capture(run))
    kinds = [type(e) for e in events]
    assert kinds == [ev.MessageCompleted, ev.NodeCompleted, ev.RunCompleted]
    assert events[-1].checkpoint.checkpoint_id == "ckpt_1"
    apply(state, events)
    assert run.status == "completed" and run.checkpoint_id == "ckpt_1"
    assert all(m.status != "streaming" for m in state.messages)
    assert all(n.status not in ("running", "pending") for n in run.nodes)
    assert state.active_run_id is None


def test_L2_4_child_nodes_never_complete_the_run():
    state = new_thread()
    send(state)
    run = _started(state)
    apply(
        state, sv.react(state, _provider_event(state, pe.ToolStarted(node_id="node_t", kind="subagent")), ctx()).events
    )
    apply(state, sv.react(state, _provider_event(state, pe.ToolCompleted(node_id="node_t")), ctx()).events)
    assert run.status == "running" and run.node("node_t").status == "completed"


def test_L2_5_non_fatal_provider_errors_do_not_end_the_run():
    state = new_thread()
    send(state)
    run = _started(state)
    apply(state, sv.react(state, _provider_event(state, pe.Warning(message="rate limited")), ctx()).events)
    assert run.status == "running"
    assert state.activity[-1].kind == "runtime.warning" and state.activity[-1].run_id == run.id


def test_L2_5_failed_turn_fails_the_run_with_its_error():
    state = new_thread()
    send(state)
    run = _started(state)
    turn = pe.TurnCompleted(status="failed", error="boom")
    apply(state, sv.finalize(state, run, turn, _capture(run, "failed")))
    assert run.status == "failed" and run.error == "boom"


def test_L3_1_every_mode_starts_at_once_on_an_idle_thread():
    for mode in ("auto", "start_immediately", "queue_after_active"):
        state = new_thread()
        _, receipt = send(state, mode=mode)
        assert receipt.disposition == "started"


def test_L3_1_queue_after_active_queues_behind_the_active_run():
    state = new_thread()
    send(state)
    events, receipt = send(state, "second", mode="queue_after_active")
    assert receipt.disposition == "queued" and not events[0].dispatched
    assert state.queue == [receipt.run_id]


def test_L3_1_reject_on_a_busy_thread_is_refused_and_appends_nothing():
    state = new_thread()
    send(state)
    seq = state.seq
    with pytest.raises(Conflict):
        send(state, mode="reject")
    assert state.seq == seq


def test_L3_1_start_immediately_on_a_busy_thread_interrupts_the_active_run_and_goes_first():
    state = new_thread()
    send(state)
    _, queued = send(state, "later", mode="queue_after_active")
    events, receipt = send(state, "now", mode="start_immediately")
    assert [type(e) for e in events] == [ev.InterruptRequested, ev.RunQueued]
    assert receipt.disposition == "preempting" and state.queue == [receipt.run_id, queued.run_id]
    assert state.runs[0].attempt.interrupt == "requested" and state.runs[0].attempt.interrupt_reason == "preempted"


def test_L3_6_queued_runs_start_in_order_when_the_active_run_ends():
    state = new_thread()
    send(state)
    _, second = send(state, "2", mode="queue_after_active")
    _, third = send(state, "3", mode="queue_after_active")
    assert dispatch_next(state) == []  # the first run is still active
    first = state.runs[0]
    apply(state, [ev.RunCompleted(run_id=first.id, attempt_id=first.attempt.id)])
    assert dispatch_next(state) == [ev.RunDispatched(run_id=second.run_id)]
    apply(state, dispatch_next(state))
    assert state.active_run_id == second.run_id and state.queue == [third.run_id]


def test_L9_3_lost_session_mid_turn_starts_a_recovery_attempt():
    state = new_thread()
    send(state)
    run = _started(state)
    events = sv.session_stopped(state, "ps_1", "host_restarted", ctx()).events
    assert [type(e) for e in events] == [ev.ProviderStopped, ev.AttemptEnded, ev.AttemptStarted]
    apply(state, events)
    assert run.attempts[0].status == "lost" and run.attempt.reason == "provider_recovery"
    assert sv.pending_attempt(state) is run and state.live_session is None
    stale = _provider_event(state, pe.TextDelta(message_id="m", node_id="n", text="late"))
    stale.attempt_id = run.attempts[0].id
    assert sv.react(state, stale, ctx()).events == []


def test_L10_1_first_run_needs_a_baseline_for_ordinal_zero():
    state = new_thread()
    send(state)
    assert sv.baseline_ordinal(state, state.active_run) == 0


def test_provider_events_are_folded_once_by_provider_sequence():
    state = new_thread()
    send(state)
    apply(state, [ev.RunWarning(run_id=state.active_run_id, message="w")], causation=provider_cause(41))
    assert state.provider_seq == 41


@pytest.mark.parametrize(
    "body,error",
    [
        (SendMessage(text="   "), BadRequest),
        (SendMessage(text="x" * 100_001), BadRequest),
        (SendMessage(text="x", mode="sideways"), BadRequest),
        (SendMessage(text="x", provider="gpt"), BadRequest),
        (SendMessage(text="x", script={"steps": [{"type": "teleport"}]}), BadRequest),
        (SendMessage(text="x", script={"steps": [{"type": "write_file", "path": "../x", "content": ""}]}), BadRequest),
    ],
)
def test_bad_message_input_is_rejected_and_appends_nothing(body, error):
    state = new_thread()
    seq = state.seq
    with pytest.raises(error):
        run_command(state, command(body, thread=state.thread.id))
    assert state.seq == seq


def test_message_to_a_missing_thread_is_not_found():
    with pytest.raises(NotFound):
        run_command(ThreadState(), command(SendMessage(text="x"), thread="thr_missing"))


@pytest.mark.parametrize("workspace", ["../x", "/etc", "a/../../b", "a b", "a/*", "a/\n"])
def test_workspace_never_leaves_the_tenant_root(workspace):
    with pytest.raises(BadRequest):
        new_thread(workspace=workspace)


def test_L9_3_a_dead_sessions_late_events_never_join_an_attempt_handed_to_a_new_session():
    state = new_thread()
    send(state)
    run = state.active_run
    apply(
        state,
        [
            ev.ProviderAttached(
                session_id="ps_1",
                provider="scripted",
                host_id="h",
                boot_id="b1",
                provider_thread_id="pth_1",
                native_ref="n",
                capabilities=ProviderCapabilities(),
            )
        ],
    )
    # The host restarted before the start was seen: the attempt is handed to a new session.
    apply(
        state,
        [
            ev.ProviderStopped(session_id="ps_1", reason="host_lost_session"),
            ev.ProviderAttached(
                session_id="ps_2",
                provider="scripted",
                host_id="h",
                boot_id="b2",
                provider_thread_id="pth_1",
                native_ref="n",
                capabilities=ProviderCapabilities(),
            ),
        ],
    )
    late_start = _provider_event(state, pe.TurnStarted(native_turn_ref="old"), session="ps_1")
    assert sv.react(state, late_start, ctx()).events == []
    apply(
        state,
        sv.react(state, _provider_event(state, pe.TurnStarted(native_turn_ref="new"), session="ps_2"), ctx()).events,
    )
    assert run.attempt.session_id == "ps_2"
    late_text = _provider_event(state, pe.TextCompleted(message_id="m_old", node_id="n", text="x"), session="ps_1")
    assert sv.react(state, late_text, ctx()).events == []


def test_L2_3_a_turn_never_ends_ahead_of_its_own_earlier_events():
    """After a supervisor crash, new provider events arrive before the unacknowledged earlier ones are
    redelivered: an event ahead of a gap waits, so the turn's text is never cut short."""
    state = new_thread()
    send(state)
    run = state.active_run
    apply(
        state,
        [
            ev.ProviderAttached(
                session_id="ps_1",
                provider="scripted",
                host_id="h",
                boot_id="b",
                provider_thread_id="pth_1",
                native_ref="n",
                capabilities=ProviderCapabilities(),
            )
        ],
    )

    def numbered(body, index):
        e = _provider_event(state, body)
        e.index = index
        return e

    started = sv.react(state, numbered(pe.TurnStarted(), 1), ctx())
    apply(state, started.events, causation=provider_cause(10, 1))
    ahead = sv.react(state, numbered(pe.TurnCompleted(status="completed"), 3), ctx())
    assert ahead.wait and ahead.events == [] and ahead.finalize is None
    text = sv.react(state, numbered(pe.TextCompleted(message_id="m", node_id="n", text="all of it"), 2), ctx())
    apply(state, text.events, causation=provider_cause(11, 2))
    assert run.attempt.provider_index == 2
    assert sv.react(state, numbered(pe.TextCompleted(message_id="m", node_id="n", text="again"), 2), ctx()).events == []
    assert sv.react(state, numbered(pe.TurnCompleted(status="completed"), 3), ctx()).finalize is not None


def test_L9_3_a_plays_events_that_come_back_before_its_start_wait_for_it():
    """Issue 6 (a chaos stall): the supervisor died holding the play's start unacknowledged, and its successor
    got the text and the turn's end first. Taken for a stranger session's words (the attempt names no session
    before its start), they were dropped, and the run never ended. They wait for the start instead."""
    state = new_thread()
    send(state)
    run = state.active_run
    apply(
        state,
        [
            ev.ProviderAttached(
                session_id="ps_1",
                provider="scripted",
                host_id="h",
                boot_id="b",
                provider_thread_id="pth_1",
                native_ref="n",
                capabilities=ProviderCapabilities(),
            )
        ],
    )

    def numbered(body, index, session="ps_1"):
        e = _provider_event(state, body, session=session)
        e.index = index
        return e

    text, end = (
        numbered(pe.TextCompleted(message_id="m", node_id="n", text="all of it"), 2),
        numbered(pe.TurnCompleted(status="completed"), 3),
    )
    assert sv.react(state, text, ctx()).wait and sv.react(state, end, ctx()).wait
    assert (
        sv.react(state, numbered(pe.TextCompleted(message_id="m", node_id="n", text="x"), 2, "ps_0"), ctx()).events
        == []
    )  # a session the attempt was never handed to is still a stranger
    apply(state, sv.react(state, numbered(pe.TurnStarted(), 1), ctx()).events, causation=provider_cause(10, 1))
    apply(state, sv.react(state, text, ctx()).events, causation=provider_cause(11, 2))
    assert [m.text for m in state.messages if m.role == "assistant"] == ["all of it"]
    assert sv.react(state, end, ctx()).finalize is not None and run.attempt.provider_index == 2


def test_L2_3_every_in_turn_provider_event_becomes_a_thread_fact():
    """Events of a play are folded strictly by index, and only appended facts advance it: a body the
    supervisor mapped to nothing would stall every later event of its turn. So each one maps to something."""
    samples = {
        pe.TextDelta: pe.TextDelta(message_id="m", node_id="n", text="x"),
        pe.TextCompleted: pe.TextCompleted(message_id="m", node_id="n", text="x"),
        pe.ToolStarted: pe.ToolStarted(node_id="node_t", title="ls"),
        pe.ToolCompleted: pe.ToolCompleted(node_id="node_t"),
        pe.RequestOpened: pe.RequestOpened(request_id="req_1", node_id="node_q", kind="command"),
        pe.PlanUpdated: pe.PlanUpdated(plan_id="plan_1", kind="todo_list"),
        pe.Warning: pe.Warning(message="w"),
        pe.TurnCompleted: pe.TurnCompleted(),
        pe.SteerJoined: pe.SteerJoined(message_id="m"),
    }
    in_turn = set(get_args(pe.AnyBody)) - {pe.TurnStarted, pe.SessionStopped}  # those two are handled before
    assert set(samples) == in_turn, "a new provider event body needs a mapping in supervision.react"
    for body in samples.values():
        state = new_thread()
        send(state)
        _started(state)
        reaction = sv.react(state, _provider_event(state, body), ctx())
        assert reaction.events or reaction.finalize is not None, type(body).__name__
