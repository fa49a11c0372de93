"""A thread's home volume (issue 35): recorded when it is created, changed by ``thread.moved``, shown in its
view; threads stored before homes existed fold onto "local", as they did."""

from __future__ import annotations

import json

import msgspec

from tests.unit.domain_helpers import apply, command
from treadle.core import events as ev
from treadle.core.ctx import Ctx, thread_id_for
from treadle.core.decide import decide
from treadle.core.state import ThreadState
from treadle.core.thread.commands import CreateThread
from treadle.providers.registry import CATALOGUE
from treadle.views import of_state


def created_on(home: str | None) -> ThreadState:
    state = ThreadState()
    cmd = command(CreateThread(title="t"))
    cmd.thread = thread_id_for(cmd.id, cmd.issued_at)
    ctx = msgspec.structs.replace(Ctx.for_command(cmd, CATALOGUE), home=home)
    events, _ = decide(state, cmd, ctx)
    apply(state, events, cmd.id)
    return state


def test_a_thread_is_created_on_the_volume_placed_for_it():
    state = created_on("node-2")
    assert state.thread is not None and state.thread.volume == "node-2"
    assert of_state.thread_view(state).thread.volume == "node-2"  # type: ignore[union-attr]


def test_a_thread_created_with_nothing_placed_and_a_stored_one_live_on_local():
    assert created_on(None).thread.volume == "local"  # type: ignore[union-attr]
    stored = {"thread_id": "thr_1", "workspace": "threads/thr_1", "created_by": "alice"}  # before homes
    envelope = {
        "id": "evt_1", "type": "thread.created", "tenant": "acme", "thread": "thr_1", "at": "2026-12-02T12:00:00Z",
        "command_id": "cmd_1", "actor": "user:alice", "data": stored,
    }  # fmt: skip
    decoded = ev.decode_event(json.dumps(envelope).encode(), 1)
    assert isinstance(decoded.data, ev.ThreadCreated) and decoded.data.volume == "local"


def test_thread_moved_changes_the_home_and_is_kept_in_the_view():
    state = created_on("node-1")
    apply(state, [ev.ThreadMoved(from_volume="node-1", to_volume="node-3", reason="forgotten", checkpoint_id="ck_1")])
    assert state.thread is not None and state.thread.volume == "node-3"
    view = json.loads(msgspec.json.encode(of_state.thread_view(state)))["thread"]
    assert view["volume"] == "node-3"
    assert [(m["from_volume"], m["to_volume"], m["reason"], m["checkpoint_id"]) for m in view["moves"]] == [
        ("node-1", "node-3", "forgotten", "ck_1")
    ]
    assert "thread.moved" in ev.PAYLOADS
