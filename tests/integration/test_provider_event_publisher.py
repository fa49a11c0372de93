"""Issue 6 (chaos seed 2): a provider host's turn publisher keeps retrying a provider event while the broker
is away (the event must not be lost), but not once the host's own connection is closed: that connection never
comes back, and retrying on it forever kept a stopping host from ever exiting."""

from __future__ import annotations

import asyncio

import msgspec
import nats
import pytest
from nats.errors import ConnectionClosedError

from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.eventlog import streams, subjects
from treadle.eventlog.errors import Unavailable
from treadle.eventlog.log import acked_publish
from treadle.provider_host.publisher import TurnPublisher


async def test_a_turn_publisher_on_a_closed_connection_gives_up_instead_of_retrying(nats_url, nc):
    await streams.ensure(nc.jetstream())
    host_nc = await nats.connect(nats_url, name="provider-host-under-test")
    publisher = TurnPublisher(
        host_nc,
        tenant="acme",
        thread="thr_closed",
        session_id="ps_1",
        provider_thread_id="pth_1",
        run_id="run_1",
        attempt_id="att_1",
        ids=IdFactory("att_1", 0),
    )
    await publisher.event(pe.TurnStarted(native_turn_ref="turn-1"))
    await publisher.drain()  # stored while the connection is open
    await host_nc.close()
    with pytest.raises(ConnectionClosedError):
        await asyncio.wait_for(publisher.event(pe.TurnCompleted(status="completed")), 10)
    publisher.close()


def _publisher(nc, name: str, n: int) -> TurnPublisher:
    """A turn's publisher on thread ``thr_<name>``, with event ids of its own (the stream deduplicates by them)."""
    return TurnPublisher(
        nc,
        tenant="acme",
        thread=f"thr_{name}",
        session_id="ps_1",
        provider_thread_id=f"pth_{name}",
        run_id=f"run_{n}",
        attempt_id=f"att_{n}",
        ids=IdFactory(f"att_{n}", 0),
    )


async def _stored_parts(js, thread: str) -> list[pe.Body]:
    sub = await js.subscribe(f"treadle.prov.acme.{thread}.>", ordered_consumer=True)
    stored: list[pe.Body] = []
    while not stored or not isinstance(stored[-1], pe.TurnCompleted):
        msg = await sub.next_msg(timeout=10)
        stored += [part.body for part in pe.provider_event_decoder.decode(msg.data).parts()]
    await sub.unsubscribe()
    return stored


async def test_a_message_cut_off_by_a_steer_is_stored_before_the_reply_that_completed_after_it(nc):
    """Issue 25: a message begun and cut off (a steer) and the reply that followed within the coalescing
    interval are stored in the order they happened, so the thread lists the cut-off message first."""
    js = nc.jetstream()
    await streams.ensure(js)
    publisher = _publisher(nc, "order", 2)
    await publisher.text("msg_cut", "node_r", "Drafting")  # begun, never completed: the steer cut it off
    await publisher.text("msg_reply", "node_r", "Short notes.")
    await publisher.text_done("msg_reply", "node_r", "Short notes.")
    await publisher.event(pe.TurnCompleted(status="completed"))
    publisher.close()
    stored = await _stored_parts(js, "thr_order")
    firsts = [b.message_id for b in stored if isinstance(b, (pe.TextDelta, pe.TextCompleted))]
    assert firsts[0] == "msg_cut", stored
    assert "".join(b.text for b in stored if isinstance(b, pe.TextDelta) and b.message_id == "msg_cut") == "Drafting"


