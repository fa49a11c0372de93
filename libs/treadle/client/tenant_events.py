"""Follow one tenant's durable events straight from the broker, with the tenant's own consumer credential.

Other services of the platform (billing, notifications, analytics) use this instead of the HTTP API::

    from treadle.client.tenant_events import TenantCredential, follow_tenant

    creds = TenantCredential.load("billing.creds.json")   # from `treadle consumers create --tenant acme`
    async with creds.connect() as nc, TenantFollower(nc, creds, types=["run.completed"]) as events:
        async for event in events:
            bill(event.tenant, event.data.run_id)
            await events.ack(event)                        # resume after this one next time

The credential owns one durable pull consumer on stream TREADLE_EVENTS, named after it and filtered on
``treadle.evt.<tenant>.>`` (or on one event type). The broker remembers what was acked, so a follower that
stops (or crashes) and starts again resumes after the last event it acked: an event whose processing did
not finish is delivered again (at-least-once; ``event.seq`` is the stream sequence to deduplicate on).
``from_seq`` starts over at a given stream sequence instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import FetchTimeoutError, NotFoundError

from ..domain.events import PAYLOADS, Envelope, decode_event


class TenantCredential(msgspec.Struct, kw_only=True):
    """The JSON document ``treadle consumers create`` prints."""

    url: str
    user: str
    password: str
    tenant: str
    stream: str
    consumer: str
    inbox_prefix: str
    filter: str

    @classmethod
    def load(cls, path: str | Path) -> "TenantCredential":
        return msgspec.json.decode(Path(path).read_bytes(), type=cls)

    @contextlib.asynccontextmanager
    async def connect(self, **options) -> AsyncIterator[NATS]:
        """A connection as this credential (its own inbox prefix: the only inboxes it may read)."""
        nc = await nats.connect(self.url, user=self.user, password=self.password, inbox_prefix=self.inbox_prefix,
                                name=f"treadle-consumer-{self.consumer}", **options)
        try:
            yield nc
        finally:
            await nc.close()


def filter_for(tenant: str, types: list[str] | None) -> str:
    """The consumer's one filter: the whole tenant, or one event type (the broker filters on subjects;
    several types means filtering client side, as a credential may create single-filter consumers only)."""
    if types and len(types) == 1:
        (type_,) = types
        if type_ not in PAYLOADS:
            raise ValueError(f"unknown event type {type_!r}")
        return f"treadle.evt.{tenant}.*.{type_}.*"  # the last token is the partition (runtime/partitions.py)
    return f"treadle.evt.{tenant}.>"


async def ensure_consumer(nc: NATS, creds: TenantCredential, *, from_seq: int | None = None,
                          types: list[str] | None = None, ack_wait: float = 30.0) -> None:
    """Create the credential's durable consumer, or keep the existing one (and its position). ``from_seq``
    replaces it with one starting at that stream sequence."""
    js = nc.jetstream()
    wanted = filter_for(creds.tenant, types)
    existing = None
    try:
        existing = await js.consumer_info(creds.stream, creds.consumer)
    except NotFoundError:
        pass
    if existing is not None and (from_seq is not None or existing.config.filter_subject != wanted):
        # The start position cannot be changed in place; a changed filter starts over too (from where the
        # old consumer had acked, unless from_seq says otherwise).
        if from_seq is None:
            from_seq = existing.ack_floor.stream_seq + 1 if existing.ack_floor else 1
        await js.delete_consumer(creds.stream, creds.consumer)
        existing = None
    if existing is not None:
        return
    config = ConsumerConfig(name=creds.consumer, durable_name=creds.consumer, filter_subject=wanted,
                            ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait, max_ack_pending=1024,
                            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if from_seq else DeliverPolicy.ALL,
                            opt_start_seq=from_seq or None)
    await js.add_consumer(creds.stream, config)


class TenantFollower:
    """The tenant's events in stream order, each to be acked with :meth:`ack` once handled. Leaving the
    ``async with`` block hands every unacked event back to the broker at once (nak), so the next follower
    gets it immediately instead of after the ack wait::

        async with TenantFollower(nc, creds, types=["run.completed"]) as events:
            async for event in events:
                bill(event)
                await events.ack(event)
    """

    def __init__(self, nc: NATS, creds: TenantCredential, *, from_seq: int | None = None,
                 types: list[str] | None = None, batch: int = 64, idle_timeout: float | None = None) -> None:
        self._nc, self._creds, self._from_seq, self._types = nc, creds, from_seq, types
        self._batch, self._idle = batch, idle_timeout
        self._unacked: dict[int, object] = {}  # stream seq -> message, fetched and not yet acked
        self._sub = None

    async def __aenter__(self) -> "TenantFollower":
        await ensure_consumer(self._nc, self._creds, from_seq=self._from_seq, types=self._types)
        self._sub = await self._nc.jetstream().pull_subscribe_bind(self._creds.consumer, stream=self._creds.stream)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for msg in list(self._unacked.values()):
            with contextlib.suppress(Exception):
                await msg.nak()  # type: ignore[attr-defined]
        self._unacked.clear()
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()  # type: ignore[union-attr]

    async def ack(self, event: Envelope) -> None:
        """Done with this event: a follower that starts later resumes after it."""
        msg = self._unacked.pop(event.seq or 0, None)
        if msg is not None:
            await msg.ack_sync()  # type: ignore[attr-defined]

    async def __aiter__(self) -> AsyncIterator[Envelope]:
        wanted = set(self._types or ())
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        while True:
            try:
                msgs = await self._sub.fetch(self._batch, timeout=1.0)  # type: ignore[union-attr]
            except (FetchTimeoutError, NatsTimeout, asyncio.TimeoutError):
                if self._idle is not None and loop.time() - idle_since > self._idle:
                    return
                continue
            idle_since = loop.time()
            for msg in msgs:  # all of them: those not handed over yet are given back on exit too
                self._unacked[msg.metadata.sequence.stream] = msg
            for msg in msgs:
                seq = msg.metadata.sequence.stream
                event = decode_event(msg.data, seq=seq)
                if wanted and event.type not in wanted:
                    self._unacked.pop(seq, None)
                    await msg.ack()  # filtered out client side: nothing to hand over
                    continue
                yield event


async def follow_tenant(nc: NATS, creds: TenantCredential, *, from_seq: int | None = None,
                        types: list[str] | None = None, batch: int = 64,
                        idle_timeout: float | None = None) -> AsyncIterator[Envelope]:
    """Yield the tenant's events in stream order (``event.seq`` set), each acked once the caller asks for
    the next: the event being handled when the follower stops is delivered again next time. Ends after
    ``idle_timeout`` seconds without a new event (None: follow forever). Close it (``aclosing``) to hand
    unhandled events back at once."""
    async with TenantFollower(nc, creds, from_seq=from_seq, types=types, batch=batch,
                              idle_timeout=idle_timeout) as follower:
        async for event in follower:
            yield event
            await follower.ack(event)
