"""Deferred acks (eventlog/nats_patches.py, patch 5): a consumer's acks wait in the connection's buffer for its next write (or a short window)
instead of a socket write each, and still land: with the next publish, when the window ends, and at stop()."""

from __future__ import annotations

import asyncio
import uuid

import nats
import pytest
from nats.errors import ConnectionClosedError, MsgAlreadyAckdError
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from tests.support.helpers import wait_for
from treadle.eventlog.nats_patches import Acks
from treadle.runtime.consumer import PullConsumer
from treadle.runtime.mailbox import Mailboxes


async def _stream(js) -> tuple[str, str]:
    name, prefix = f"ACKS_{uuid.uuid4().hex[:8]}", f"acks{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"]))
    return name, prefix


async def _settled(js, stream: str, durable: str, last: int) -> bool:
    """Every message up to stream sequence ``last`` acknowledged. Not "nothing pending": the broker counts a new
    message towards a consumer's pending after it has answered the publish (a signal queue of its own), so for a
    moment just after the publish the consumer looks settled without having seen the message."""
    info = await js.consumer_info(stream, durable)
    return info.ack_floor.stream_seq >= last and info.num_ack_pending == 0


async def test_an_ack_held_for_its_window_goes_out_with_the_connections_next_write(nc, nats_url):
    js = nc.jetstream()
    name, prefix = await _stream(js)
    await js.add_consumer(name, ConsumerConfig(durable_name="r", ack_policy=AckPolicy.EXPLICIT))
    sent = await js.publish(f"{prefix}.a", b"1")
    [msg] = await (await js.pull_subscribe_bind("r", name)).fetch(1)
    acks = Acks(nc, window=600)  # nothing but the next write can carry it within the test
    await acks.ack(msg)
    assert msg.is_acked
    with pytest.raises(MsgAlreadyAckdError):
        await acks.ack(msg)  # as msg.ack() refuses a second terminal ack
    await nc.publish(f"elsewhere.{prefix}", b"")  # any write of this connection
    observer = await nats.connect(nats_url)
    try:
        await wait_for(lambda: _settled(observer.jetstream(), name, "r", sent.seq), timeout=5, what="the ack to land")
    finally:
        await observer.close()
        acks.flush()


async def test_acks_of_messages_handled_one_at_a_time_all_land_and_stop_sends_the_last_at_once(nc, nats_url):
    js = nc.jetstream()
    name, prefix = await _stream(js)
    handled: list[bytes] = []

    async def handle(msg) -> None:
        handled.append(msg.data)

    consumer = PullConsumer(js, stream=name, durable="one", filters=[f"{prefix}.>"], handle=handle)
    consumer._acks = Acks(nc, window=600)  # only writes and stop() can carry them
    await consumer.start()
    observer = await nats.connect(nats_url)
    try:
        for i in range(20):
            sent = await js.publish(f"{prefix}.t.th{i % 3}.x", str(i).encode())
            await wait_for(lambda i=i: len(handled) > i, timeout=5, what=f"message {i} handled")
        await consumer.stop()
        await wait_for(
            lambda: _settled(observer.jetstream(), name, "one", sent.seq), timeout=5, what="every ack to land"
        )
    finally:
        await observer.close()
    assert handled == [str(i).encode() for i in range(20)]


async def test_an_ack_on_a_closed_connection_fails_as_msg_ack_does(nats_url):
    conn = await nats.connect(nats_url)
    js = conn.jetstream()
    name, prefix = await _stream(js)
    await js.add_consumer(name, ConsumerConfig(durable_name="r", ack_policy=AckPolicy.EXPLICIT))
    await js.publish(f"{prefix}.a", b"1")
    [msg] = await (await js.pull_subscribe_bind("r", name)).fetch(1)
    await conn.close()
    with pytest.raises(ConnectionClosedError):
        await Acks(conn).ack(msg)
    assert not msg.is_acked


async def test_a_handler_working_past_ack_wait_keeps_its_message_from_being_redelivered(nc):
    """The consumer tells the broker a message is still in progress while its handler works (every ack_wait/3
    or so), so a slow handler is not handed the same message again, nor is anyone else."""
    js = nc.jetstream()
    name, prefix = await _stream(js)
    deliveries: list[int] = []
    loop = asyncio.get_running_loop()

    async def handle(msg) -> None:
        deliveries.append(msg.metadata.num_delivered)
        if len(deliveries) == 1:  # working for 2.5 ack_waits: without in_progress the broker redelivers twice
            end = loop.time() + 2.5
            await wait_for(lambda: loop.time() >= end, timeout=10, interval=0.1, what="the handler's work")

    consumer = PullConsumer(js, stream=name, durable="slow", filters=[f"{prefix}.>"], handle=handle, ack_wait=1.0)
    await consumer.start()
    try:
        sent = await js.publish(f"{prefix}.t.th1.x", b"{}")
        await wait_for(
            lambda: _settled(js, name, "slow", sent.seq), timeout=15, interval=0.1, what="the message settled"
        )
    finally:
        await consumer.stop()
    assert deliveries == [1]


async def test_stop_cuts_a_late_handler_short_hands_its_message_on_and_its_thread_goes_on_with_other_work(nc):
    """stop() waits for a handler up to its timeout, then cancels it: its message is given back at once (not
    after ack_wait), and the thread's mailbox, which other work shares, carries on with that work."""
    js = nc.jetstream()
    name, prefix = await _stream(js)
    mailboxes = Mailboxes()
    started, cancelled, after = asyncio.Event(), [], []

    async def stuck(msg) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only stop() ends it
        except asyncio.CancelledError:
            cancelled.append(msg.subject)
            raise

    async def other_work() -> None:
        after.append("done")

    consumer = PullConsumer(
        js, stream=name, durable="cut", filters=[f"{prefix}.>"], handle=stuck, mailboxes=mailboxes, ack_wait=30
    )
    await consumer.start()
    await js.publish(f"{prefix}.t.th1.x", b"{}")
    await asyncio.wait_for(started.wait(), 10)
    mailboxes.submit("t.th1", other_work)  # queued behind the stuck handler on the same thread
    await consumer.stop(timeout=0.2)
    assert cancelled == [f"{prefix}.t.th1.x"]
    await mailboxes.drain(5)
    assert after == ["done"]

    handled: list[int] = []

    async def owner(msg) -> None:
        handled.append(msg.metadata.num_delivered)

    successor = PullConsumer(js, stream=name, durable="cut", filters=[f"{prefix}.>"], handle=owner, ack_wait=30)
    await successor.start()
    try:
        await wait_for(lambda: handled == [2], timeout=10, what="the message handed on (nak, not ack_wait)")
    finally:
        await successor.stop()


async def test_cancelling_the_mailboxes_cancels_the_handler_at_work(nc):
    js = nc.jetstream()
    name, prefix = await _stream(js)
    mailboxes = Mailboxes()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def stuck(msg) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    consumer = PullConsumer(js, stream=name, durable="c", filters=[f"{prefix}.>"], handle=stuck, mailboxes=mailboxes)
    await consumer.start()
    try:
        await js.publish(f"{prefix}.t.th1.x", b"{}")
        await asyncio.wait_for(started.wait(), 10)
        await mailboxes.cancel()
        await asyncio.wait_for(cancelled.wait(), 5)
    finally:
        await consumer.stop(timeout=1)
