"""Endpoints and deliveries, and the pure rules over them: which events an endpoint takes, the body Treadle
POSTs for an event, the retry schedule. No I/O here."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

import msgspec

from treadle.core.envelope import Envelope, Payload
from treadle.core.run.events import RunEnded
from treadle.core.thread.events import MessageDelta

DeliveryStatus = Literal["pending", "delivered", "failed"]
ANY_EVENT = "*"


class Endpoint(msgspec.Struct, kw_only=True, frozen=True):
    """A registered receiver. ``secret`` signs every delivery; it is never returned after creation."""

    id: str
    tenant: str
    url: str
    events: tuple[str, ...]
    threads: tuple[str, ...] = ()  # empty: every thread of the tenant
    secret: str
    description: str = ""
    enabled: bool = True
    created_at: datetime
    updated_at: datetime
    created_by: str = ""


class EndpointView(msgspec.Struct, kw_only=True, frozen=True):
    """An endpoint as the API shows it: everything but the secret."""

    id: str
    url: str
    events: tuple[str, ...]
    threads: tuple[str, ...]
    description: str
    enabled: bool
    created_at: datetime
    updated_at: datetime


def view(endpoint: Endpoint) -> EndpointView:
    return EndpointView(
        id=endpoint.id,
        url=endpoint.url,
        events=endpoint.events,
        threads=endpoint.threads,
        description=endpoint.description,
        enabled=endpoint.enabled,
        created_at=endpoint.created_at,
        updated_at=endpoint.updated_at,
    )


class Delivery(msgspec.Struct, kw_only=True):
    """One event for one endpoint: what was sent, how often, and how it ended."""

    id: str
    endpoint: str
    tenant: str
    thread: str
    event_id: str
    event_type: str
    seq: int
    status: DeliveryStatus = "pending"
    attempts: int = 0
    response_status: int | None = None
    error: str | None = None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None = None
    body: str = ""  # the JSON POSTed, kept for a replay


class DeliveryView(msgspec.Struct, kw_only=True, frozen=True):
    id: str
    endpoint: str
    thread: str
    event_id: str
    event_type: str
    seq: int
    status: DeliveryStatus
    attempts: int
    response_status: int | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None


def delivery_view(d: Delivery) -> DeliveryView:
    fields = msgspec.structs.asdict(d)
    fields.pop("body")
    fields.pop("tenant")
    return DeliveryView(**fields)


def matches(endpoint: Endpoint, event: Envelope) -> bool:
    """Whether ``endpoint`` takes ``event``: enabled, of its tenant, of a type it asked for, on a thread of its
    filter (if it has one)."""
    return (
        endpoint.enabled
        and endpoint.tenant == event.tenant
        and (ANY_EVENT in endpoint.events or event.type in endpoint.events)
        and (not endpoint.threads or event.thread in endpoint.threads)
    )


def as_sent(event: Envelope) -> list[Envelope]:
    """The events receivers get for ``event``. A run's end that carries its start (``RunEnded.started``) or its
    turn's last message (``RunEnded.message``), which replaced the ``run.started`` and ``message.completed``
    appended before it, is sent as those (ids ``<event id>.started`` and ``<event id>.message``, the run end's
    sequence), then as itself: an endpoint that asked for any of these types gets what it got before. So is a
    turn's first text carrying the run's start (``MessageDelta.started``): a ``run.started``, then itself."""
    carried: list[tuple[str, Payload | None]]
    if isinstance(event.data, MessageDelta) and event.data.started is not None:
        carried = [("started", event.data.started)]
    elif not isinstance(event.data, RunEnded) or (event.data.started is None and event.data.message is None):
        return [event]
    else:
        carried = [("started", event.data.started), ("message", event.data.message)]
    return [
        msgspec.structs.replace(event, id=f"{event.id}.{name}", type=payload.TYPE, data=payload)
        for name, payload in carried
        if payload is not None
    ] + [event]


def delivery_id(endpoint_id: str, event_id: str) -> str:
    """The same for every delivery attempt of one event to one endpoint, so a redelivered event (a crash before
    its ack) finds its record and a receiver can drop a duplicate by this id."""
    return "dlv_" + hashlib.sha256(f"{endpoint_id}\0{event_id}".encode()).hexdigest()[:26]


def body(event: Envelope, delivery: str) -> bytes:
    """The public view of ``event`` that is POSTed: its ids, type, sequence, time and payload."""
    document: dict[str, Any] = {
        "delivery_id": delivery,
        "event_id": event.id,
        "type": event.type,
        "tenant": event.tenant,
        "thread_id": event.thread,
        "seq": event.seq,
        "at": event.at,
        "data": event.data,
    }
    return msgspec.json.encode(document)


def backoff(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based): base·2^(n-1), at most ``cap``."""
    return float(min(cap, base * 2 ** max(0, attempt - 1)))


def schedule(base: float, cap: float, bound: float) -> list[float]:
    """The waits between attempts while their sum stays within ``bound`` seconds: after the last, a
    delivery still failing is dead-lettered."""
    waits: list[float] = []
    total = 0.0
    while True:
        wait = backoff(len(waits) + 1, base, cap)
        if total + wait > bound:
            return waits
        waits.append(wait)
        total += wait
