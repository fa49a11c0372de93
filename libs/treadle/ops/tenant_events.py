"""Follow one tenant's durable events straight from the broker, with the tenant's own consumer credential.

Other services of the platform (billing, notifications, analytics) use this instead of the HTTP API::

    from treadle.ops.tenant_events import TenantCredential, follow_tenant

    creds = TenantCredential.load("billing.creds.json")   # from `treadle consumers create --tenant acme`
    async with creds.connect() as nc, TenantFollower(nc, creds, types=["run.completed"]) as events:
        async for event in events:
            bill(event.tenant, event.data.run_id)
            await events.ack(event)                        # resume after this one next time

The credential owns one durable pull consumer on stream TREADLE_EVENTS, named after it and filtered on
``treadle.evt.<tenant>.>`` (or on one event type). The operator creates it with the credential and is the
only one who can recreate it (``treadle consumers reset``): a credential cannot create consumers, because
a consumer's create request could name a subject for the server to deliver to (see
:mod:`treadle.ops.broker_auth`). The broker remembers what was acked, so a follower that stops (or
crashes) and starts again resumes after the last event it acked: an event whose processing did not finish
is delivered again (at-least-once; ``event.seq`` is the stream sequence to deduplicate on). ``from_seq``
skips ahead to a stream sequence; going back to events already acked is the operator's ``reset``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, ConsumerInfo
from nats.js.errors import FetchTimeoutError, NotFoundError

from treadle.core.envelope import PAYLOADS, Envelope
from treadle.core.events import decode_event

from ..runtime import broker_urls

API_PREFIX = "treadle.js"  # where a credential's account imports its consumer's JetStream API


class TenantConsumerError(ValueError):
    """The credential's consumer cannot serve what was asked; the message says what the operator can do."""


class ConsumerMissing(TenantConsumerError):
    pass


class CannotReposition(TenantConsumerError):
    pass


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
    api_prefix: str = API_PREFIX  # the consumer's JetStream API inside the credential's account

    @classmethod
    def load(cls, path: str | Path) -> TenantCredential:
        return msgspec.json.decode(Path(path).read_bytes(), type=cls)

    @contextlib.asynccontextmanager
    async def connect(self, **options: Any) -> AsyncIterator[NATS]:
        """A connection as this credential (its own inbox prefix: the only inboxes it may read)."""
        servers = broker_urls.parse(self.url).servers  # a cluster's URL lists every node: any of them will do
        nc = await nats.connect(
            servers,
            user=self.user,
            password=self.password,
            inbox_prefix=self.inbox_prefix,
            name=f"treadle-consumer-{self.consumer}",
            **options,
        )
        try:
            yield nc
        finally:
            await nc.close()


def filters_for(tenant: str, types: list[str] | None) -> list[str]:
    """A credential consumer's filters: the whole tenant, or one event type (the broker filters on subjects;
    several types means the whole tenant, filtered client side). One type is two filters: events stored
    since the broker partitions threads end in the partition token, events of before do not
    (runtime/partitions.py)."""
    if types and len(types) == 1:
        (type_,) = types
        if type_ not in PAYLOADS:
            raise ValueError(f"unknown event type {type_!r}")
        return [f"treadle.evt.{tenant}.*.{type_}", f"treadle.evt.{tenant}.*.{type_}.*"]
    return [f"treadle.evt.{tenant}.>"]


def filters_of(config: ConsumerConfig) -> list[str]:
    return list(config.filter_subjects or [config.filter_subject or ""])


def filter_type(filters: list[str]) -> str | None:
    """The one (known) event type a consumer's filters select, or None for the whole tenant."""
    for filter_ in filters:
        parts = filter_.split(".")
        if len(parts) in (6, 7) and parts[3] == "*" and parts[4] + "." + parts[5] in PAYLOADS:
            return parts[4] + "." + parts[5]
    return None