async def test_L2_3_events_larger_than_the_broker_takes_are_stored_cut_down_and_a_huge_text_chunk_whole(nc):
    """Issue 17: a runtime's report larger than a broker message (a command's 3 MB output, a 2 MB file a tool
    writes, a 2 MB reply) was retried for ever by the publisher, holding its run. Each is now stored cut down
    to fit, saying what was cut; raw text is published in pieces, so none of a streamed reply is lost."""
    js = nc.jetstream()
    await streams.ensure(js)
    publisher = _publisher(nc, "huge", 3)
    huge_input = {"file_path": "/w/big.txt", "content": "x" * 2_000_000, "lines": ["y" * 10] * 200_000}
    reply = "".join(f"word{i} " for i in range(300_000))  # 2.3 MB in one raw chunk
    sent = [
        pe.ToolStarted(node_id="node_w", title="Write", input=huge_input),
        pe.ToolCompleted(node_id="node_w", output="\u001f" * 3_000_000),  # 6 bytes of JSON per character
        pe.TextCompleted(message_id="msg_q", node_id="node_r", text=reply),
    ]
    for body in sent:
        await asyncio.wait_for(publisher.event(body), 10)
    await asyncio.wait_for(publisher.text("msg_r", "node_r", reply), 20)
    await asyncio.wait_for(publisher.event(pe.TurnCompleted(status="completed")), 10)
    publisher.close()
    sub = await js.subscribe("treadle.prov.acme.thr_huge.>", ordered_consumer=True)
    stored, sizes = [], []
    while not stored or not isinstance(stored[-1], pe.TurnCompleted):
        msg = await sub.next_msg(timeout=10)
        sizes.append(len(msg.data))
        stored += [part.body for part in pe.provider_event_decoder.decode(msg.data).parts()]
    await sub.unsubscribe()
    assert max(sizes) <= nc.max_payload // 4 + 1024, sizes  # the body's budget and the event's own fields
    started, completed, whole = stored[0], stored[1], stored[2]
    assert isinstance(started, pe.ToolStarted) and started.input is not None
    assert started.input["file_path"] == "/w/big.txt" and "more characters not stored]" in started.input["content"]
    assert isinstance(completed, pe.ToolCompleted) and completed.output is not None
    assert completed.output.startswith("\u001f") and "more characters not stored]" in completed.output
    assert isinstance(whole, pe.TextCompleted) and whole.text.startswith("word0 word1 ")
    streamed = "".join(b.text for b in stored if isinstance(b, pe.TextDelta) and b.message_id == "msg_r")
    assert streamed == reply


async def test_L2_2_a_burst_goes_as_one_live_message_and_one_provider_message_in_order(nc):
    """Issue 24: every raw chunk was one live message (a scripted reply: nine) and every event one provider
    message. What is handed over in one burst now goes as one live message per message and one provider
    message (numbered as if sent alone), live text always before the durable event that completes it."""
    js = nc.jetstream()
    await streams.ensure(js)
    seen: list[tuple[str, bytes]] = []
    done = asyncio.Event()

    async def on_msg(msg) -> None:  # one subscription for both, so they are seen in the order they were sent
        if msg.subject.split(".")[3] == "thr_burst":
            seen.append((msg.subject.split(".")[1], msg.data))
            if b'"turn.completed"' in msg.data:
                done.set()

    tap = await nc.subscribe("treadle.*.acme.>", cb=on_msg)
    publisher = _publisher(nc, "burst", 4)
    chunks = ["Sc", "ripted ", "reply ", "in ", "pieces"]
    await publisher.event(pe.TurnStarted(native_turn_ref="t-1"))
    for chunk in chunks:
        await publisher.text("msg_a", "node_r", chunk)
    await publisher.text("msg_b", "node_r", "next")
    await publisher.text_done("msg_a", "node_r", "".join(chunks))
    await publisher.event(pe.TurnCompleted(status="completed"))
    publisher.close()
    await asyncio.wait_for(done.wait(), 10)
    await tap.unsubscribe()
    lives = [msgspec.json.decode(data) for kind, data in seen if kind == "live"]
    assert [(d["message_id"], d["text"]) for d in lives] == [("msg_a", "".join(chunks)), ("msg_b", "next")]
    stored = [pe.provider_event_decoder.decode(data) for kind, data in seen if kind == "prov"]
    assert len(stored) == 1, stored  # the whole burst, turn end included
    parts = stored[0].parts()
    assert [type(p.body).__name__ for p in parts] == [
        "TurnStarted", "TextDelta", "TextDelta", "TextCompleted", "TurnCompleted"
    ]  # fmt: skip
    assert [p.index for p in parts] == [1, 2, 3, 4, 5] and len({p.id for p in parts}) == 5
    assert seen[-1][0] == "prov" and all(kind == "live" for kind, _ in seen[:-1])


