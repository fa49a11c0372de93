"""One registry of events: every event type is declared once, with its fold (its concept's ``FOLDS``), its
schema (``schemas/events.json``) and its traits (``core.envelope.Traits``: whether it ends a run, the ids it
indexes, what its fold may change). The readers that used to keep lists of event types of their own (the
projection writer, the coverage cache, ``treadle check``, the coordinator's run-end consumers, the supervisor)
read the traits; the traits are checked against what the folds do over the recorded log."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import msgspec

from treadle.core import events as ev
from treadle.core.envelope import UNKNOWN_TRAITS, Traits
from treadle.core.events import decode_event
from treadle.core.run.model import TERMINAL_RUN_STATUSES
from treadle.core.state import _HANDLERS, ThreadState, evolve
from treadle.views import of_state

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "replay-events.jsonl"


def test_every_event_has_a_fold_a_schema_and_its_traits():
    schema = json.loads((ROOT / "schemas" / "events.json").read_text())
    assert len(ev.PAYLOADS) >= 47
    for type_, cls in ev.PAYLOADS.items():
        assert cls in _HANDLERS, f"{type_} has no fold"
        assert f"{cls.__name__}Event" in schema["$defs"], f"{type_} is not in schemas/events.json"
        assert isinstance(cls.__dict__.get("TRAITS"), Traits), f"{type_} declares no traits"
        fields = set(cls.__struct_fields__)
        assert set(cls.TRAITS.indexes) <= fields, f"{type_} indexes a field it does not have"
        if cls.TRAITS.ends_run is not None:
            assert cls.TRAITS.ends_run in TERMINAL_RUN_STATUSES and issubclass(cls, ev.RunEnded), type_
        assert getattr(ev, cls.__name__) is cls, f"{type_} is not in the catalogue (core/events.py)"
    assert ev.UnknownEvent.TRAITS == UNKNOWN_TRAITS  # an event of a newer writer may have changed anything


def test_the_readers_of_the_traits_see_what_they_saw_as_lists():
    """What the four ended-run tuples, ``indexed()`` and the sets of the projection and coverage said before."""
    assert ev.RUN_ENDING == ("run.completed", "run.failed", "run.interrupted", "run.cancelled")
    assert {s: c.TYPE for s, c in ev.ENDING_IN.items()} == {s: f"run.{s}" for s in ev.ENDING_IN}
    queued = ev.RunQueued(
        run_id="run_1",
        ordinal=1,
        message_id="msg_1",
        text="",
        provider="p",
        attempt_id="att_1",
        root_node_id="nod_1",
        mode="auto",
        disposition="started",
    )
    assert ev.indexed(queued) == ["run_1", "nod_1"]
    assert ev.indexed(ev.RunWarning(run_id="run_1", message="m")) == []
    local = {t for t, c in ev.PAYLOADS.items() if c.TRAITS.local}
    assert "run.edited" not in local and "rollback.completed" not in local and "run.queued" in local
    assert len(local) == 35


def _runs_and_messages(state: ThreadState) -> tuple[list[bytes], list[bytes], list[bytes]]:
    statuses = [r.status.encode() for r in state.runs]
    runs = [of_state.encoded_item("runs", r) for r in state.runs]
    messages = [of_state.encoded_item("messages", m) for m in state.messages]
    return statuses, runs, messages


def test_traits_say_what_the_folds_change_over_the_recorded_log():
    """Over every event of the recorded log: an event without ``other_runs`` changes the status of no run but
    its own; without ``provider_threads`` it keeps the provider threads; a ``local`` one changes no run or
    message but those it names or its fold says it rewrote (a steer carried over: ``ThreadState.touch``), and no
    other list but at its end."""
    states: dict[str, ThreadState] = {}
    checked = 0
    for line in FIXTURES.read_text().splitlines():
        row = json.loads(line)
        e = decode_event(json.dumps(row["data"]).encode(), row["seq"])
        state = states.setdefault(e.thread, ThreadState())
        before = copy.deepcopy(state)
        touched = state.watch()
        evolve(state, e)
        traits, d = e.data.TRAITS, e.data
        named_run, named_message = getattr(d, "run_id", None), getattr(d, "message_id", None)
        statuses0, runs0, messages0 = _runs_and_messages(before)
        statuses1, runs1, messages1 = _runs_and_messages(state)
        if not traits.other_runs:
            for r, s0, s1 in zip(before.runs, statuses0, statuses1):
                assert s0 == s1 or r.id == named_run, (row["seq"], e.type)
        if not traits.provider_threads:
            assert of_state.encoded_part(state, "provider_threads") == of_state.encoded_part(
                before, "provider_threads"
            ), (row["seq"], e.type)
        if traits.local:
            for i, (r, a, b) in enumerate(zip(before.runs, runs0, runs1)):
                assert a == b or r.id == named_run or i in touched.positions.get("runs", ()), (row["seq"], e.type, r.id)
            for i, (m, a, b) in enumerate(zip(before.messages, messages0, messages1)):
                assert a == b or m.id == named_message or i in touched.positions.get("messages", ()), (
                    row["seq"],
                    e.type,
                )
            for name in ("checkpoints", "activity", "handoffs"):
                old, new = getattr(before, name), getattr(state, name)
                assert msgspec.json.encode(new[: len(old)]) == msgspec.json.encode(old), (row["seq"], e.type, name)
        checked += 1
    assert checked == 84
