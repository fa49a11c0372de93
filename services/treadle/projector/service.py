"""The projection writer: a follower of ``TREADLE_EVENTS`` that folds every event into the thread's Redis
document. Per fetched batch: group by thread, fold, write all documents in one pipeline, then ack. A
document carries its stream sequence, so redelivery after a crash is a no-op."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections import OrderedDict
from typing import NamedTuple

from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import FetchTimeoutError, NotFoundError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from treadle.domain.events import decode_event
from treadle.domain.thread import ThreadState, evolve
from treadle.eventlog import subjects
from treadle.eventlog.errors import LogError, Unavailable
from treadle.eventlog.log import BATCH_SEQUENCE, ELSS, EventLog
from treadle.projections.document import Changes
from treadle.projections.rebuild import rebuild
from treadle.projections.store import ProjectionStore, indexed
from treadle.runtime.consumer import fetch_ready
from treadle.runtime.metrics import PROJECTED, PROJECTION_LAG
from treadle.runtime.settings import ProjectorSettings

log = logging.getLogger(__name__)
DURABLE = "projector"
CACHE = 20_000
EPOCH_CHECK_SECONDS = 1.0


def _exit_if_crashed(task: asyncio.Task) -> None:
    """A projector whose loop died must not look healthy: exit so the supervisor restarts it."""
    if not task.cancelled() and task.exception() is not None:
        log.error("projector loop crashed", exc_info=task.exception())
        os._exit(70)


class Projector:
    def __init__(self, nc: NATS, redis: Redis, own: ProjectorSettings) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._log = EventLog(nc)
        self._store = ProjectionStore(redis)
        self._batch = own.batch
        self._states: OrderedDict[tuple[str, str], ThreadState] = OrderedDict()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._epoch_checked = float("-inf")
        self._last = 0  # the last stream sequence projected (the consumer sees every event of the stream)

    async def start(self) -> None:
        await self._js.add_consumer(subjects.EVENTS_STREAM, ConsumerConfig(
            durable_name=DURABLE, deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.ALL,
            filter_subject=subjects.EVENTS_ALL, ack_wait=30, max_ack_pending=10_000))
        self._sub = await self._js.pull_subscribe_bind(DURABLE, stream=subjects.EVENTS_STREAM)
        self._last = (await self._js.consumer_info(subjects.EVENTS_STREAM, DURABLE)).ack_floor.stream_seq
        self._task = asyncio.create_task(self._loop())
        self._task.add_done_callback(_exit_if_crashed)

    async def stop(self) -> None:
        self._stopping = True
        if self._task:
            await asyncio.wait_for(asyncio.gather(self._task, return_exceptions=True), 10)
        await self._sub.unsubscribe()

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self._ensure_epoch()
                msgs = await fetch_ready(self._sub, self._batch)
            except (FetchTimeoutError, NatsTimeout, asyncio.TimeoutError):
                continue
            except Exception as exc:
                log.warning("projector fetch failed: %r", exc)
                await asyncio.sleep(0.5)  # backoff while the broker or Redis is away
                continue
            if not msgs:  # nats-py may return an empty batch instead of timing out
                continue
            delay = 0.05
            while True:
                try:
                    await self._project(msgs)
                    await msgs[-1].ack()  # AckPolicy.ALL: acknowledges the whole batch
                    PROJECTED.inc(len(msgs))
                    PROJECTION_LAG.set(msgs[-1].metadata.num_pending)
                    break
                except (RedisError, OSError, NatsTimeout, LogError) as exc:
                    log.warning("projection write failed, retrying: %r", exc)
                    self._states.clear()
                    await asyncio.sleep(delay)  # backoff while Redis is away
                    delay = min(delay * 2, 5.0)

    async def _ensure_epoch(self) -> None:
        """Redis is a cache and may be flushed at any moment: when the marker is gone, rebuild everything.
        Checked at most once a second, not per batch: one Redis round trip less per event at low load."""
        now = time.monotonic()
        if now - self._epoch_checked < EPOCH_CHECK_SECONDS:
            return
        self._epoch_checked = now
        if await self._store.epoch() is not None:
            return
        self._states.clear()
        count = await rebuild(self._nc, self._store)
        await self._store.set_epoch(uuid.uuid4().hex)
        log.info("projections rebuilt from the log: %d threads", count)

    async def _project(self, msgs) -> None:
        touched: dict[tuple[str, str], tuple[ThreadState, list[str], Changes]] = {}
        stored = [_Stored(m.metadata.sequence.stream, m.data, m.headers) for m in msgs]
        for msg in await self._with_missed(stored):
            try:
                e = decode_event(msg.data, msg.seq)
            except Exception:
                log.exception("skipping undecodable event at seq %s", msg.seq)
                continue
            key = (e.tenant, e.thread)
            entry = touched.get(key)
            if entry is None:
                state, cached = await self._state(key)
                # A state just loaded is written whole; a cached one only where this batch changed it.
                entry = touched[key] = (state, [], Changes(state if cached else None))
            if entry[0].seq < (previous := _previous(msg)):
                await self._catch_up(key, entry, previous, msg.seq)
            evolve(entry[0], e)
            entry[2].note(e.data)
            entry[1].extend(indexed(e.data))
        await self._store.write(touched.values())
        self._last = max((m.seq for m in stored), default=self._last)

    async def _with_missed(self, msgs: list["_Stored"]) -> list["_Stored"]:
        """``msgs`` with the events delivered before them that never arrived, read back from the stream leader.
        A fetch lost with its broker connection (a NATS node killed) or with a crashed projector leaves them
        delivered but unacknowledged, and this batch's ack (AckPolicy.ALL) would acknowledge them unseen."""
        out: list[_Stored] = []
        last = self._last
        for msg in msgs:
            for seq in range(last + 1, msg.seq):
                try:
                    got = await self._js.get_msg(subjects.EVENTS_STREAM, seq)
                except NotFoundError:  # deleted from the stream: nothing to project
                    continue
                except NatsError as exc:  # e.g. the stream is electing a leader
                    raise Unavailable(f"event {seq} not read back: {exc!r}") from None
                out.append(_Stored(seq, got.data or b"", got.headers))
            out.append(msg)
            last = max(last, msg.seq)
        return out

    async def _state(self, key: tuple[str, str]) -> tuple[ThreadState, bool]:
        """The thread as last projected: cached, else its Redis document (nothing after a flush)."""
        state = self._states.get(key)
        cached = state is not None
        if state is None:
            state = self._states[key] = await self._store.state(*key) or ThreadState()
            while len(self._states) > CACHE:
                self._states.popitem(last=False)
        self._states.move_to_end(key)
        return state, cached

    async def _catch_up(self, key: tuple[str, str], entry: tuple[ThreadState, list[str], Changes], previous: int,
                        seq: int) -> None:
        """Fold the thread's events its state lacks, from the log up to just before ``seq``: the state came from a
        Redis that was flushed or lost a write since."""
        state, ids, changes = entry
        for e in await self._log.read(*key, after=state.seq):
            if e.seq is not None and e.seq >= seq:
                break
            evolve(state, e)
            changes.note(e.data)
            ids.extend(indexed(e.data))
        if state.seq < previous:
            # Any replica answers a direct get, and one catching up (a restarted node) may not have stored
            # what the leader delivered: folding on would skip the events in between for good.
            raise Unavailable(f"the log read of {key} ends at {state.seq}, before {previous}")


class _Stored(NamedTuple):
    """An event as the projector folds it: delivered by the consumer, or read back from the stream."""

    seq: int
    data: bytes
    headers: dict[str, str] | None


def _previous(msg: _Stored) -> int:
    """The sequence of the thread's event before ``msg``: the fence its append carried (the first event of an
    append), or the message just before it (the rest of an atomic batch, which is stored contiguously).
    0 (nothing to check) for an event published without a fence."""
    headers = msg.headers or {}
    if (fence := headers.get(ELSS)) is not None:
        return int(fence)
    return msg.seq - 1 if int(headers.get(BATCH_SEQUENCE, "1")) > 1 else 0
