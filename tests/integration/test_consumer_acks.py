"""runtime/acks.py: a consumer's acks wait in the connection's buffer for its next write (or a short window)
instead of a socket write each, and still land: with the next publish, when the window ends, and at stop()."""

from __future__ import annotations

import uuid

import nats
import pytest
from nats.errors import ConnectionClosedError, MsgAlreadyAckdError
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from tests.support.helpers import wait_for
from treadle.runtime.acks import Acks
from treadle.runtime.consumer import PullConsumer


async def _stream(js) -> tuple[str, str]:
    name, prefix = f"ACKS_{uuid.uuid4().hex[:8]}", f"acks{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"]))
    return name, prefix


async def _settled(js, stream: str, durable: str) -> bool:
    info = await js.consumer_info(stream, durable)
    return info.num_pending == 0 and info.num_ack_pending == 0


async def test_an_ack_held_for_its_window_goes_out_with_the_connections_next_write(nc, nats_url):
    js = nc.jetstream()
    name, prefix = await _stream(js)
    await js.add_consumer(name, ConsumerConfig(durable_name="r", ack_policy=AckPolicy.EXPLICIT))
    await js.publish(f"{prefix}.a", b"1")
    [msg] = await (await js.pull_subscribe_bind("r", name)).fetch(1)
    acks = Acks(nc, window=600)  # nothing but the next write can carry it within the test
    await acks.ack(msg)
    assert msg.is_acked
    with pytest.raises(MsgAlreadyAckdError):
        await acks.ack(msg)  # as msg.ack() refuses a second terminal ack
    await nc.publish(f"elsewhere.{prefix}", b"")  # any write of this connection
    observer = await nats.connect(nats_url)
    try:
        await wait_for(lambda: _settled(observer.jetstream(), name, "r"), timeout=5, what="the ack to land")
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
            await js.publish(f"{prefix}.t.th{i % 3}.x", str(i).encode())
            await wait_for(lambda i=i: len(handled) > i, timeout=5, what=f"message {i} handled")
        await consumer.stop()
        await wait_for(lambda: _settled(observer.jetstream(), name, "one"), timeout=5, what="every ack to land")
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
