"""L3.2 (issue 25): a native steer is listed where its runtime took it into the turn. The steer is stored when the
user sends it; text the runtime streamed before taking it in can be stored after it, and ``steer.joined`` moves
the steer behind that text."""

from __future__ import annotations

from datetime import UTC, datetime

from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.ctx import reaction_ctx
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.run import supervision as sv
from treadle.core.state import ThreadState, fold

AT = datetime(2026, 12, 7, tzinfo=UTC)


def envelopes(first: int, *payloads: ev.Payload) -> list[ev.Envelope]:
    return [
        ev.Envelope(
            id=f"evt_{n}", type=p.TYPE, tenant="acme", thread="thr_1", at=AT, command_id="cmd", actor="t", data=p, seq=n
        )
        for n, p in enumerate(payloads, first)
    ]


def delta(message_id: str, text: str) -> ev.MessageDelta:
    return ev.MessageDelta(message_id=message_id, run_id="run_1", attempt_id="att_1", node_id="node_1", text=text)


def steered_before_its_cut_off_text_was_stored() -> ThreadState:
    return fold(
        envelopes(
            1,
            ev.ThreadCreated(thread_id="thr_1", workspace="w", created_by="u"),
            ev.RunQueued(
                run_id="run_1",
                ordinal=1,
                message_id="msg_user",
                text="outline the talk",
                root_node_id="node_1",
                attempt_id="att_1",
                mode="auto",
                disposition="started",
                dispatched=True,
                provider="codex",
            ),
            ev.ProviderAttached(
                session_id="ps_1",
                provider="codex",
                host_id="host-1",
                boot_id="b",
                provider_thread_id="pth_1",
                native_ref="thread-1",
                capabilities=ProviderCapabilities(active_steering=True),
            ),
            ev.RunStarted(run_id="run_1", attempt_id="att_1", session_id="ps_1", turn_id="turn_1"),
            ev.RunSteered(run_id="run_1", message_id="msg_steer", text="only three points", steering="native"),
            delta("msg_cut", "Outlining"),  # streamed before the steer was taken in, stored after it was sent
        )
    )


def texts(state: ThreadState) -> list[str]:
    return [m.text for m in state.messages]


def test_L3_2_a_joined_steer_is_listed_after_the_text_streamed_before_it() -> None:
    state = steered_before_its_cut_off_text_was_stored()
    assert texts(state) == ["outline the talk", "only three points", "Outlining"]
    touched = state.watch()
    state = fold(
        envelopes(
            7,
            ev.SteerJoined(run_id="run_1", attempt_id="att_1", message_id="msg_steer"),
            delta("msg_reply", "Three points it is."),
        ),
        state,
    )
    listed = ["outline the talk", "Outlining", "only three points", "Three points it is."]
    assert texts(state) == listed
    assert [m.text for m in state.run_messages("run_1")] == listed
    steer = state.message("msg_steer")
    assert steer is not None and state.position("messages", "msg_steer") == 2
    # a projection writes the messages that changed places (the steer and those after it), and their run's places
    assert touched.positions == {"messages": {1, 2}} and touched.left == set()


def test_L3_2_a_join_naming_no_steer_of_its_run_changes_nothing() -> None:
    state = steered_before_its_cut_off_text_was_stored()
    before = texts(state)
    for message_id in ("msg_user", "msg_cut", "msg_unknown"):  # the run's prompt, the runtime's own text, nothing
        state = fold(envelopes(7, ev.SteerJoined(run_id="run_1", attempt_id="att_1", message_id=message_id)), state)
        assert texts(state) == before
    state = fold(envelopes(8, ev.SteerJoined(run_id="run_2", attempt_id="att_2", message_id="msg_steer")), state)
    assert texts(state) == before


def test_L3_2_the_runtimes_report_of_a_join_is_recorded_in_its_turn() -> None:
    """Recorded whatever it names (the fold judges it): the play's next event waits for it to be folded."""
    state = steered_before_its_cut_off_text_was_stored()
    for message_id in ("msg_steer", "msg_unknown"):
        event = pe.ProviderEvent(
            id="pev_1",
            tenant="acme",
            thread="thr_1",
            session_id="ps_1",
            run_id="run_1",
            attempt_id="att_1",
            index=1,
            at=AT,
            body=pe.SteerJoined(message_id=message_id),
        )
        reaction = sv.react(state, event, reaction_ctx("r", AT, "test"))
        assert reaction.events == [ev.SteerJoined(run_id="run_1", attempt_id="att_1", message_id=message_id)]
