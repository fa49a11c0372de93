"""A run's end carries the completion of its turn's last message when the provider reported both in one burst
(``RunEnded.message``): one event fewer per ordinary run. Logs written before hold the two events; both kinds of
log fold to the same thread, the projection's writes of either reassemble to it, and a webhook receiver still
gets a ``message.completed``."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from tests.support.stored_fields import as_stored
from tests.unit.domain_helpers import apply, new_thread, send
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.ctx import reaction_ctx
from treadle.core.events import decode_event
from treadle.core.run import supervision as sv
from treadle.core.run.model import Run
from treadle.core.state import ThreadState, evolve
from treadle.core.trimming import MAX_EVENT_BYTES
from treadle.projections import changes as changes_
from treadle.projections import document
from treadle.views.of_state import thread_view
from treadle.webhooks.model import as_sent

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "replay-events.jsonl"


def _recorded() -> list[ev.Envelope]:
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    return [decode_event(json.dumps(row["data"]).encode(), row["seq"]) for row in rows]


def _as_bursts(log: list[ev.Envelope]) -> tuple[list[ev.Envelope], list[ev.Envelope], int]:
    """The recorded log with each message completion that its run's end follows at once given that end's time (as
    one burst reports them), and the same log as written now: the run's end carrying the message, the
    completion's sequence left unused. Returns both and how many pairs there were."""
    old, new, pairs = list(log), list(log), 0
    for i in range(len(log) - 1):
        message, end = log[i].data, log[i + 1].data
        if (
            isinstance(message, ev.MessageCompleted)
            and isinstance(end, ev.RunEnded)
            and log[i + 1].thread == log[i].thread
            and (message.run_id, message.attempt_id) == (end.run_id, end.attempt_id)
        ):
            pairs += 1
            old[i] = msgspec.structs.replace(log[i], at=log[i + 1].at)
            new[i + 1] = msgspec.structs.replace(log[i + 1], data=msgspec.structs.replace(end, message=message))
            new[i] = None  # type: ignore[call-overload]
    return old, [e for e in new if e is not None], pairs


def _fold(log: list[ev.Envelope]) -> dict[str, ThreadState]:
    states: dict[str, ThreadState] = {}
    for e in log:
        evolve(states.setdefault(e.thread, ThreadState()), e)
    return states


def test_L2_3_a_run_end_carrying_its_last_message_folds_as_the_two_events_it_replaced():
    recorded = _recorded()
    old, new, pairs = _as_bursts(recorded)
    assert pairs >= 5  # most runs of the recording end right after their last message
    assert len(new) == len(recorded) - pairs
    before, after = _fold(old), _fold(new)
    assert before.keys() == after.keys()
    for thread, state in before.items():
        assert document.encode(after[thread]) == document.encode(state), thread


def test_L2_3_an_old_log_still_folds_its_message_completions():
    """The recorded log (a message completion, then the run's end) folds each completed message with its text."""
    recorded = _recorded()
    states = _fold(recorded)
    completions = [e for e in recorded if isinstance(e.data, ev.MessageCompleted)]
    assert completions
    for e in completions:
        m = states[e.thread].message(e.data.message_id)
        assert m is not None and (m.status, m.text) == (e.data.status, e.data.text), e.seq


def test_L2_3_the_projections_writes_of_a_run_end_carrying_a_message_reassemble_to_the_thread():
    """The writer writes what an event names: the carried message is named too, so it is written."""
    _, new, _ = _as_bursts(_recorded())
    states: dict[str, ThreadState] = {}
    stored: dict[str, dict[bytes, bytes]] = {}
    for e in new:
        state = states.get(e.thread)
        changes = changes_.Changes(state)
        state = states.setdefault(e.thread, ThreadState())
        changes.fold(state, e)
        if changes.everything:
            stored[e.thread] = {}
        stored.setdefault(e.thread, {}).update(
            as_stored(document.fields(state, None if changes.everything else changes))
        )
        assert document.assemble(stored[e.thread]) == msgspec.json.encode(thread_view(state)), e.seq


