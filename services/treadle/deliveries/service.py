"""The webhook delivery worker: a follower of ``TREADLE_EVENTS`` that POSTs each event to the tenant's
endpoints that take it (docs/webhooks.md). Each replica follows the partitions it leases (runtime/leases.py),
one durable consumer per partition, apart from the thread workers: a slow receiver never holds up a thread.

An event is acknowledged once every endpoint it matched has it delivered or dead-lettered, so a crash delivers
it again (at least once; the delivery id stays the same, and a finished record is not sent twice). Within a
partition the deliveries of one (endpoint, thread) go one after the other in stream order; other pairs go in
parallel. While an event waits, its ack deadline is pushed on (``in_progress``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from treadle.core.envelope import Envelope
from treadle.core.events import decode_event
from treadle.eventlog import subjects
from treadle.runtime import partitions
from treadle.runtime.leases import PartitionedWork
from treadle.runtime.pull import LingeringPull
from treadle.runtime.settings import Shared, WebhooksSettings
from treadle.webhooks.addresses import AllowList
from treadle.webhooks.model import Delivery, Endpoint, as_sent, body, delivery_id, matches, schedule
from treadle.webhooks.sender import Limits, Outcome, post
from treadle.webhooks.store import DeliveryStore

from .index import EndpointIndex

log = logging.getLogger(__name__)
DURABLE = "webhooks"  # one per partition: "webhooks-p3"
ACK_WAIT = 30.0
PROGRESS_EVERY = 10.0
CONCURRENT_POSTS = 64
IDLE_TURN = 5.0
LANE_GRACE = 5.0  # seconds a stopping partition lets its deliveries in hand finish


class TenantRate:
    """Deliveries per minute per tenant (a token bucket per tenant): over it, a delivery waits, never drops."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate, self._burst = per_minute / 60.0, float(per_minute)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def wait_for(self, tenant: str) -> float:
        """Seconds until ``tenant`` may send; 0 takes a token now."""
        now = self._clock()
        tokens, at = self._buckets.get(tenant, (self._burst, now))
        tokens = min(self._burst, tokens + (now - at) * self._rate)
        if tokens >= 1:
            self._buckets[tenant] = (tokens - 1, now)
            return 0.0
        self._buckets[tenant] = (tokens, now)
        return (1 - tokens) / self._rate


class Deliveries:
    """What the partitions of one replica share: the records, the endpoint index, the rate and the rules."""

    def __init__(self, nc: NATS, own: WebhooksSettings, shared: Shared | None = None) -> None:
        shared = shared or Shared()
        self.nc, self.js = nc, nc.jetstream()
        self.own = own
        self.records = DeliveryStore(self.js)
        self.allow = AllowList.parse(own.allow_hosts)
        self.limits = Limits(own.connect_timeout, own.read_timeout, own.max_response_bytes)
        self.waits = schedule(own.backoff_base, own.backoff_max, own.retry_for)
        self.rate = TenantRate(own.deliveries_per_minute)
        self.posting = asyncio.Semaphore(CONCURRENT_POSTS)
        self.index = EndpointIndex(self.js)
        self.work = PartitionedWork(
            nc,
            kind="webhooks",
            replica=shared.replica_name("webhooks"),
            ttl=shared.lease_ttl,
            make=lambda p: PartitionDeliveries(self, p),
            stream_replicas=shared.stream_replicas,
        )

    async def start(self) -> None:
        await self.index.start()
        await self.work.start()

    async def stop(self) -> None:
        await self.work.stop()
        await self.index.stop()

    async def deliver(self, endpoint: Endpoint, event: Envelope) -> None:
        """Send ``event`` to ``endpoint`` until acknowledged or the retries run out (then dead-lettered)."""
        ident = delivery_id(endpoint.id, event.id)
        record = await self.records.get(endpoint.tenant, endpoint.id, ident)
        if record is not None and record.status != "pending":
            return  # redelivered after a crash: already finished
        now = datetime.now(UTC)
        if record is None:
            record = Delivery(
                id=ident,
                endpoint=endpoint.id,
                tenant=endpoint.tenant,
                thread=event.thread,
                event_id=event.id,
                event_type=event.type,
                seq=event.seq or 0,
                created_at=now,
                updated_at=now,
                body=body(event, ident).decode(),
            )
            await self.records.put(record)
        while True:
            outcome = await self.attempt(endpoint, record)
            if outcome.ok:
                return
            if record.attempts > len(self.waits):
                record.status = "failed"
                await self.records.put(record)
                log.warning("webhook %s: delivery %s dead-lettered: %s", endpoint.id, ident, record.error)
                return
            await asyncio.sleep(self.waits[record.attempts - 1])  # the retry backoff
            current = next((e for e in self.index.of(endpoint.tenant) if e.id == endpoint.id), None)
            if current is None or not current.enabled:
                record.status, record.error = "failed", "the endpoint was deleted or disabled"
                await self.records.put(record)
                return
            endpoint = current  # a new URL or secret applies to the next attempt

    async def attempt(self, endpoint: Endpoint, record: Delivery) -> Outcome:
        """One POST of ``record``, its outcome written to the record."""
        while (wait := self.rate.wait_for(endpoint.tenant)) > 0:
            await asyncio.sleep(wait)  # the tenant's deliveries per minute
        async with self.posting:
            outcome = await post(
                endpoint.url, record.body.encode(), endpoint.secret, record.id, self.allow, self.limits
            )
        now = datetime.now(UTC)
        record.attempts += 1
        record.updated_at = now
        record.response_status, record.error = outcome.status, outcome.error
        if outcome.ok:
            record.status, record.delivered_at = "delivered", now
        await self.records.put(record)
        return outcome


