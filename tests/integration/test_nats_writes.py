"""Publishes written at the end of the loop turn (eventlog/nats_patches.py, patch 3) on a real broker: the same messages in
the same order as nats-py's flusher sends, back-pressure from a broker that stops reading, and the writes held
over a broker restart."""

from __future__ import annotations

import asyncio
import os
import signal

import nats
import pytest

from tests.support.helpers import wait_for
from treadle.eventlog import nats_patches
from treadle.ops.servers import NatsServer


@pytest.fixture
def turn_end_writes():
    assert nats_patches.install()
    yield
    nats_patches.uninstall()


async def collect(nc, subject: str) -> list[bytes]:
    seen: list[bytes] = []

    async def keep(msg) -> None:
        seen.append(msg.data)

    await nc.subscribe(subject, cb=keep)
    await nc.flush()
    return seen


async def test_publishes_requests_and_replies_keep_their_order(nats_url, turn_end_writes):
    nc = await nats.connect(nats_url)
    try:
        seen = await collect(nc, "writes.order")

        async def answer(msg) -> None:
            await msg.respond(b"ok:" + msg.data)

        await nc.subscribe("writes.ask", cb=answer)
        for i in range(3000):
            await nc.publish("writes.order", str(i).encode())
            if i % 7 == 0:
                await asyncio.sleep(0)  # some turns end after one publish, others after several
            if i % 100 == 0:
                assert (await nc.request("writes.ask", str(i).encode(), timeout=5)).data == f"ok:{i}".encode()
        await nc.flush()
        await wait_for(lambda: len(seen) == 3000, what="every publish delivered")
        assert seen == [str(i).encode() for i in range(3000)]
    finally:
        await nc.close()


async def test_a_broker_that_stops_reading_holds_the_writes_in_the_pending_buffer(tmp_path, turn_end_writes):
    """The socket's buffers fill, then the transport's up to HIGH_WATER, then nats-py's pending buffer, where a
    publish waits: memory stays bounded. Once the broker reads again, every message arrives in order."""
    payload = b"x" * 1000
    count = 20_000  # 20 MB: more than loopback's socket buffers, the high-water mark and the pending buffer
    async with NatsServer(tmp_path / "nats") as server:
        receiver = await nats.connect(server.url)
        nc = await nats.connect(server.url, pending_size=512 * 1024)
        try:
            seen = await collect(receiver, "writes.held")
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)
            try:

                async def publish_all() -> None:
                    for i in range(count):
                        await nc.publish("writes.held", b"%d:" % i + payload)
                        await asyncio.sleep(0)  # a worker's case: one write per loop turn

                publishing = asyncio.create_task(publish_all())
                await wait_for(
                    lambda: nats_patches.pending_bytes(nc) > 256 * 1024,
                    timeout=60,
                    what="writes held in the pending buffer",
                )
                unsent = nats_patches.unsent_bytes(nc)
                assert unsent <= nats_patches.HIGH_WATER + 64 * 1024, unsent
                assert not publishing.done()
            finally:
                os.kill(server.pid, signal.SIGCONT)
            await publishing
            await nc.flush()
            await wait_for(lambda: len(seen) == count, timeout=60, what="every held message delivered")
            assert [m.split(b":", 1)[0] for m in seen] == [b"%d" % i for i in range(count)]
        finally:
            await nc.close()
            await receiver.close()


async def test_writes_queued_while_the_broker_restarts_go_out_after_the_reconnect(tmp_path, turn_end_writes):
    async with NatsServer(tmp_path / "nats") as server:
        nc = await nats.connect(server.url, reconnect_time_wait=0.05, max_reconnect_attempts=-1)
        try:
            seen = await collect(nc, "writes.later")  # resubscribed on reconnect, before the pending writes go
            await server.stop()
            await wait_for(lambda: nc.is_reconnecting, what="client reconnecting")
            for i in range(10):
                await nc.publish("writes.later", str(i).encode())  # held in the pending buffer meanwhile
            await server.start()
            await wait_for(lambda: nc.is_connected, timeout=30, what="client reconnected")
            await wait_for(lambda: len(seen) == 10, what="every held write delivered")  # a PONG may come first
            assert seen == [str(i).encode() for i in range(10)]
        finally:
            await nc.close()
