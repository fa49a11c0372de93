"""runtime/pull.py: a consumer's pull request stays outstanding across deliveries. With partitions every
consumer sees one message at a time, and asking for each one cost a pull round trip per message (the cost of
partitions measured by bench/run.py); a request the server ends is replaced, and what was delivered but not
taken is handed back at close."""

from __future__ import annotations

import asyncio
import uuid

from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from helpers import wait_for
from treadle.runtime.pull import LingeringPull


async def _stream(js) -> tuple[str, str]:
    name, prefix = f"PULL_{uuid.uuid4().hex[:8]}", f"pull{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"]))
    await js.add_consumer(name, ConsumerConfig(durable_name="reader", ack_policy=AckPolicy.EXPLICIT))
    return name, prefix


async def test_messages_taken_one_at_a_time_cost_one_pull_request_per_batch_not_per_message(nc):
    js = nc.jetstream()
    name, prefix = await _stream(js)
    requests: list[bytes] = []

    async def count(msg) -> None:
        requests.append(msg.data)

    tap = await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{name}.reader", cb=count)
    pull = LingeringPull(js, name, "reader", batch=64, expires=60.0)
    await pull.start()
    try:
        taken = []
        for i in range(20):
            await js.publish(f"{prefix}.m", str(i).encode())
            msgs = await asyncio.wait_for(pull.take(), 10)
            for msg in msgs:
                await msg.ack()
            taken += [m.data.decode() for m in msgs]
        assert taken == [str(i) for i in range(20)]
        await nc.flush()
        assert len(requests) == 1  # fetching each message asked 20 times
    finally:
        await pull.close()
        await tap.unsubscribe()


async def test_a_request_used_up_is_renewed_at_once(nc):
    js = nc.jetstream()
    name, prefix = await _stream(js)
    pull = LingeringPull(js, name, "reader", batch=4, expires=60.0)
    await pull.start()
    try:
        for i in range(10):
            await js.publish(f"{prefix}.m", str(i).encode())
        taken: list[str] = []
        while len(taken) < 10:
            msgs = await asyncio.wait_for(pull.take(), 10)
            taken += [m.data.decode() for m in msgs]
            for msg in msgs:
                await msg.ack()
        assert taken == [str(i) for i in range(10)]
    finally:
        await pull.close()


async def test_a_request_the_server_ended_is_replaced(nc):
    """The consumer deleted under a waiting request (409): once it is back, deliveries resume."""
    js = nc.jetstream()
    name, prefix = await _stream(js)
    pull = LingeringPull(js, name, "reader", expires=60.0)
    await pull.start()
    try:
        await js.delete_consumer(name, "reader")
        await js.add_consumer(name, ConsumerConfig(durable_name="reader", ack_policy=AckPolicy.EXPLICIT))
        await js.publish(f"{prefix}.m", b"after")
        msgs = await asyncio.wait_for(pull.take(), 10)
        assert [m.data for m in msgs] == [b"after"]
    finally:
        await pull.close()


async def test_close_hands_back_what_was_delivered_but_not_taken(nc):
    js = nc.jetstream()
    name, prefix = await _stream(js)
    pull = LingeringPull(js, name, "reader", expires=60.0)
    await pull.start()
    for i in range(3):
        await js.publish(f"{prefix}.m", str(i).encode())

    async def delivered() -> bool:
        return (await js.consumer_info(name, "reader")).num_ack_pending == 3
    await wait_for(delivered, timeout=10, interval=0.05, what="three deliveries")
    left = await pull.close()
    assert [m.data for m in left] == [b"0", b"1", b"2"]
    await js.publish(f"{prefix}.m", b"3")
    info = await js.consumer_info(name, "reader")
    # the request ended with the interest: nothing more was delivered into the closed inbox
    assert (info.num_waiting, info.num_ack_pending, info.num_pending) == (0, 3, 1)