class _Pending:
    """An event waiting for its endpoints: acknowledged when the last one is done."""

    def __init__(self, msg: Msg, count: int) -> None:
        self.msg, self.left = msg, count


class PartitionDeliveries:
    def __init__(self, owner: Deliveries, partition: int) -> None:
        self._o = owner
        self.partition = partition
        self._durable = f"{DURABLE}-p{partition}"
        self._task: asyncio.Task[Any] | None = None
        self._progress: asyncio.Task[Any] | None = None
        self._lanes: dict[tuple[str, str], asyncio.Queue[tuple[Endpoint, Envelope, _Pending]]] = {}
        self._lane_tasks: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self._pending: dict[int, _Pending] = {}  # stream sequence -> event not acknowledged yet
        self._pull: LingeringPull | None = None  # None: standing down (no endpoint anywhere) or not started

    async def start(self) -> None:
        if self._o.index.any():
            self._pull = await self._open()
        else:
            await self._forget()
        self._task = asyncio.create_task(self._loop(), name=f"deliveries:p{self.partition}")
        self._progress = asyncio.create_task(self._keep_alive())

    async def _open(self) -> LingeringPull:
        """Follow the partition with its durable consumer: the one that exists, or a new one from the oldest
        endpoint's creation (a partition that stood down) or from now (no time known)."""
        since = self._o.index.since()
        config = ConsumerConfig(
            durable_name=self._durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ACK_WAIT,
            max_ack_pending=10_000,
            deliver_policy=DeliverPolicy.NEW if since is None else DeliverPolicy.BY_START_TIME,
            opt_start_time=since,
            filter_subject=partitions.events_filter(self.partition),
        )
        js = self._o.js
        try:
            info = await js.consumer_info(subjects.EVENTS_STREAM, self._durable)
        except NotFoundError:
            await js.add_consumer(subjects.EVENTS_STREAM, config)
        else:
            # Deliveries still outstanding belong to a reader that is gone (a crash): read again from the floor
            # now rather than after their ack wait. What is read twice finds its finished record and is skipped.
            if info.num_ack_pending and info.ack_floor is not None and info.ack_floor.stream_seq:
                with contextlib.suppress(NotFoundError):
                    await js.delete_consumer(subjects.EVENTS_STREAM, self._durable)
                again = dataclasses.replace(
                    config,
                    deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                    opt_start_seq=info.ack_floor.stream_seq + 1,
                    opt_start_time=None,
                )
                await js.add_consumer(subjects.EVENTS_STREAM, again)
        # Not nats-py's fetch: after a first message it waits out its whole timeout for a full batch.
        pull = LingeringPull(js, subjects.EVENTS_STREAM, self._durable, self._o.own.batch)
        await pull.start()
        return pull

    async def _forget(self) -> None:
        """Stand down: no endpoint anywhere, so no consumer (what it still held was for endpoints now gone)."""
        pull, self._pull = self._pull, None
        if pull is not None:
            await pull.close()
        with contextlib.suppress(NotFoundError):
            await self._o.js.delete_consumer(subjects.EVENTS_STREAM, self._durable)

    async def stop(self, timeout: float = 10.0) -> None:
        """Take no more events; let the deliveries in hand finish for a while (a POST cut short is sent again by
        the next owner: a duplicate at the receiver), then give back what is left."""
        loops = [t for t in (self._task, self._progress) if t is not None]
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        lanes = list(self._lane_tasks.values())
        if lanes:
            await asyncio.wait(lanes, timeout=min(timeout, LANE_GRACE))
        for task in lanes:
            task.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
        untaken = await self._pull.close() if self._pull is not None else []
        for msg in [*(p.msg for p in self._pending.values()), *untaken]:  # the next owner sends them at once
            with contextlib.suppress(Exception):
                await msg.nak()

    async def _loop(self) -> None:
        while True:
            try:
                if self._pull is None:
                    await self._o.index.wanted.wait()
                    self._pull = await self._open()
                elif not self._o.index.any() and not self._pending:
                    await self._forget()
                    continue
                msgs = await self._pull.take(IDLE_TURN)
            except Exception as exc:
                log.warning("%s: fetch failed: %r", self._durable, exc)
                await asyncio.sleep(0.5)  # backoff while the broker is away
                continue
            for msg in msgs:
                try:
                    await self._route(msg)
                except Exception as exc:  # a store that is away: the event comes again after its ack wait
                    log.warning("%s: routing seq %d failed: %r", self._durable, msg.metadata.sequence.stream, exc)

    async def _route(self, msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        if seq in self._pending:
            return  # a redelivery of an event still in hand
        tenant, _thread, _type = subjects.parse_event_subject(msg.subject)
        endpoints = self._o.index.of(tenant)
        if not endpoints:
            await msg.ack()
            return
        event = decode_event(msg.data, seq)
        chosen = [(endpoint, sent) for sent in as_sent(event) for endpoint in endpoints if matches(endpoint, sent)]
        if not chosen:
            await msg.ack()
            return
        pending = self._pending[seq] = _Pending(msg, len(chosen))
        for endpoint, sent in chosen:
            key = (endpoint.id, event.thread)
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = asyncio.Queue()
                self._lane_tasks[key] = asyncio.create_task(self._drain(key, lane))
            lane.put_nowait((endpoint, sent, pending))

    async def _drain(self, key: tuple[str, str], lane: asyncio.Queue[tuple[Endpoint, Envelope, _Pending]]) -> None:
        """One (endpoint, thread)'s deliveries in order; the lane ends when it runs dry."""
        while not lane.empty():
            endpoint, event, pending = lane.get_nowait()
            while True:
                try:
                    await self._o.deliver(endpoint, event)
                    break
                except Exception as exc:  # the record store is away: the same delivery again, in order
                    log.warning("webhook %s: delivery of %s failed: %r", endpoint.id, event.id, exc)
                    await asyncio.sleep(1.0)  # backoff while the store is away
            pending.left -= 1
            if pending.left == 0:
                self._pending.pop(pending.msg.metadata.sequence.stream, None)
                with contextlib.suppress(Exception):
                    await pending.msg.ack()
        self._lanes.pop(key, None)
        self._lane_tasks.pop(key, None)

    async def _keep_alive(self) -> None:
        """Events waiting for a slow receiver keep their place: their ack deadline is pushed on."""
        while True:
            await asyncio.sleep(PROGRESS_EVERY)  # a period, not synchronisation
            for pending in list(self._pending.values()):
                with contextlib.suppress(Exception):
                    await pending.msg.in_progress()
