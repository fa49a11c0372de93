"""A thread's SSE stream says it is alive while nothing happens (proxies close silent connections), and
an event that comes after a keepalive still arrives."""

from __future__ import annotations

import asyncio

from treadle.eventlog import streams, subjects
from treadle.gateway import sse


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
