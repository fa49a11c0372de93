"""A turn over at once: when the provider reports the turn's start and its end (maybe after one message's
completion) in one burst, the run's end carries the run's start (``RunEnded.started``) and that completion: one
event where there were three. Logs written before hold ``run.started`` (and ``message.completed``) and fold the
same; a start reported alone is still appended at once; a redelivered burst appends nothing more."""

from __future__ import annotations

from datetime import timedelta

import msgspec

from tests.support.stored_fields import as_stored
from tests.unit.domain_helpers import T0, apply, new_thread, send
from tests.unit.twins import TENANT, Twins
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.ctx import reaction_ctx
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.run import supervision as sv
from treadle.core.state import ThreadState, evolve
from treadle.eventlog import subjects
from treadle.eventlog.errors import Unavailable
from treadle.memory import StoredMessage
from treadle.projections import changes as changes_
from treadle.projections import document
from treadle.views.of_state import thread_view
from treadle.webhooks.model import as_sent

from .twins import consume

AT = T0 + timedelta(seconds=5)


def _envelope(state: ThreadState, seq: int, data: ev.Payload) -> ev.Envelope:
    assert state.thread is not None
    return ev.Envelope(
        id=f"evt_{seq}", type=data.TYPE, tenant="acme", thread=state.thread.id, at=AT, command_id="cmd_s",
        actor="supervisor", seq=seq, data=data,
    )  # fmt: skip


def _ran() -> tuple[ThreadState, ev.RunStarted, ev.MessageCompleted, ev.RunCompleted]:
    state = new_thread()
    send(state, "hi")
    run = state.runs[-1]
    att = run.attempt
    attached = ev.ProviderAttached(
        session_id="ps_1", provider="scripted", host_id="h", boot_id="b", provider_thread_id="pth", native_ref="n",
        capabilities=ProviderCapabilities(),
    )  # fmt: skip
    apply(state, [attached])
    started = ev.RunStarted(run_id=run.id, attempt_id=att.id, session_id="ps_1", turn_id="turn_1")
    message = ev.MessageCompleted(message_id="msg_a", run_id=run.id, attempt_id=att.id, node_id="n", text="Hello")
    capture = ev.CheckpointCaptured(checkpoint_id="ckpt_1", run_id=run.id, ordinal=1, status="completed")
    return state, started, message, ev.RunCompleted(run_id=run.id, attempt_id=att.id, checkpoint=capture)


def test_L2_2_a_run_end_carrying_its_start_and_message_folds_as_the_three_events_it_replaced():
    old, started, message, end = _ran()
    new = msgspec.json.decode(msgspec.json.encode(old), type=ThreadState)  # the same thread, twice
    base = old.seq
    for i, payload in enumerate([started, message, end], start=1):
        evolve(old, _envelope(old, base + i, payload))
    evolve(new, _envelope(new, base + 3, msgspec.structs.replace(end, started=started, message=message)))
    assert document.encode(new) == document.encode(old)
    run = new.runs[-1]
    assert (run.status, run.started_at, run.attempt.session_id, run.attempt.turn_id) == (
        "completed",
        AT,
        "ps_1",
        "turn_1",
    )


def test_L2_2_an_old_log_with_its_run_started_still_folds_the_run_as_started():
    state, started, message, end = _ran()
    base = state.seq
    evolve(state, _envelope(state, base + 1, started))
    assert state.runs[-1].status == "running"  # users saw the run running before it ended
    evolve(state, _envelope(state, base + 2, msgspec.structs.replace(end, message=message)))
    assert (state.runs[-1].status, state.runs[-1].attempt.session_id) == ("completed", "ps_1")


def _event(state: ThreadState, index: int, body: pe.AnyBody, session: str = "ps_1") -> pe.ProviderEvent:
    run = state.runs[-1]
    assert state.thread is not None
    return pe.ProviderEvent(
        id=f"pev_{index}", tenant="acme", thread=state.thread.id, session_id=session, provider_thread_id="pth",
        run_id=run.id, attempt_id=run.attempt.id, index=index, at=T0, body=body,
    )  # fmt: skip


def _start_reaction(state: ThreadState) -> tuple[pe.ProviderEvent, sv.Reaction]:
    start = _event(state, 1, pe.TurnStarted())
    reaction = sv.react(state, start, reaction_ctx("x", T0, "supervisor"))
    assert isinstance(reaction.events[0], ev.RunStarted)
    return start, reaction


def test_L2_2_only_a_start_followed_at_once_by_its_end_is_carried():
    state, _, _, _ = _ran()
    start, reaction = _start_reaction(state)
    text = pe.TextCompleted(message_id="msg_a", node_id="n", text="Hello")
    end = pe.TurnCompleted(status="completed")
    both = sv.started_and_ended(state, reaction, start, [_event(state, 2, text), _event(state, 3, end)])
    assert both is not None and both.parts == 3 and both.message is not None and both.message.text == "Hello"
    alone = sv.started_and_ended(state, reaction, start, [_event(state, 2, end)])
    assert alone is not None and alone.parts == 2 and alone.message is None
    assert sv.started_and_ended(state, reaction, start, []) is None  # the start came alone: appended at once
    assert sv.started_and_ended(state, reaction, start, [_event(state, 2, text)]) is None  # the turn goes on
    delta = pe.TextDelta(message_id="msg_a", node_id="n", text="He")
    assert sv.started_and_ended(state, reaction, start, [_event(state, 2, delta), _event(state, 3, end)]) is None
    assert sv.started_and_ended(state, reaction, start, [_event(state, 3, end)]) is None  # not the next index
    assert sv.started_and_ended(state, reaction, start, [_event(state, 2, end, session="ps_2")]) is None
    run = state.runs[-1]
    apply(state, [ev.InterruptRequested(run_id=run.id, attempt_id=run.attempt.id)])
    assert sv.started_and_ended(state, reaction, start, [_event(state, 2, end)]) is None  # an interrupt reads folds


