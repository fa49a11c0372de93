"""Server-Sent Events for one thread: durable events from the log (``id:`` = stream sequence, resumable
with ``Last-Event-ID`` through an ordered consumer, and the envelope's ``seq`` in ``data:``; either is what a
read takes as ``min_seq``) with the live text deltas interleaved."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy

from treadle.eventlog import nats_patches, subjects
from treadle.eventlog.nats_patches import stream_sequence

KEEPALIVE = 15.0
BACKLOG = 10_000


def _frame(kind: str, msg: Msg) -> bytes:
    if kind == "live":
        return b"event: live.delta\ndata: %s\n\n" % msg.data
    seq = stream_sequence(msg.reply)
    type_ = subjects.parse_event_subject(msg.subject)[2]  # the stored subject ends in the partition token
    data = msg.data
    if data.endswith(b"}"):  # the envelope's `seq` (stored without it): a client may pass it on as min_seq
        data = b'%s,"seq":%d}' % (data[:-1], seq)
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, type_.encode(), data)


class _Inbox:
    """What the thread's two subscriptions delivered, until the stream sends it. A wait is one future; the keepalive
    is one timer, moved only when it falls due while the stream has been busy since (a timeout around every wait
    armed and cancelled a timer for every frame)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.items: deque[tuple[str, Msg]] = deque()
        self.overflow = False
        self._waiter: asyncio.Future[None] | None = None
        self._idle_since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def receiver(self, kind: str) -> Callable[[Msg], None]:
        def put(msg: Msg) -> None:  # called by the connection's read loop (nats_patches.subscribe)
            if len(self.items) >= BACKLOG:  # a client this slow is cut off; it resumes with Last-Event-ID
                self.overflow = True
                return
            self.items.append((kind, msg))
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(None)

        return put

    async def wait(self) -> None:
        """Until something arrives, or KEEPALIVE seconds pass without anything (then ``items`` is empty)."""
        self._idle_since = self._loop.time()
        self._waiter = self._loop.create_future()
        if self._timer is None:
            self._timer = self._loop.call_at(self._idle_since + KEEPALIVE, self._due)
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _due(self) -> None:
        self._timer = None
        if self._waiter is None or self._waiter.done():
            return  # not waiting: the next wait arms the timer again
        due = self._idle_since + KEEPALIVE
        if self._loop.time() >= due:
            self._waiter.set_result(None)
        else:
            self._timer = self._loop.call_at(due, self._due)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


async def thread_events(nc: NATS, tenant: str, thread: str, after: int, live: bool = True) -> AsyncIterator[bytes]:
    """The thread's frames from stream sequence ``after`` on, with its live deltas unless ``live`` is False (a
    reader waiting for durable events: no live subscription, no frame per raw chunk). The first frame comes once
    the subscriptions are made (the route waits for it, so a broker that does not answer is a 503)."""
    inbox = _Inbox()
    config = (
        ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1)
        if after
        else ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    )
    subs: list[Subscription] = []
    try:
        if live:
            subs.append(await nats_patches.subscribe(nc, subjects.live(tenant, thread), inbox.receiver("live")))
        put = inbox.receiver("evt")

        async def queued(msg: Msg) -> None:  # nats-py's task: with the patches off only
            put(msg)

        events = await nc.jetstream().subscribe(
            subjects.thread_events(tenant, thread),
            stream=subjects.EVENTS_STREAM,  # known: no JetStream API request to look it up
            cb=queued,
            ordered_consumer=True,
            config=config,
        )
        nats_patches.make_direct(events._sub, put)  # the ordered consumer's checks stay in nats-py's read loop
        subs.append(events)
        yield b": connected\n\n"
        while not inbox.overflow:
            if not inbox.items:
                await inbox.wait()
                if not inbox.items:
                    yield b": keepalive\n\n"
                    continue
            # Send everything already received as one chunk: one write per burst, not per event.
            items = inbox.items
            chunk = [_frame(*items.popleft())]
            while items and len(chunk) < 256:
                chunk.append(_frame(*items.popleft()))
            yield b"".join(chunk)
    finally:
        inbox.close()
        for sub in subs:
            with contextlib.suppress(Exception):  # the connection may already be draining at shutdown
                await sub.unsubscribe()