async def test_L2_2_a_reply_completed_within_its_burst_is_stored_as_its_completion_alone(nc):
    """Issue 24: a reply whose text and completion were handed over together was stored as a delta and a
    completion carrying the same text (two appends per reply). The completion now takes the place of the
    unsent deltas that end the outbox; deltas followed by another event stay, so nothing is seen after a
    message's completion that happened before it."""
    js = nc.jetstream()
    await streams.ensure(js)
    publisher = _publisher(nc, "whole", 5)
    await publisher.event(pe.TurnStarted(native_turn_ref="t-1"))
    await publisher.text("msg_a", "node_r", "Hello ")
    await publisher.text("msg_a", "node_r", "world")
    await publisher.text_done("msg_a", "node_r", "Hello world")
    await publisher.text("msg_b", "node_r", "Running")
    await publisher.event(pe.ToolStarted(node_id="node_t", kind="command", title="ls"))
    await publisher.text_done("msg_b", "node_r", "Running it")
    await publisher.event(pe.TurnCompleted(status="completed"))
    publisher.close()
    stored = await _stored_parts(js, "thr_whole")
    assert [(type(b).__name__, getattr(b, "text", None)) for b in stored] == [
        ("TurnStarted", None),
        ("TextCompleted", "Hello world"),
        ("TextDelta", "Running"),
        ("ToolStarted", None),
        ("TextCompleted", "Running it"),
        ("TurnCompleted", None),
    ]


async def test_L2_2_a_turn_over_within_a_few_loop_turns_of_its_start_is_one_provider_message(nc):
    """A runtime that reports its turn's end a few loop turns after the start (the scripted runtime: its play is a
    task of its own) has the start held for it: one provider message, so the supervisor appends one event."""
    js = nc.jetstream()
    await streams.ensure(js)
    publisher = _publisher(nc, "atonce", 6)
    await publisher.event(pe.TurnStarted(native_turn_ref="t-1"))
    for _ in range(3):  # the runtime's own hand-overs (its play task, its end), no waiting for anything
        await asyncio.sleep(0)
    await publisher.text_done("msg_a", "node_r", "Hello")
    await publisher.event(pe.TurnCompleted(status="completed"))
    publisher.close()
    sub = await js.subscribe("treadle.prov.acme.thr_atonce.>", ordered_consumer=True)
    stored = pe.provider_event_decoder.decode((await sub.next_msg(timeout=10)).data)
    await sub.unsubscribe()
    assert [type(p.body).__name__ for p in stored.parts()] == ["TurnStarted", "TextCompleted", "TurnCompleted"]


async def test_L2_2_a_turn_start_followed_by_a_wait_is_stored_alone_once_its_hold_ends(nc):
    """A runtime that reports nothing within the start's hold (a slow model): the start is stored alone once the
    hold ends (users see the run running), and what follows goes in a message of its own."""
    js = nc.jetstream()
    await streams.ensure(js)
    sub = await js.subscribe("treadle.prov.acme.thr_waits.>", ordered_consumer=True)
    publisher = _publisher(nc, "waits", 7)
    await publisher.event(pe.TurnStarted(native_turn_ref="t-1"))
    first = pe.provider_event_decoder.decode((await sub.next_msg(timeout=10)).data)  # nothing else reported yet
    assert [type(p.body).__name__ for p in first.parts()] == ["TurnStarted"]
    await publisher.text_done("msg_a", "node_r", "Hello")
    await publisher.event(pe.TurnCompleted(status="completed"))
    publisher.close()
    second = pe.provider_event_decoder.decode((await sub.next_msg(timeout=10)).data)
    await sub.unsubscribe()
    assert [(type(p.body).__name__, p.index) for p in second.parts()] == [("TextCompleted", 2), ("TurnCompleted", 3)]