def test_L2_2_a_run_end_carrying_its_start_too_large_for_one_event_puts_both_first():
    state, started, _, _ = _ran()
    run = state.runs[-1]
    big = ev.MessageCompleted(
        message_id="msg_a", run_id=run.id, attempt_id=run.attempt.id, node_id="n", text="x" * 300_000
    )
    capture = ev.CheckpointCaptured(checkpoint_id="ckpt_1", run_id=run.id, ordinal=1, status="completed")
    events = sv.finalize(state, run, pe.TurnCompleted(status="completed"), capture, carried=big, started=started)
    assert [type(e) for e in events] == [ev.RunStarted, ev.MessageCompleted, ev.RunCompleted]
    assert isinstance(events[-1], ev.RunCompleted) and events[-1].started is None and events[-1].message is None


def test_L2_2_a_webhook_receiver_still_gets_the_carried_start_as_a_run_started():
    state, started, message, end = _ran()
    carried = _envelope(state, 9, msgspec.structs.replace(end, started=started, message=message))
    sent = as_sent(carried)
    assert [(e.type, e.id, e.seq) for e in sent] == [
        ("run.started", "evt_9.started", 9), ("message.completed", "evt_9.message", 9), ("run.completed", "evt_9", 9)
    ]  # fmt: skip
    assert sent[0].data == started and sent[-1] is carried


async def _playing(tw: Twins):
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    thread, state, run_id = await tw.dispatched(coordinator, supervisor)
    return supervisor, thread, state, state.live_session, state.run(run_id)


def _burst(thread: str, session, pth: str, run, bodies: list[pe.AnyBody], seq: int) -> StoredMessage:
    event = pe.ProviderEvent(
        id=f"pev_b{seq}", tenant=TENANT, thread=thread, session_id=session.id, provider_thread_id=pth, run_id=run.id,
        attempt_id=run.attempt.id, index=1, at=T0, body=bodies[0], then=bodies[1:],
    )  # fmt: skip
    return StoredMessage(seq, f"{subjects.provider(TENANT, thread, pth)}.0", msgspec.json.encode(event))


async def test_L2_2_L9_3_a_turn_over_at_once_is_one_event_once_across_a_failed_append_and_a_redelivery(tmp_path):
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    supervisor, thread, state, session, run = await _playing(tw)
    pth = state.session_thread(session.id).id
    node = run.attempt.root_node_id
    before = len(await tw.log.read(TENANT, thread))
    appends, append = 0, tw.log.append_checked

    async def failing_once(*args, **kwargs):
        nonlocal appends
        appends += 1
        if appends == 1:  # the broker went away under the run's end
            raise Unavailable("broker away")
        return await append(*args, **kwargs)

    tw.log.append_checked = failing_once  # type: ignore[method-assign]
    bodies = [pe.TurnStarted(), pe.TextCompleted(message_id="msg_a", node_id=node, text="Hello"), pe.TurnCompleted()]
    message = _burst(thread, session, pth, run, bodies, seq=50)
    await consume(supervisor._on_provider_event, message)
    await consume(supervisor._on_provider_event, message)  # redelivered (its ack was lost): nothing more
    log = (await tw.log.read(TENANT, thread))[before:]
    assert [e.type for e in log] == ["run.completed"], [e.type for e in log]
    ended = log[0].data
    assert isinstance(ended, ev.RunCompleted) and ended.started is not None and ended.message is not None
    assert (ended.started.session_id, ended.message.text) == (session.id, "Hello")
    assert log[0].causation_id is not None and log[0].causation_id.startswith("prov:50:3")
    state = await tw.state(thread)
    ran = state.run(run.id)
    assert (ran.status, ran.attempt.session_id, ran.attempt.provider_index, state.provider_seq) == (
        "completed", session.id, 3, 50
    )  # fmt: skip
    assert ran.started_at is not None and [m.text for m in state.run_messages(run.id) if m.id == "msg_a"] == ["Hello"]


async def test_L2_2_a_turn_start_reported_alone_is_appended_at_once(tmp_path):
    """A real runtime's start comes alone (the turn goes on): the run is running at once, as users see it."""
    tw = Twins(tmp_path)
    tw.hosts.add("host-1")
    supervisor, thread, state, session, run = await _playing(tw)
    pth = state.session_thread(session.id).id
    await consume(supervisor._on_provider_event, _burst(thread, session, pth, run, [pe.TurnStarted()], seq=60))
    assert (await tw.log.read(TENANT, thread))[-1].type == "run.started"
    assert (await tw.state(thread)).run(run.id).status == "running"


def test_L2_2_the_projections_writes_of_a_run_end_carrying_its_start_reassemble_to_the_thread():
    """The writer writes what an event names and what its folds touched: the run the carried start changed too."""
    state, started, message, end = _ran()
    stored = as_stored(document.fields(state))
    changes = changes_.Changes(state)
    changes.fold(state, _envelope(state, state.seq + 3, msgspec.structs.replace(end, started=started, message=message)))
    assert not changes.everything
    stored.update(as_stored(document.fields(state, changes)))
    assert document.assemble(stored) == msgspec.json.encode(thread_view(state))
