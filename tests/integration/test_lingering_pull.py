"""runtime/pull.py: a consumer's pull request stays outstanding across deliveries. With partitions every
consumer sees one message at a time, and asking for each one cost a pull round trip per message (the cost of
partitions measured by bench/run.py); a request the server ends is replaced, and what was delivered but not
taken is handed back at close."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from tests.support.helpers import wait_for
from treadle.runtime.pull import LingeringPull


@contextlib.asynccontextmanager
async def pulling(js, **options) -> AsyncIterator[tuple[LingeringPull, str, str]]:
    """A stream, its consumer ``reader`` and a started pull on it (requests that outlast the test)."""
    name, prefix = f"PULL_{uuid.uuid4().hex[:8]}", f"pull{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.>"]))
    await js.add_consumer(name, ConsumerConfig(durable_name="reader", ack_policy=AckPolicy.EXPLICIT))
    pull = LingeringPull(js, name, "reader", expires=60.0, **options)
    await pull.start()
    try:
        yield pull, name, prefix
    finally:
        await pull.close()


async def take_acked(pull: LingeringPull, count: int) -> list[bytes]:
    taken: list[bytes] = []
    while len(taken) < count:
        msgs = await asyncio.wait_for(pull.take(), 10)
        for msg in msgs:
            await msg.ack()
        taken += [m.data for m in msgs]
    return taken


async def test_messages_taken_one_at_a_time_cost_one_pull_request_per_batch_not_per_message(nc):
    js = nc.jetstream()
    requests: list[bytes] = []

    async def count(msg) -> None:
        requests.append(msg.data)

    async with pulling(js, batch=64) as (pull, name, prefix):
        tap = await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{name}.reader", cb=count)
        taken = []
        for i in range(20):
            await js.publish(f"{prefix}.m", str(i).encode())
            taken += await take_acked(pull, 1)
        assert taken == [str(i).encode() for i in range(20)]
        await nc.flush()
        await tap.unsubscribe()
    assert len(requests) == 0  # the one request, sent before the tap listened, is still at work (fetch: 20)


async def test_a_request_used_up_is_renewed_at_once(nc):
    js = nc.jetstream()
    async with pulling(js, batch=4) as (pull, _, prefix):
        for i in range(10):
            await js.publish(f"{prefix}.m", str(i).encode())
        assert await take_acked(pull, 10) == [str(i).encode() for i in range(10)]


async def test_a_request_the_server_ended_is_replaced(nc):
    """The consumer deleted under a waiting request (409): once it is back, deliveries resume."""
    js = nc.jetstream()
    async with pulling(js) as (pull, name, prefix):

        async def waiting() -> bool:  # the server takes requests in asynchronously; one not in yet is lost
            return (await js.consumer_info(name, "reader")).num_waiting == 1

        await wait_for(waiting, timeout=10, interval=0.02, what="the request waiting")
        await js.delete_consumer(name, "reader")
        await js.add_consumer(name, ConsumerConfig(durable_name="reader", ack_policy=AckPolicy.EXPLICIT))
        await js.publish(f"{prefix}.m", b"after")
        assert await take_acked(pull, 1) == [b"after"]


async def test_close_hands_back_what_was_delivered_but_not_taken(nc):
    js = nc.jetstream()
    async with pulling(js) as (pull, name, prefix):
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
