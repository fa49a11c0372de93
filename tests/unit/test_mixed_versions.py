"""Issue 41, item 4 (upgrades): what workers of two versions side by side make of each other's events, the
rules docs/operations.md states. A newer writer's event type an older reader does not know decodes as
UnknownEvent and folds as a no-op (the thread's sequence still advances); a newer writer's extra field in a
known event is ignored by an older reader; an older writer's event that lacks a field added later decodes
with the field's default (so a field added to an event must have one)."""

from __future__ import annotations

import json

import msgspec

from treadle.core import events as ev
from treadle.core.envelope import SCHEMA_VERSION
from treadle.core.state import ThreadState, evolve


def _raw(type_: str, data: dict, seq: int) -> bytes:
    envelope = {
        "id": f"evt_{seq}", "type": type_, "tenant": "acme", "thread": "thr_1", "at": "2026-12-07T00:00:00Z",
        "command_id": "cmd_1", "actor": "newer-coordinator", "schema_version": SCHEMA_VERSION, "data": data,
    }  # fmt: skip
    return json.dumps(envelope).encode()


def test_an_older_reader_folds_a_newer_writers_unknown_event_as_a_no_op():
    state = ThreadState(seq=1)
    before = msgspec.json.decode(msgspec.json.encode(state))
    future = ev.decode_event(_raw("thread.renamed_in_v9", {"title": "new", "why": ["x"]}, 2), seq=2)
    assert isinstance(future.data, ev.UnknownEvent) and future.data.raw == {"title": "new", "why": ["x"]}
    evolve(state, future)
    assert state.seq == 2  # the fence moves on: the next append is fenced on it
    after = msgspec.json.decode(msgspec.json.encode(state))
    assert {k: v for k, v in after.items() if k not in ("seq", "last_activity_at")} == {
        k: v for k, v in before.items() if k not in ("seq", "last_activity_at")
    }


def test_extra_fields_are_ignored_and_missing_later_fields_take_their_defaults():
    newer = _raw("run.held", {"run_id": "run_1", "attempt_id": "att_1", "reason": "capacity", "eta_v9": 5}, 3)
    held = ev.decode_event(newer, seq=3).data
    assert held == ev.RunHeld(run_id="run_1", attempt_id="att_1", reason="capacity")
    older = _raw("interrupt.requested", {"run_id": "run_1", "attempt_id": "att_1"}, 4)  # before `reason`, `by`
    asked = ev.decode_event(older, seq=4).data
    assert asked.reason == "user" and asked.by is None
