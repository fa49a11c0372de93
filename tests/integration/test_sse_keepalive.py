"""A thread's SSE stream says it is alive while nothing happens (proxies close silent connections), and
an event that comes after a keepalive still arrives."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.errors import Error as NatsError

from treadle.eventlog import streams, subjects
from treadle.gateway import sse
from treadle.ops.servers import NatsServer


async def test_an_idle_stream_sends_keepalives_then_the_next_event(nc, monkeypatch):
    await streams.ensure(nc.jetstream())
    monkeypatch.setattr(sse, "KEEPALIVE", 0.05)
    frames = sse.thread_events(nc, "acme", "thr_quiet", 0)
    try:
        assert await anext(frames) == b": connected\n\n"
        assert await asyncio.wait_for(anext(frames), 5) == b": keepalive\n\n"
        assert await asyncio.wait_for(anext(frames), 5) == b": keepalive\n\n"
        await nc.publish(subjects.live("acme", "thr_quiet"), b'{"text":"hi"}')
        frame = await asyncio.wait_for(anext(frames), 5)
        while frame == b": keepalive\n\n":  # one may fall due between the publish and its delivery
            frame = await asyncio.wait_for(anext(frames), 5)
        assert frame == b'event: live.delta\ndata: {"text":"hi"}\n\n'
    finally:
        await frames.aclose()


async def test_a_stream_the_broker_cannot_open_fails_at_once_and_leaves_no_subscription(tmp_path):
    """No events stream (a broker that lost it, or not yet made): the first frame raises the broker's error, which
    the route answers as a typed 503 before any byte of the stream, and the live subscription made first is gone."""
    server = NatsServer(tmp_path / "nats", auth=False)  # its own: the shared one holds the streams
    await server.start()
    conn = await nats.connect(server.url)
    try:
        frames = sse.thread_events(conn, "acme", "thr_nostream", 0)
        with pytest.raises(NatsError):
            await anext(frames)
        left = [sub.subject for sub in conn._subs.values()]  # nats-py's table of this connection's subscriptions
        assert all(subject.endswith(".*") for subject in left), left  # only its request inbox
    finally:
        await conn.close()
        await server.stop()
