"""Projection notices: the projector says on a core NATS subject per thread (``subjects.projected``) that it
wrote the thread's document, and a read waiting for the projection to reach a sequence wakes on it instead of
looking at Redis on a timer. A notice is a hint, never the truth: the waiter reads the sequence from Redis
each time it wakes, and looks again every ``RECHECK`` seconds in case a notice is lost (a core publish has no
delivery guarantee, and the log's fold by a reader writes the document without one)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from treadle.eventlog import nats_patches, subjects

from .store import ProjectionStore

RECHECK = 0.25  # seconds between looks at Redis without a notice (a lost one costs at most this)


async def announce(nc: NATS, written: Iterable[tuple[str, str, int]]) -> None:
    """After a write: (tenant, thread, seq) of each thread written. Buffered publishes, no round trip; a notice
    that cannot be sent (the connection is closing, or its buffer is full while it reconnects) is skipped: the
    write stands, and a read waiting for it finds it on its next look."""
    with contextlib.suppress(NatsError):
        for tenant, thread, seq in written:
            await nc.publish(subjects.projected(tenant, thread), str(seq).encode())


async def reached(
    nc: NATS, store: ProjectionStore, tenant: str, thread: str, target: int, timeout: float, recheck: float = RECHECK
) -> bool:
    """Whether the thread's projection reflects stream sequence ``target`` within ``timeout`` seconds. The
    first look costs one Redis read; only a projection behind ``target`` subscribes to the thread's notices."""
    if await store.seq(tenant, thread) >= target:
        return True
    woken = asyncio.Event()

    def notice(msg: Msg) -> None:
        if msg.data.isdigit() and int(msg.data) >= target:
            woken.set()

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    sub = await nats_patches.subscribe(nc, subjects.projected(tenant, thread), notice)
    try:
        # the server has the interest once this returns: a write after the look below wakes this read
        with contextlib.suppress(NatsError, TimeoutError):
            await nc.flush(max(1, round(timeout)))
        while True:
            woken.clear()
            if await store.seq(tenant, thread) >= target:
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(woken.wait(), min(left, recheck))
            except TimeoutError:
                pass
    finally:
        with contextlib.suppress(NatsError):  # a connection closed meanwhile has dropped it already
            await sub.unsubscribe()
