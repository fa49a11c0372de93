"""What the folds record of the items they rewrite (``core.touched``) is all the projection writer learns of what
an event it cannot read by its names changed (``projections.changes``): the comparison of the lists' JSON before
and after each event, which the writer used to do on every such event, is kept here as the oracle. Over the
recorded log and logs of every event that changes what it does not name (tests/support/unnamed_events.py), in
batches of one and of several events: every item whose JSON changed is written, every message that changed
runs or places is placed anew with the run it left, and an event that rewrites no item records none."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from msgspec.structs import replace

from tests.support.unnamed_events import child_log, unnamed_log
from treadle.core import events as ev
from treadle.core.events import Envelope, decode_event
from treadle.core.state import ThreadState, evolve
from treadle.core.touched import LISTS
from treadle.projections.changes import Changes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "replay-events.jsonl"
_encode = msgspec.json.Encoder().encode
_ITEMLESS = (ev.ThreadRenamed, ev.ThreadArchived, ev.ThreadUnarchived, ev.ThreadDeleted)


def _recorded() -> list[Envelope]:
    rows = [json.loads(line) for line in FIXTURES.read_text().splitlines()]
    return [decode_event(json.dumps(row["data"]).encode(), row["seq"]) for row in rows]


def _logs() -> list[Envelope]:
    unnamed = unnamed_log()
    last = unnamed[-1]
    deleted = replace(last, id="evt_deleted", type="thread.deleted", seq=(last.seq or 0) + 1)
    deleted = replace(deleted, data=ev.ThreadDeleted(by="u", workspace="threads/bench"))
    return _recorded() + unnamed + child_log() + [deleted]


def _lists(state: ThreadState) -> dict[str, list[bytes]]:
    return {name: [_encode(item) for item in getattr(state, name)] for name in LISTS}


def _places(state: ThreadState) -> list[tuple[str, str | None]]:
    return [(m.id, m.run_id) for m in state.messages]


@pytest.mark.parametrize("batch", [1, 4])
def test_the_items_an_event_changed_are_those_its_fold_recorded_or_its_names_say(batch):
    states: dict[str, ThreadState] = {}
    pending: dict[str, list[Envelope]] = {}
    events = _logs()
    checked = unnamed = 0
    for n, e in enumerate(events):
        pending.setdefault(e.thread, []).append(e)
        if len(pending[e.thread]) < batch and n < len(events) - 1:
            continue
        for thread, batch_events in pending.items():
            state = states.setdefault(thread, ThreadState())
            lists, places = _lists(state), _places(state)
            changes = Changes(state if state.thread is not None else None)
            for x in batch_events:
                changes.fold(state, x)
            if changes.everything:
                continue
            for name in LISTS:
                items = getattr(state, name)
                changed = {i for i, old in enumerate(lists[name]) if _encode(items[i]) != old}
                written = set(changes.indices(state, name, items))
                assert changed <= written, (name, [x.type for x in batch_events], sorted(changed - written))
            moved = {i for i, place in enumerate(places) if _places(state)[i] != place}
            assert moved <= changes.touched("messages"), [x.type for x in batch_events]
            left = {run for (message, run) in places if run is not None and state.message(message).run_id != run}
            assert left <= changes.left, [x.type for x in batch_events]
            if all(isinstance(x.data, _ITEMLESS) for x in batch_events):
                assert all(not changes.touched(name) for name in LISTS) and not changes.left
                assert all(list(changes.indices(state, name, getattr(state, name))) == [] for name in LISTS)
            unnamed += any(not x.data.TRAITS.local for x in batch_events)
            checked += 1
        pending.clear()
    assert checked > 40 and unnamed > 10


def test_a_state_nobody_watches_records_nothing():
    """The coordinator and the supervisor fold the same events: nothing is kept for them, nothing is encoded."""
    state = ThreadState()
    for e in unnamed_log():
        evolve(state, e)
    assert "_touched" not in state.__dict__
    assert b"_touched" not in msgspec.json.encode(state)
