"""Server-Sent Events for one thread: durable events from the log (``id:`` = stream sequence, resumable
with ``Last-Event-ID`` through an ordered consumer, and the envelope's ``seq`` in ``data:``; either is what a
read takes as ``min_seq``) with the live text deltas interleaved."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from nats.aio.client import Client as NATS
from nats.js.api import ConsumerConfig, DeliverPolicy

from treadle.eventlog import subjects

KEEPALIVE = 15.0
BACKLOG = 10_000


def _frame(kind: str, msg) -> bytes:
    if kind == "live":
        return b"event: live.delta\ndata: %s\n\n" % msg.data
    seq = msg.metadata.sequence.stream
    type_ = subjects.parse_event_subject(msg.subject)[2]  # the stored subject ends in the partition token
    data = msg.data
    if data.endswith(b"}"):  # the envelope's `seq` (stored without it): a client may pass it on as min_seq
        data = b'%s,"seq":%d}' % (data[:-1], seq)
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, type_.encode(), data)


async def thread_events(nc: NATS, tenant: str, thread: str, after: int) -> AsyncIterator[bytes]:
    queue: asyncio.Queue = asyncio.Queue(BACKLOG)
    overflow = asyncio.Event()

    def put(kind: str):
        async def cb(msg) -> None:
            try:
                queue.put_nowait((kind, msg))
            except asyncio.QueueFull:  # a client this slow is cut off; it resumes with Last-Event-ID
                overflow.set()

        return cb

    js = nc.jetstream()
    live = await nc.subscribe(subjects.live(tenant, thread), cb=put("live"))
    config = (
        ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1)
        if after
        else ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    )
    durable = await js.subscribe(
        subjects.thread_events(tenant, thread), cb=put("evt"), ordered_consumer=True, config=config
    )
    try:
        yield b": connected\n\n"
        while not overflow.is_set():
            if queue.empty():
                try:
                    async with asyncio.timeout(KEEPALIVE):  # a timer, not a task per wait as wait_for makes
                        item = await queue.get()
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
            else:
                item = queue.get_nowait()
            # Send everything already queued as one chunk: one write per burst, not per event.
            chunk = [_frame(*item)]
            while not queue.empty() and len(chunk) < 256:
                chunk.append(_frame(*queue.get_nowait()))
            yield b"".join(chunk)
    finally:
        for sub in (live, durable):
            with contextlib.suppress(Exception):  # the connection may already be draining at shutdown
                await sub.unsubscribe()
