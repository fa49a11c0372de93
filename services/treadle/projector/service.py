"""The projection writer: a follower of ``TREADLE_EVENTS`` that folds every event into the thread's state and
writes the thread's views (``treadle.views``) to Redis. Per fetched batch: group by thread, fold, write all
documents in one pipeline, then ack. A document carries its stream sequence, so redelivery after a crash is a
no-op. Each replica follows the partitions it leases (runtime/leases.py), one durable consumer per partition.

The folded states live in memory only (an LRU per partition): Redis holds the public views, and a thread
not in memory is folded again from its log. Folding every event, the projector is the one that knows which
runs have not ended: it exports the oldest one's age (the stuck-run alert's gauge)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections import OrderedDict
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.js.errors import NotFoundError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from treadle.core import events as ev
from treadle.core.events import decode_event
from treadle.core.state import ThreadState, evolve
from treadle.eventlog import subjects, tracing
from treadle.eventlog.errors import LogError, Unavailable
from treadle.eventlog.log import BATCH_SEQUENCE, EventLog, fenced_after
from treadle.projections import notices
from treadle.projections.changes import Changes
from treadle.projections.rebuild import rebuild
from treadle.projections.store import ProjectionStore, indexed
from treadle.runtime import partitions
from treadle.runtime.leases import PartitionedWork
from treadle.runtime.metrics import PROJECTED, PROJECTION_LAG, PROJECTION_REWINDS, RUN_OLDEST_ACTIVE
from treadle.runtime.partition_migration import UNPARTITIONED_EVENTS, Legacy
from treadle.runtime.pull import LingeringPull
from treadle.runtime.settings import ProjectorSettings, Shared

log = logging.getLogger(__name__)
_PROJECT = {"messaging.system": "nats", "messaging.operation.type": "process"}  # a projected batch's span
DURABLE = "projector"  # one per partition: "projector-p3"
UNPARTITIONED = -1  # the key of the old single consumer's folded states while it drains
CACHE = 20_000
EPOCH_CHECK_SECONDS = 1.0
IDLE_TURN = 5.0  # an idle partition's loop still comes round this often, so a flushed Redis is rebuilt
# Batches written within this many seconds share one ack (AckPolicy.ALL): under load a partition sees a batch
# of one or two events per run, and every ack is a publish here and a consumer-state update in the broker.
ACK_EVERY = 0.1


def _exit_if_crashed(task: asyncio.Task[Any]) -> None:
    """A projector whose loop died must not look healthy: exit so the supervisor restarts it."""
    if not task.cancelled() and task.exception() is not None:
        log.error("projector loop crashed", exc_info=task.exception())
        os._exit(70)


class Projector:
    """What the partitions of one projector replica share: Redis, the epoch check and folded states."""

    def __init__(self, nc: NATS, redis: Redis, own: ProjectorSettings, shared: Shared | None = None) -> None:
        shared = shared or Shared()
        self._nc = nc
        self._js = nc.jetstream()
        self._log = EventLog(nc)
        self._store = ProjectionStore(redis)
        self._batch = own.batch
        # Folded states per partition: a partition that comes back after another replica held it starts
        # empty, since that replica may have projected events this cache never saw.
        self._states: dict[int, OrderedDict[tuple[str, str], ThreadState]] = {}
        # Per partition, the threads with a run not ended yet: when its oldest was queued (epoch seconds). Kept
        # beside the LRU, which may drop a thread whose run is still open.
        self._open: dict[int, dict[tuple[str, str], float]] = {}
        RUN_OLDEST_ACTIVE.set_function(self._oldest_open_age)
        self._epoch_checked = float("-inf")
        self._epoch_lock = asyncio.Lock()
        legacy = Legacy(((subjects.EVENTS_STREAM, DURABLE),), self._unpartitioned)
        self.work = PartitionedWork(
            nc,
            kind="projector",
            replica=shared.replica_name("projector"),
            ttl=shared.lease_ttl,
            make=self._partition,
            stream_replicas=shared.stream_replicas,
            legacy=legacy,
        )

    def _partition(self, partition: int) -> PartitionProjector:
        self._states[partition], self._open[partition] = OrderedDict(), {}
        return PartitionProjector(self, partition, f"{DURABLE}-p{partition}", partitions.events_filter(partition))

    def _unpartitioned(self) -> PartitionProjector:
        """The consumer of before partitions, while it holds events of before the upgrade (partition_migration)."""
        self._states[UNPARTITIONED], self._open[UNPARTITIONED] = OrderedDict(), {}
        return PartitionProjector(self, UNPARTITIONED, DURABLE, UNPARTITIONED_EVENTS)

    async def start(self) -> None:
        await self.work.start()

    async def stop(self) -> None:
        await self.work.stop()

    async def _ensure_epoch(self) -> None:
        """Redis is a cache and may be flushed at any moment: when the marker is gone, rebuild everything.
        Checked at most once a second, not per batch: one Redis round trip less per event at low load."""
        async with self._epoch_lock:
            now = time.monotonic()
            if now - self._epoch_checked < EPOCH_CHECK_SECONDS:
                return
            self._epoch_checked = now
            if await self._store.epoch() is not None:
                return
            for states in self._states.values():
                states.clear()
            count = await rebuild(self._nc, self._store)
            await self._store.set_epoch(uuid.uuid4().hex)
            log.info("projections rebuilt from the log: %d threads", count)

    async def _project(self, partition: int, msgs: list[Msg]) -> None:
        touched: dict[tuple[str, str], tuple[ThreadState, list[str], Changes]] = {}
        for msg in msgs:
            try:
                e = decode_event(msg.data, msg.metadata.sequence.stream)
            except Exception:
                log.exception("skipping undecodable event at seq %s", msg.metadata.sequence.stream)
                continue
            key = (e.tenant, e.thread)
            entry = touched.get(key)
            if entry is None:
                state = await self._state(partition, key, e.seq or 0)
                # Written only where this batch changed it, a state just loaded (a restart, a new owner of the
                # partition) too: the store's script takes changes only on top of the document at their base, and
                # a thread Redis lost (with its index) or another writer moved on is sent again whole, every id
                # it holds indexed (``ProjectionStore.write``). A restart costs no write of every thread's length.
                # A new thread (nothing folded yet) is written whole at once: it has no base to write on.
                entry = touched[key] = (state, [], Changes(state if state.seq else None))
            # A tombstone needs no history (the thread's views are erased), and the erasure may have purged it.
            if entry[0].seq < (previous := _previous(msg)) and not isinstance(e.data, ev.ThreadDeleted):
                await self._catch_up(key, entry, previous, e.seq or 0)
            entry[2].fold(entry[0], e)
            entry[1].extend(indexed(e.data))
        await self._store.write(touched.values())
        await notices.announce(
            self._nc, ((tenant, thread, state.seq) for (tenant, thread), (state, _, _) in touched.items())
        )
        open_runs = self._open.setdefault(partition, {})
        for key, (state, _, _) in touched.items():
            if (since := _oldest_open(state)) is None:
                open_runs.pop(key, None)
            else:
                open_runs[key] = since

    async def _state(self, partition: int, key: tuple[str, str], seq: int) -> ThreadState:
        states = self._states.setdefault(partition, OrderedDict())
        state = states.get(key)
        if state is None:
            # Redis holds views, not the state: fold the thread's log up to just before this event.
            state = ThreadState()
            for e in await self._log.read(*key):
                if e.seq is not None and e.seq >= seq:
                    break
                evolve(state, e)
            states[key] = state
            while len(states) > CACHE:
                states.popitem(last=False)
        states.move_to_end(key)
        return state

    async def _catch_up(
        self, key: tuple[str, str], entry: tuple[ThreadState, list[str], Changes], previous: int, seq: int
    ) -> None:
        """Fold the thread's events its state lacks, from the log up to just before ``seq``: the state came from a
        read of a replica that lagged, or missed a batch another replica of the projector wrote meanwhile."""
        state, ids, changes = entry
        for e in await self._log.read(*key, after=state.seq):
            if e.seq is not None and e.seq >= seq:
                break
            changes.fold(state, e)
            ids.extend(indexed(e.data))
        if state.seq < previous:
            # Any replica answers a direct get, and one catching up (a restarted node) may not have stored
            # what the leader delivered: folding on would skip the events in between for good.
            raise Unavailable(f"the log read of {key} ends at {state.seq}, before {previous}")

    def _forget_partition(self, partition: int) -> None:
        self._states.pop(partition, None)
        self._open.pop(partition, None)

    def _oldest_open_age(self) -> float:
        oldest = min((since for runs in self._open.values() for since in runs.values()), default=None)
        return 0.0 if oldest is None else max(0.0, time.time() - oldest)


class PartitionProjector:
    """The projection writer of one partition: per fetched batch, group by thread, fold, write all documents
    in one pipeline, then ack (AckPolicy.ALL: the batches written within ``ACK_EVERY`` share one ack). An ack
    held back is no loss: what a crash leaves unacknowledged was written, and is read again and refused by the
    store as not newer (at least once, as before).

    Acknowledging everything up to a message is safe only while this reader saw every delivery before it.
    A delivery can go astray: to the pull request of a replica that died or lost the lease, or into a broker
    node lost with its replies; the next ack would acknowledge it unseen, and a thread without a later event
    would keep a stale projection. So a reader starts right after the acknowledged floor when deliveries are
    outstanding, and starts there again when the delivery sequence skips (``_rewind``)."""

    def __init__(self, projector: Projector, partition: int, durable: str, filter_: str) -> None:
        self._p = projector
        self.partition = partition
        self._durable, self._filter = durable, filter_
        self._task: asyncio.Task[Any] | None = None
        self._stopping = False
        self._fetching = False  # waiting for messages: nothing to finish, so stop() need not wait
        self._acked = 0  # stream sequence acknowledged last
        self._next = 1  # delivery (consumer) sequence expected next
        self._pull: LingeringPull | None = None  # None after a delivery went astray, until read again
        self._unacked: Msg | None = None  # the last message of the batches written since the last ack
        self._ack_timer: asyncio.TimerHandle | None = None
        self._acking: set[asyncio.Task[None]] = set()

    def _config(self, start: int | None) -> ConsumerConfig:
        return ConsumerConfig(
            durable_name=self._durable,
            ack_policy=AckPolicy.ALL,
            filter_subject=self._filter,
            ack_wait=30,
            max_ack_pending=10_000,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if start else DeliverPolicy.ALL,
            opt_start_seq=start,
        )

    async def _bind(self) -> None:
        js = self._p._js
        try:
            info = await js.consumer_info(subjects.EVENTS_STREAM, self._durable)
        except NotFoundError:
            info = await js.add_consumer(subjects.EVENTS_STREAM, self._config(None))
        else:
            # Outstanding deliveries belong to a reader that is gone; a filter of before partitions is narrowed
            # to the unpartitioned form (partition_migration.py). Both: start again after the floor.
            if info.num_ack_pending or info.config.filter_subject != self._filter:
                info = await self._recreate(info.ack_floor.stream_seq + 1)
        self._acked, self._next = info.ack_floor.stream_seq, info.delivered.consumer_seq + 1
        await self._follow()

    async def _follow(self) -> LingeringPull:
        pull = LingeringPull(self._p._js, subjects.EVENTS_STREAM, self._durable, self._p._batch)
        await pull.start()
        self._pull = pull
        return pull

    async def _recreate(self, start: int) -> ConsumerInfo:
        js = self._p._js
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(subjects.EVENTS_STREAM, self._durable)
        return await js.add_consumer(subjects.EVENTS_STREAM, self._config(start))

    async def _rewind(self) -> LingeringPull:
        self._forget_ack()  # an ack for the consumer being replaced
        info = await self._recreate(self._acked + 1)
        self._next = (info.delivered.consumer_seq if info.delivered is not None else 0) + 1  # new: delivered 0
        return await self._follow()

    async def start(self) -> None:
        await self._bind()
        self._task = asyncio.create_task(self._loop(), name=f"projector:p{self.partition}")
        self._task.add_done_callback(_exit_if_crashed)

    async def stop(self, timeout: float = 10.0) -> None:
        self._stopping = True
        if self._task:
            if self._fetching:
                self._task.cancel()
            done, _ = await asyncio.wait({self._task}, timeout=timeout)
            if not done:  # a write cut short is redone by the next owner (writes are seq-guarded)
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
        self._p._forget_partition(self.partition)
        if self._pull is not None and (written := self._unacked) is not None:  # not to be read again
            self._forget_ack()
            await self._ack(written)
        if self._pull is not None:
            await self._pull.close()  # left unacknowledged: the next owner reads them again from the floor

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self._p._ensure_epoch()
                # None: a delivery went astray, read again from the floor
                pull = self._pull if self._pull is not None else await self._rewind()
                self._fetching = True
                msgs = await pull.take(IDLE_TURN)
            except Exception as exc:
                log.warning("%s: fetch failed: %r", self._durable, exc)
                await asyncio.sleep(0.5)  # backoff while the broker or Redis is away
                continue
            finally:
                self._fetching = False
            if not msgs:
                continue
            if [m.metadata.sequence.consumer for m in msgs] != list(range(self._next, self._next + len(msgs))):
                PROJECTION_REWINDS.inc()
                log.warning(
                    "%s: a delivery went astray; reading again from stream sequence %d", self._durable, self._acked + 1
                )
                self._pull = None
                await pull.close()  # what it holds is read again from the floor
                continue
            self._next += len(msgs)
            delay = 0.05
            while not self._stopping or delay == 0.05:  # when stopping, one more try, then leave it unacked
                try:
                    # in the trace of each run whose events the batch holds (their appends carried it)
                    batch: dict[str, str | int] = {**_PROJECT, "messaging.batch.message_count": len(msgs)}
                    batch["treadle.partition"] = self.partition
                    with tracing.spans_per_trace("project", (m.headers for m in msgs), batch):
                        await self._p._project(self.partition, msgs)
                    self._ack_soon(msgs[-1])  # AckPolicy.ALL: acknowledges every batch up to it
                    PROJECTED.inc(len(msgs))
                    PROJECTION_LAG.labels(self.partition).set(msgs[-1].metadata.num_pending)
                    break
                except (RedisError, OSError, NatsTimeout, LogError) as exc:
                    log.warning("projection write failed, retrying: %r", exc)
                    self._p._states.get(self.partition, OrderedDict()).clear()
                    await asyncio.sleep(delay)  # backoff while Redis is away
                    delay = min(delay * 2, 5.0)

    def _ack_soon(self, msg: Msg) -> None:
        """Acknowledge ``msg``, with every batch before it, once ``ACK_EVERY`` has passed since the first
        written batch still unacknowledged."""
        self._unacked = msg
        if self._ack_timer is None:
            self._ack_timer = asyncio.get_running_loop().call_later(ACK_EVERY, self._ack_due)

    def _ack_due(self) -> None:
        self._ack_timer = None
        msg, self._unacked = self._unacked, None
        if msg is not None:
            task = asyncio.create_task(self._ack(msg))
            self._acking.add(task)
            task.add_done_callback(self._acking.discard)

    def _forget_ack(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        self._unacked = None

    async def _ack(self, msg: Msg) -> None:
        try:
            await msg.ack()
        except Exception as exc:  # the connection is away: the batches are read again from the floor
            log.warning("%s: ack failed: %r", self._durable, exc)
            return
        self._acked = max(self._acked, msg.metadata.sequence.stream)


def _oldest_open(state: ThreadState) -> float | None:
    """When the thread's oldest run not ended yet was queued: the active one or one waiting behind it."""
    runs = [state.active_run, *(state.run(run_id) for run_id in state.queue)]
    return min((r.queued_at.timestamp() for r in runs if r is not None and not r.terminal), default=None)


def _previous(msg: Msg) -> int:
    """The stream sequence of the thread's event before ``msg``: the fence its append carried (the first event of
    an append), or the message just before it (the rest of an atomic batch, which is stored contiguously).
    0 (nothing to check) for an event published without a fence."""
    headers = msg.headers or {}
    if (fence := fenced_after(headers)) is not None:
        return fence
    return msg.metadata.sequence.stream - 1 if int(headers.get(BATCH_SEQUENCE, "1")) > 1 else 0
