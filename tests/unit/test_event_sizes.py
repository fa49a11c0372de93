"""Issue 17: what a runtime reports or a user steers is bounded so that every event made from it can be stored."""

from __future__ import annotations

import msgspec
import pytest

from tests.unit.domain_helpers import send
from tests.unit.test_L2_3_finalization_barrier_properties import World
from treadle.core import provider_events as pe
from treadle.core.errors import Conflict
from treadle.core.requests.model import FileEdit
from treadle.core.trimming import MAX_EVENT_BYTES, cut, within


def test_an_event_that_fits_is_the_same_object():
    body = pe.ToolCompleted(node_id="node_1", output="ok")
    assert within(body, 1024) is body


def test_a_large_event_keeps_its_type_ids_and_short_fields_and_says_what_was_cut():
    body = pe.RequestOpened(
        request_id="req_" + "a" * 60,
        node_id="node_" + "b" * 59,
        kind="approval",
        prompt="Edit /w/a.txt",
        detail={"deep": [[[[[[[[[[[[[[[[[[["x" * 100_000]]]]]]]]]]]]]]]]]]]},
        files=[FileEdit(path=f"/w/{i}.txt", change="update", diff="+" * 50_000) for i in range(40)],
    )
    small = within(body, 64 * 1024)
    assert isinstance(small, pe.RequestOpened)
    assert len(msgspec.json.encode(small)) <= 64 * 1024
    assert (small.request_id, small.node_id, small.kind, small.prompt) == (
        body.request_id,
        body.node_id,
        "approval",
        "Edit /w/a.txt",
    )
    assert small.files and small.files[0].path == "/w/0.txt" and "more characters not stored]" in small.files[0].diff


def test_cut_says_how_many_characters_were_left_out():
    assert cut("abcdef", 10) == "abcdef"
    assert cut("abcdef", 2) == "ab… [4 more characters not stored]"


def test_L2_3_a_run_ended_with_a_message_streamed_in_pieces_larger_than_one_event_closes_it_cut_down():
    """The pieces each fit; the message they make does not: closing it at the run's end must still fit."""
    world = World("full")
    for n in range(40):
        world.provider(pe.TextDelta(message_id="msg_big", node_id="node_r", text=f"{n:02d}" + "z" * 30_000))
    world.provider(pe.TurnCompleted(status="completed"))
    closed = world.state.messages[-1]
    assert closed.id == "msg_big" and closed.status == "incomplete"
    assert closed.text.startswith("00zz") and closed.text.endswith("more characters not stored]")
    assert len(msgspec.json.encode(closed.text)) <= MAX_EVENT_BYTES


def test_L3_4_steers_a_run_has_not_taken_are_refused_past_one_messages_length_and_auto_queues_instead():
    """The steers a run ended before taking become one superseding run's message: twelve steers of 100,000
    characters made a 4.2 MB event the broker refuses, and the run could never end. A steer past that length
    is refused typed (nothing appended); ``auto`` queues the message behind the run instead."""
    world = World("full")
    run = world.state.active_run
    assert run is not None
    send(world.state, "a" * 60_000, mode="steer_active")
    events_before = len(world.state.messages)
    with pytest.raises(Conflict) as refused:
        send(world.state, "b" * 60_000, mode="steer_active")
    assert refused.value.code == "steers_pending" and len(world.state.messages) == events_before
    _, queued = send(world.state, "c" * 60_000, mode="auto")
    assert queued.disposition == "queued" and queued.run_id != run.id
    world.provider(pe.TurnCompleted(status="completed"))
    superseding = [r for r in world.state.runs if r.supersedes_run_id == run.id]
    assert len(superseding) == 1 and len(msgspec.json.encode(superseding[0])) < MAX_EVENT_BYTES
