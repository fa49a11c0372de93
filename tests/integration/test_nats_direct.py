"""Subscriptions handled by the read loop (eventlog/nats_patches.py, patch 4) on a real broker: order, a handler that
raises, unsubscribe and drain, and ``request`` replies after a reconnect; requests (patch 8) end as nats-py's do."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from tests.support.helpers import wait_for
from treadle.eventlog import nats_patches
from treadle.ops.servers import NatsServer


@pytest.fixture
def direct_requests():
    assert nats_patches.install()
    yield
    nats_patches.uninstall()


async def test_messages_reach_the_handler_in_order_and_a_failing_handler_drops_only_its_message(nats_url, caplog):
    nc = await nats.connect(nats_url)
    try:
        seen: list[bytes] = []

        def keep(msg) -> None:
            if msg.data == b"13":
                raise ValueError("unlucky")
            seen.append(msg.data)

        sub = await nats_patches.subscribe(nc, "direct.order", keep)
        for i in range(2000):
            await nc.publish("direct.order", str(i).encode())
        await nc.flush()
        await wait_for(lambda: len(seen) == 1999, what="every message handled")
        assert seen == [str(i).encode() for i in range(2000) if i != 13]
        assert "handler of direct.order failed" in caplog.text
        assert sub.pending_msgs == 0 and sub.pending_bytes == 0  # nothing counted as waiting: no slow consumer

        await sub.unsubscribe()
        await nc.publish("direct.order", b"after")
        await nc.flush()
        assert seen[-1] == b"1999"
    finally:
        await nc.close()


async def test_a_drained_subscription_ends_and_handles_nothing_after(nats_url):
    nc = await nats.connect(nats_url)
    try:
        seen: list[bytes] = []
        sub = await nats_patches.subscribe(nc, "direct.drain", lambda msg: seen.append(msg.data))
        for i in range(100):
            await nc.publish("direct.drain", str(i).encode())
        await nc.flush()
        await wait_for(lambda: len(seen) == 100, what="every message handled")
        await sub.drain()  # waits on the stand-in queue's join (nothing is ever waiting in it)
        assert seen == [str(i).encode() for i in range(100)]
        await nc.publish("direct.drain", b"after")
        await nc.flush()
        assert len(seen) == 100
    finally:
        await nc.close()


async def test_requests_take_their_replies_from_the_read_loop_across_a_broker_restart(tmp_path, direct_requests):
    async with NatsServer(tmp_path / "nats") as server:
        nc = await nats.connect(server.url, reconnect_time_wait=0.05, max_reconnect_attempts=-1)
        try:

            async def answer(msg) -> None:
                await msg.respond(b"re:" + msg.data)

            await nc.subscribe("direct.ask", cb=answer)
            assert [(await nc.request("direct.ask", b"%d" % i, timeout=5)).data for i in range(50)] == [
                b"re:%d" % i for i in range(50)
            ]
            mux = nats_patches.request_subscription(nc)
            assert mux is not None and nats_patches.is_direct(mux)

            await server.stop()
            await wait_for(lambda: nc.is_reconnecting, what="client reconnecting")
            await server.start()
            await wait_for(lambda: nc.is_connected, timeout=30, what="client reconnected")
            assert (await nc.request("direct.ask", b"again", timeout=5)).data == b"re:again"
        finally:
            await nc.close()


async def test_requests_time_out_fail_without_responders_and_forget_what_they_gave_up(nats_url, direct_requests):
    """Patch 8: a request's own timer, not ``asyncio.wait_for``, ends it as nats-py's would, and every way out
    (an answer, a timeout, no responders, a cancel) leaves nothing waiting behind."""
    nc = await nats.connect(nats_url)
    try:
        held: list = []

        async def answer(msg) -> None:
            if msg.data == b"never":
                held.append(msg)  # kept unanswered: the request times out
                return
            await msg.respond(b"re:" + msg.data)

        await nc.subscribe("direct.slow", cb=answer)
        asked = [nc.request("direct.slow", b"%d" % i, timeout=5) for i in range(200)]
        assert [m.data for m in await asyncio.gather(*asked)] == [b"re:%d" % i for i in range(200)]
        with pytest.raises(NatsTimeout):
            await nc.request("direct.slow", b"never", timeout=0.2)
        with pytest.raises(NoRespondersError):
            await nc.request("direct.nobody", b"x", timeout=5)
        waiting = asyncio.ensure_future(nc.request("direct.slow", b"never", timeout=5))
        await wait_for(lambda: len(held) == 2, what="the second unanswered request arrived")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await held[0].respond(b"late")  # an answer after its request gave up is dropped
        assert (await nc.request("direct.slow", b"after", timeout=5)).data == b"re:after"
        assert nc._resp_map == {}
    finally:
        await nc.close()


async def test_a_subscription_made_direct_takes_what_was_queued_first_in_order(nats_url):
    """``make_direct`` on a callback subscription (the SSE stream's ordered consumer): messages already queued for
    its task reach the handler before any later one, and the task takes nothing more."""
    nc = await nats.connect(nats_url)
    try:
        release = asyncio.Event()
        by_task: list[bytes] = []
        direct: list[bytes] = []

        async def slow(msg) -> None:
            by_task.append(msg.data)
            await release.wait()

        sub = await nc.subscribe("direct.late", cb=slow)
        for i in range(100):
            await nc.publish("direct.late", b"%d" % i)
        await nc.flush()
        await wait_for(lambda: sub._pending_queue.qsize() == 99, what="the task holding 0, the rest queued")
        nats_patches.make_direct(sub, lambda msg: direct.append(msg.data))
        for i in range(100, 200):
            await nc.publish("direct.late", b"%d" % i)
        await nc.flush()
        await wait_for(lambda: len(direct) == 199, what="every later message handled")
        release.set()
        await nc.flush()  # a round trip: the task has ended its callback and found its old queue empty
        assert by_task == [b"0"]
        assert direct == [b"%d" % i for i in range(1, 200)]
        assert sub.pending_msgs == 0 and sub.pending_bytes == 0
    finally:
        await nc.close()