async def test_L2_2_an_opened_message_completed_just_before_the_turn_end_is_stored_with_the_end(nc):
    """Issue 38: a turn's last message completes a few ms before the turn's end (Codex, Claude Code); sent alone,
    the completion cost a provider message and a durable event of its own. Its message opened by a stored delta,
    the completion waits for the next report: the turn's end, stored with it (one ``run.completed`` carrying
    the message). With nothing after it, it is stored once the hold ends, the turn still playing."""
    js = nc.jetstream()
    await streams.ensure(js)
    sub = await js.subscribe("treadle.prov.acme.thr_held.>", ordered_consumer=True)
    publisher = _publisher(nc, "held", 8)
    await publisher.text("msg_a", "node_r", "Hello")  # the first text is stored at once: the message is opened
    opened = pe.provider_event_decoder.decode((await sub.next_msg(timeout=10)).data)
    assert [type(p.body).__name__ for p in opened.parts()] == ["TextDelta"]
    await publisher.text_done("msg_a", "node_r", "Hello world")
    await nc.flush()  # a broker round trip between the completion and the end: it was sent alone by then
    await publisher.event(pe.TurnCompleted(status="completed"))
    ended = pe.provider_event_decoder.decode((await sub.next_msg(timeout=10)).data)
    assert [(type(p.body).__name__, p.index) for p in ended.parts()] == [("TextCompleted", 2), ("TurnCompleted", 3)]
    publisher.close()

    later = _publisher(nc, "held", 9)
    await later.text("msg_b", "node_r", "Thinking")
    await sub.next_msg(timeout=10)
    await later.text_done("msg_b", "node_r", "Thinking aloud")  # then nothing: the runtime waits for something
    alone = pe.provider_event_decoder.decode((await sub.next_msg(timeout=10)).data)
    assert [type(p.body).__name__ for p in alone.parts()] == ["TextCompleted"]
    await later.event(pe.TurnCompleted(status="completed"))
    later.close()
    await sub.unsubscribe()


async def test_L2_2_a_turn_start_and_its_first_text_within_the_hold_are_one_provider_message(nc):
    """Issue 38: a turn's start waits for the first output (a model's first text, ms later with a fast model): one
    provider message, so the supervisor appends the text's ``message.delta`` carrying the run's start."""
    js = nc.jetstream()
    await streams.ensure(js)
    sub = await js.subscribe("treadle.prov.acme.thr_first.>", ordered_consumer=True)
    publisher = _publisher(nc, "first", 10)
    await publisher.event(pe.TurnStarted(native_turn_ref="t-1"))
    await nc.flush()  # a broker round trip before the first text: the start went alone by then
    await publisher.text("msg_a", "node_r", "Hel")
    first = pe.provider_event_decoder.decode((await sub.next_msg(timeout=10)).data)
    assert [(type(p.body).__name__, p.index) for p in first.parts()] == [("TurnStarted", 1), ("TextDelta", 2)]
    await publisher.text_done("msg_a", "node_r", "Hello")
    await publisher.event(pe.TurnCompleted(status="completed"))
    publisher.close()
    await sub.unsubscribe()


async def test_an_acked_publish_gives_the_stored_sequence_once_and_fails_typed_without_a_stream(nc):
    """``acked_publish`` (the turn publisher's store): the sequence a message was stored at, the same one for a
    resend of its Msg-Id, and ``Unavailable`` for a subject no stream takes."""
    await streams.ensure(nc.jetstream())
    subject = subjects.provider("acme", "thr_acked", "pth_1")
    first = await acked_publish(nc, subject, b"{}", {"Nats-Msg-Id": "evt_acked_1"})
    again = await acked_publish(nc, subject, b"{}", {"Nats-Msg-Id": "evt_acked_1"})
    other = await acked_publish(nc, subject, b"{}", {"Nats-Msg-Id": "evt_acked_2"})
    assert first == again and other == first + 1
    stored = await nc.jetstream().get_msg(subjects.PROVIDER_STREAM, first)
    assert stored.subject is not None and stored.subject.startswith(subject + ".")  # its partition token added
    with pytest.raises(Unavailable):
        await acked_publish(nc, "nobody.stores.this", b"{}", {"Nats-Msg-Id": "evt_acked_3"})