async def check_consumer(
    nc: NATS, creds: TenantCredential, *, from_seq: int | None = None, types: list[str] | None = None
) -> ConsumerInfo:
    """The credential's consumer, if it can serve ``types`` from ``from_seq``; else a typed error that says
    what the operator has to do. Changes nothing."""
    js = nc.jetstream(prefix=creds.api_prefix)
    try:
        info: ConsumerInfo = await js.consumer_info(creds.stream, creds.consumer)
    except NotFoundError:
        raise ConsumerMissing(
            f"credential {creds.user} has no consumer on {creds.stream}: the operator creates it "
            f"with `treadle consumers reset {creds.user}`"
        ) from None
    only = filter_type(filters_of(info.config))
    if only is not None and types and only not in types:
        raise CannotReposition(
            f"the consumer of {creds.user} delivers {only} only, not {', '.join(types)}: the "
            f"operator can change it with `treadle consumers reset {creds.user} --type …`"
        )
    if from_seq is not None:
        first = max((info.ack_floor.stream_seq if info.ack_floor else 0) + 1, info.config.opt_start_seq or 1)
        if from_seq < first:
            raise CannotReposition(
                f"the consumer of {creds.user} is past stream sequence {from_seq} (next: {first}); "
                f"going back is `treadle consumers reset {creds.user} --from-seq {from_seq}`"
            )
    return info


class TenantFollower:
    """The tenant's events in stream order, each to be acked with :meth:`ack` once handled. Leaving the
    ``async with`` block hands every unacked event back to the broker at once (nak), so the next follower
    gets it immediately instead of after the ack wait::

        async with TenantFollower(nc, creds, types=["run.completed"]) as events:
            async for event in events:
                bill(event)
                await events.ack(event)
    """

    def __init__(
        self,
        nc: NATS,
        creds: TenantCredential,
        *,
        from_seq: int | None = None,
        types: list[str] | None = None,
        batch: int = 64,
        idle_timeout: float | None = None,
    ) -> None:
        self._nc, self._creds, self._from_seq, self._types = nc, creds, from_seq, types
        self._batch, self._idle = batch, idle_timeout
        self._unacked: dict[int, Msg] = {}  # stream seq -> message, fetched and not yet acked
        self._sub: JetStreamContext.PullSubscription | None = None  # bound by __aenter__

    async def __aenter__(self) -> TenantFollower:
        if self._types:
            for type_ in self._types:
                filters_for(self._creds.tenant, [type_])  # unknown types fail here, before anything is fetched
        await check_consumer(self._nc, self._creds, from_seq=self._from_seq, types=self._types)
        js = self._nc.jetstream(prefix=self._creds.api_prefix)
        self._sub = await js.pull_subscribe_bind(self._creds.consumer, stream=self._creds.stream)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for msg in list(self._unacked.values()):
            with contextlib.suppress(Exception):
                await msg.nak()
        self._unacked.clear()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    async def ack(self, event: Envelope) -> None:
        """Done with this event: a follower that starts later resumes after it."""
        msg = self._unacked.pop(event.seq or 0, None)
        if msg is not None:
            await msg.ack_sync()

    async def __aiter__(self) -> AsyncIterator[Envelope]:
        assert self._sub is not None, "a TenantFollower is iterated inside `async with`"
        sub = self._sub
        wanted = set(self._types or ())
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        while True:
            try:
                msgs = await sub.fetch(self._batch, timeout=1.0)
            except (TimeoutError, FetchTimeoutError, NatsTimeout):
                if self._idle is not None and loop.time() - idle_since > self._idle:
                    return
                continue
            idle_since = loop.time()
            for msg in msgs:  # all of them: those not handed over yet are given back on exit too
                self._unacked[msg.metadata.sequence.stream] = msg
            for msg in msgs:
                seq = msg.metadata.sequence.stream
                event = decode_event(msg.data, seq=seq)
                if (self._from_seq is not None and seq < self._from_seq) or (wanted and event.type not in wanted):
                    self._unacked.pop(seq, None)
                    await msg.ack()  # before from_seq or filtered out client side: nothing to hand over
                    continue
                yield event


async def follow_tenant(
    nc: NATS,
    creds: TenantCredential,
    *,
    from_seq: int | None = None,
    types: list[str] | None = None,
    batch: int = 64,
    idle_timeout: float | None = None,
) -> AsyncIterator[Envelope]:
    """Yield the tenant's events in stream order (``event.seq`` set), each acked once the caller asks for
    the next: the event being handled when the follower stops is delivered again next time. Events before
    ``from_seq`` are skipped (acked unseen); a ``from_seq`` already behind the consumer is a
    :class:`CannotReposition` (the operator's ``treadle consumers reset``). Ends after
    ``idle_timeout`` seconds without a new event (None: follow forever). Close it (``aclosing``) to hand
    unhandled events back at once."""
    async with TenantFollower(
        nc, creds, from_seq=from_seq, types=types, batch=batch, idle_timeout=idle_timeout
    ) as follower:
        async for event in follower:
            yield event
            await follower.ack(event)
