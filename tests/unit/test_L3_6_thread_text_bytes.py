"""Issue 24: the thread-text quota summed every message and script on every send, so a send cost more the longer
the thread (31% of the coordinator's CPU at 4,000 runs). The fold now keeps the sum; after every event of every
kind that makes or changes a message's text or a run's script it equals the plain sum."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from tests.unit.domain_helpers import apply, command, new_thread, run_command, send
from treadle.core import events as ev
from treadle.core.events import decode_event
from treadle.core.state import ThreadState, evolve
from treadle.core.thread.commands import EditQueued

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def plain_sum(state: ThreadState) -> int:
    return sum(len(m.text.encode()) for m in state.messages) + sum(
        len(msgspec.json.encode(r.script)) for r in state.runs if r.script is not None
    )


def test_L3_6_the_kept_text_bytes_are_the_sum_after_every_kind_of_text_change():
    state = new_thread()
    script = {"steps": [{"type": "text", "text": "déjà vu ✓"}]}
    _, first = send(state, "première question ✓", script=script)  # the run's message and its script
    assert state.text_bytes == plain_sum(state) > 0
    run = state.run(first.run_id)
    att = run.attempt
    for payload in (
        ev.MessageDelta(message_id="msg_a", run_id=run.id, attempt_id=att.id, node_id="n", text="Bon"),  # begins
        ev.MessageDelta(message_id="msg_a", run_id=run.id, attempt_id=att.id, node_id="n", text="jour 🌍"),
        ev.MessageCompleted(message_id="msg_a", run_id=run.id, attempt_id=att.id, node_id="n", text="Bonjour 🌍!"),
        ev.MessageCompleted(message_id="msg_b", run_id=run.id, attempt_id=att.id, node_id="n", text="sans delta"),
        ev.MessageCreated(message_id="msg_c", role="system", text="créé entier"),
    ):
        apply(state, [payload])
        assert state.text_bytes == plain_sum(state), payload
    send(state, "pilote ✈", mode="steer_active")  # a steer of the active run
    assert state.text_bytes == plain_sum(state)
    _, queued = send(state, "plus tard", mode="queue_after_active", script=script)
    assert state.text_bytes == plain_sum(state)
    for text, edited in (("modifié ✓✓", None), ("sans script", {"steps": []}), ("x", script)):
        run_command(state, command(EditQueued(run_id=queued.run_id, text=text, script=edited), thread=state.thread.id))
        assert state.text_bytes == plain_sum(state), (text, edited)


def test_L3_6_the_kept_text_bytes_of_a_recorded_log_are_the_sum_after_every_event():
    states: dict[str, ThreadState] = {}
    for line in (FIXTURES / "replay-events.jsonl").read_text().splitlines():
        row = json.loads(line)
        e = decode_event(json.dumps(row["data"]).encode(), row["seq"])
        state = evolve(states.setdefault(e.thread, ThreadState()), e)
        assert state.text_bytes == plain_sum(state), row["seq"]
    assert all(s.text_bytes > 0 for s in states.values())
