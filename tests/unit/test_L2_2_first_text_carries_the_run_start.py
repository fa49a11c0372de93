"""Issue 38: a turn's start waits briefly for the turn's first output at the provider host; reported with the
first text, the text's ``message.delta`` carries the run's start (``MessageDelta.started``): one event where there
were two. Logs written before hold ``run.started`` then ``message.delta`` and fold the same; a start reported alone
is still appended alone; a redelivered report appends nothing more."""

from __future__ import annotations

import msgspec

from tests.support.stored_fields import as_stored
from tests.unit.test_L2_2_run_end_carries_its_start import _burst, _envelope, _event, _playing, _ran, _start_reaction
from tests.unit.twins import TENANT, Twins
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.run import supervision as sv
from treadle.core.state import ThreadState, evolve
from treadle.eventlog.errors import Unavailable
from treadle.projections import changes as changes_
from treadle.projections import document
from treadle.views.of_state import thread_view
from treadle.webhooks.model import as_sent

from .twins import consume


def _delta(started: ev.RunStarted, text: str = "Hel") -> ev.MessageDelta:
    return ev.MessageDelta(
        message_id="msg_a", run_id=started.run_id, attempt_id=started.attempt_id, node_id="n", text=text
    )


def test_L2_2_a_first_text_carrying_the_run_start_folds_as_the_two_events_it_replaced():
    old, started, _, _ = _ran()
    new = msgspec.json.decode(msgspec.json.encode(old), type=ThreadState)  # the same thread, twice
    base = old.seq
    evolve(old, _envelope(old, base + 1, started))  # the old shape: run.started, then the text
    evolve(old, _envelope(old, base + 2, _delta(started)))
    evolve(new, _envelope(new, base + 2, msgspec.structs.replace(_delta(started), started=started)))
    assert document.encode(new) == document.encode(old)
    run = new.runs[-1]
    assert (run.status, run.attempt.status, run.attempt.session_id, run.attempt.turn_id) == (
        "running", "running", "ps_1", "turn_1"
    )  # fmt: skip
    assert [m.text for m in new.run_messages(run.id) if m.id == "msg_a"] == ["Hel"]


def test_L2_2_only_a_start_followed_by_its_next_text_is_carried_by_it():
    state, _, _, _ = _ran()
    start, reaction = _start_reaction(state)
    delta = pe.TextDelta(message_id="msg_a", node_id="n", text="He")
    opened = sv.started_with_text(state, reaction, start, [_event(state, 2, delta)])
    assert opened is not None and opened.started == reaction.events[0] and opened.text == "He"
    assert sv.started_with_text(state, reaction, start, []) is None  # the start came alone: appended alone
    assert sv.started_with_text(state, reaction, start, [_event(state, 3, delta)]) is None  # not the next index
    assert sv.started_with_text(state, reaction, start, [_event(state, 2, delta, session="ps_2")]) is None
    tool = pe.ToolStarted(node_id="node_t", kind="command", title="ls")
    assert sv.started_with_text(state, reaction, start, [_event(state, 2, tool)]) is None  # two events, as before
    huge = pe.TextDelta(message_id="msg_a", node_id="n", text="x" * 300_000)
    assert sv.started_with_text(state, reaction, start, [_event(state, 2, huge)]) is None  # too big together


def test_L2_2_a_webhook_receiver_still_gets_the_start_carried_by_a_text_as_a_run_started():
    state, started, _, _ = _ran()
    carried = _envelope(state, 9, msgspec.structs.replace(_delta(started), started=started))
    sent = as_sent(carried)
    assert [(e.type, e.id, e.seq) for e in sent] == [("run.started", "evt_9.started", 9), ("message.delta", "evt_9", 9)]
    assert sent[0].data == started and sent[-1] is carried


def test_L2_2_the_projections_writes_of_a_text_carrying_the_start_reassemble_to_the_thread():
    state, started, _, _ = _ran()
    stored = as_stored(document.fields(state))
    changes = changes_.Changes(state)
    changes.fold(state, _envelope(state, state.seq + 1, msgspec.structs.replace(_delta(started), started=started)))
    assert not changes.everything
    stored.update(as_stored(document.fields(state, changes)))
    assert document.assemble(stored) == msgspec.json.encode(thread_view(state))


async def test_L2_2_L9_3_a_start_with_its_first_text_is_one_event_once_across_a_failed_append_and_a_redelivery(
    tmp_path,
):
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
        if appends == 1:  # the broker went away under the append
            raise Unavailable("broker away")
        return await append(*args, **kwargs)

    tw.log.append_checked = failing_once  # type: ignore[method-assign]
    message = _burst(
        thread, session, pth, run, [pe.TurnStarted(), pe.TextDelta(message_id="msg_a", node_id=node, text="He")], seq=70
    )
    await consume(supervisor._on_provider_event, message)
    await consume(supervisor._on_provider_event, message)
    await consume(supervisor._on_provider_event, message)  # redelivered (its ack was lost): nothing more
    log = (await tw.log.read(TENANT, thread))[before:]
    assert [e.type for e in log] == ["message.delta"], [e.type for e in log]
    opened = log[0].data
    assert isinstance(opened, ev.MessageDelta) and opened.started is not None and opened.text == "He"
    assert log[0].causation_id is not None and log[0].causation_id.startswith("prov:70:2")
    state = await tw.state(thread)
    ran = state.run(run.id)
    assert (ran.status, ran.attempt.session_id, ran.attempt.provider_index, state.provider_seq) == (
        "running", session.id, 2, 70
    )  # fmt: skip
