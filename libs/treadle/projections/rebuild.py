"""Rebuild projections from the log: every thread folded from its first event, then written."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from treadle.core.events import decode_event
from treadle.core.state import ThreadState, evolve

from ..eventlog import subjects
from .store import ProjectionStore, indexed


async def fold_all(nc: NATS, until_seq: int | None = None) -> dict[tuple[str, str], tuple[ThreadState, list[str]]]:
    """Replay ``treadle.evt.>`` up to ``until_seq`` (default: the stream's last sequence now) in memory."""
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    last = until_seq if until_seq is not None else info.state.last_seq
    folded: dict[tuple[str, str], tuple[ThreadState, list[str]]] = {}
    if last == 0 or info.state.messages == 0:
        return folded
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        if seq <= last:
            e = decode_event(msg.data, seq)
            state, runs = folded.setdefault((e.tenant, e.thread), (ThreadState(), []))
            evolve(state, e)
            runs.extend(indexed(e.data))
        if seq >= last:
            done.set()

    sub = await js.subscribe(subjects.EVENTS_ALL, cb=on_msg, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    try:
        await done.wait()
    finally:
        await sub.unsubscribe()
    return folded


async def rebuild(nc: NATS, store: ProjectionStore, chunk: int = 200) -> int:
    """Write every thread's projection; returns the number of threads written."""
    folded = [(state, runs, None) for state, runs in (await fold_all(nc)).values()]
    for i in range(0, len(folded), chunk):
        await store.write(folded[i : i + chunk])
    return len(folded)
