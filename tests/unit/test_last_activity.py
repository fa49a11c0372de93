"""The fold keeps when the thread last changed (the ``at`` of its newest event) for the thread list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from treadle.core import events as ev
from treadle.core.state import ThreadState, evolve
from treadle.views import of_state
from treadle.views.thread import summary

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def _event(seq: int, at: datetime, data: ev.Payload) -> ev.Envelope:
    return ev.Envelope(
        id=f"evt_{seq}", type=data.TYPE, tenant="acme", thread="thr_1", at=at, command_id="cmd", actor="test",
        data=data, seq=seq,
    )  # fmt: skip


def _fold(*events: ev.Envelope) -> ThreadState:
    state = ThreadState()
    for e in events:
        evolve(state, e)
    return state


CREATED = ev.ThreadCreated(thread_id="thr_1", title="t", workspace="w", created_by="u")
QUEUED = ev.RunQueued(
    run_id="run_1", ordinal=1, message_id="msg_1", text="go", root_node_id="node_1", attempt_id="att_1",
    mode="auto", disposition="queued", dispatched=False, provider="scripted",
)  # fmt: skip


def test_last_activity_is_the_at_of_the_newest_event_in_both_summaries():
    later = T0 + timedelta(minutes=5)
    state = _fold(_event(1, T0, CREATED), _event(2, later, QUEUED))
    assert state.last_activity_at == later
    assert of_state.summary(state).last_activity_at == later.isoformat()
    assert summary(of_state.thread_view(state)).last_activity_at == later.isoformat()


def test_last_activity_never_goes_back_and_ignores_replayed_events():
    later = T0 + timedelta(minutes=5)
    state = _fold(_event(1, later, CREATED), _event(2, T0, QUEUED))  # a clock that stepped back
    assert state.last_activity_at == later
    evolve(state, _event(2, later + timedelta(hours=1), QUEUED))  # already folded: a no-op
    assert state.last_activity_at == later


def test_a_thread_with_no_events_has_no_last_activity():
    assert ThreadState().last_activity_at is None