def _turn_end(state: ThreadState, run: Run, index: int, status: str) -> pe.ProviderEvent:
    """The provider's report that ``run``'s turn ended, as part ``index`` of its message."""
    assert state.thread is not None
    return pe.ProviderEvent(
        id="evt_p",
        tenant="acme",
        thread=state.thread.id,
        session_id="ps_1",
        provider_thread_id="pth",
        run_id=run.id,
        attempt_id=run.attempt.id,
        index=index,
        at=run.queued_at,
        body=pe.TurnCompleted(status=status),
    )


def _burst_end(text: str) -> tuple[ThreadState, list[ev.Payload]]:
    """A thread whose run streamed ``text`` and reported its completion and the turn's end in one burst."""
    state = new_thread()
    send(state, "hi")
    run = state.runs[-1]
    att = run.attempt
    apply(state, [ev.RunStarted(run_id=run.id, attempt_id=att.id, session_id="ps_1", turn_id="turn_1")])
    apply(state, [ev.MessageDelta(message_id="msg_a", run_id=run.id, attempt_id=att.id, node_id="n", text="par")])
    completion = ev.MessageCompleted(message_id="msg_a", run_id=run.id, attempt_id=att.id, node_id="n", text=text)
    then = _turn_end(state, run, 3, "completed")
    carried = sv.carried_message(state, sv.Reaction([completion]), then)
    assert carried is completion
    capture = ev.CheckpointCaptured(checkpoint_id="ckpt_1", run_id=run.id, ordinal=1, status="completed")
    assert isinstance(then.body, pe.TurnCompleted)
    return state, sv.finalize(state, run, then.body, capture, reaction_ctx("x", run.queued_at, "t"), carried)


def test_L2_3_the_run_end_carries_the_streamed_message_instead_of_closing_it_incomplete():
    state, events = _burst_end("partial answer")
    assert [type(p) for p in events] == [ev.RunCompleted]
    end = events[0]
    assert isinstance(end, ev.RunCompleted) and end.message is not None and end.message.text == "partial answer"
    stored = as_stored(document.fields(state))
    changes = changes_.Changes(state)
    apply(state, events)
    changes.note(end)
    assert not changes.everything
    stored.update(as_stored(document.fields(state, changes)))  # the streamed message is written: the end names it
    assert document.assemble(stored) == msgspec.json.encode(thread_view(state))
    m = state.message("msg_a")
    assert m is not None and (m.status, m.text) == ("completed", "partial answer")
    assert state.runs[-1].status == "completed"


def test_L2_3_a_message_too_large_to_ride_with_the_run_end_goes_first_on_its_own():
    state, events = _burst_end("x" * MAX_EVENT_BYTES)
    assert [type(p) for p in events] == [ev.MessageCompleted, ev.RunCompleted]
    assert isinstance(events[1], ev.RunCompleted) and events[1].message is None
    apply(state, events)
    assert state.message("msg_a").status == "completed"  # type: ignore[union-attr]


def test_L2_3_no_carrying_once_an_interrupt_was_asked():
    """A restart for a steer (L3.3) and a weak provider's status read the messages folded before the end."""
    state = new_thread()
    send(state, "hi")
    run = state.runs[-1]
    att = run.attempt
    apply(state, [ev.RunStarted(run_id=run.id, attempt_id=att.id, session_id="ps_1", turn_id="turn_1")])
    apply(state, [ev.InterruptRequested(run_id=run.id, attempt_id=att.id)])
    completion = ev.MessageCompleted(message_id="msg_a", run_id=run.id, attempt_id=att.id, node_id="n", text="t")
    then = _turn_end(state, run, 2, "interrupted")
    assert sv.carried_message(state, sv.Reaction([completion]), then) is None


def test_L2_3_a_webhook_receiver_of_message_completed_still_gets_the_carried_message():
    _, new, _ = _as_bursts(_recorded())
    end = next(e for e in new if isinstance(e.data, ev.RunEnded) and e.data.message is not None)
    message, itself = as_sent(end)
    assert (message.type, message.id, message.seq) == ("message.completed", f"{end.id}.message", end.seq)
    assert message.data == end.data.message
    assert itself is end
    plain = next(e for e in new if isinstance(e.data, ev.RunQueued))
    assert as_sent(plain) == [plain]
