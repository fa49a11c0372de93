"""Webhook endpoints, for a tenant's admins: register (the secret shown once), list, read, change, delete;
their delivery records and a dead letter's replay (docs/webhooks.md). Every refusal is a typed error and
changes nothing."""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime

import msgspec

from treadle.core.envelope import PAYLOADS
from treadle.core.errors import BadRequest, DomainError, NotFound, QuotaExceeded
from treadle.core.ids import is_id, new_id
from treadle.usecases.ids import checked
from treadle.webhooks.addresses import AllowList, UnsafeTarget, checked_addresses, parse_url
from treadle.webhooks.model import ANY_EVENT, Delivery, Endpoint
from treadle.webhooks.sender import Limits, post
from treadle.webhooks.store import DeliveryStore, EndpointStore

MAX_EVENTS = 64
MAX_THREADS = 100
SECRET_BYTES = 32
MIN_SECRET, MAX_SECRET = 16, 256
MAX_DESCRIPTION = 500


class EndpointNotFound(NotFound):
    code = "webhook_not_found"


class DeliveryNotFound(NotFound):
    code = "delivery_not_found"


class InvalidWebhook(BadRequest):
    code = "invalid_webhook"


class Created(msgspec.Struct, kw_only=True, frozen=True):
    endpoint: Endpoint
    secret: str


def _events(events: list[str]) -> tuple[str, ...]:
    if not 1 <= len(events) <= MAX_EVENTS:
        raise InvalidWebhook(f"events names 1 to {MAX_EVENTS} event types")
    unknown = [e for e in events if e != ANY_EVENT and e not in PAYLOADS]
    if unknown:
        raise InvalidWebhook(
            f"unknown event types: {', '.join(sorted(set(unknown))[:5])}", details={"unknown": unknown}
        )
    return tuple(dict.fromkeys(events))


def _threads(threads: list[str]) -> tuple[str, ...]:
    if len(threads) > MAX_THREADS or not all(is_id(t, "thr") for t in threads):
        raise InvalidWebhook(f"threads lists at most {MAX_THREADS} thread ids (thr_…)")
    return tuple(dict.fromkeys(threads))


async def checked_url(url: str, allow: AllowList) -> str:
    """A URL Treadle may send to: http(s), no userinfo, and not a refused address now (a name that does not
    resolve yet is let through: it is checked again at every delivery)."""
    try:
        target = parse_url(url)
        try:
            await checked_addresses(target, allow)
        except UnsafeTarget as exc:
            if "does not resolve" not in str(exc):
                raise
    except UnsafeTarget as exc:
        raise InvalidWebhook(str(exc)) from None
    return url


def _description(text: str) -> str:
    if len(text) > MAX_DESCRIPTION:
        raise InvalidWebhook(f"description is at most {MAX_DESCRIPTION} characters")
    return text


def _secret(given: str | None) -> str:
    if given is None:
        return "whsec_" + secrets.token_urlsafe(SECRET_BYTES)
    if not MIN_SECRET <= len(given) <= MAX_SECRET or not given.isprintable():
        raise InvalidWebhook(f"secret is {MIN_SECRET} to {MAX_SECRET} printable characters")
    return given


async def create(
    store: EndpointStore,
    tenant: str,
    user: str,
    *,
    url: str,
    events: list[str],
    threads: list[str],
    secret: str | None,
    description: str,
    allow: AllowList,
    max_endpoints: int,
) -> Created:
    checked = await checked_url(url, allow)
    endpoint_events, endpoint_threads = _events(events), _threads(threads)
    chosen_secret, text = _secret(secret), _description(description)
    existing = await store.list(tenant)
    if len(existing) >= max_endpoints:
        raise QuotaExceeded(
            f"this tenant already has {len(existing)} webhook endpoints",
            details={"quota": "webhook_endpoints", "limit": max_endpoints, "current": len(existing)},
        )
    now = datetime.now(UTC)
    endpoint = Endpoint(
        id=new_id("whk", int(time.time() * 1000)),
        tenant=tenant,
        url=checked,
        events=endpoint_events,
        threads=endpoint_threads,
        secret=chosen_secret,
        description=text,
        created_at=now,
        updated_at=now,
        created_by=user,
    )
    await store.put(endpoint)
    return Created(endpoint=endpoint, secret=chosen_secret)


async def get(store: EndpointStore, tenant: str, endpoint_id: str) -> Endpoint:
    found = await store.get(tenant, checked(endpoint_id, "whk"))
    if found is None:
        raise EndpointNotFound(f"webhook {endpoint_id} not found")
    return found


async def update(
    store: EndpointStore,
    tenant: str,
    endpoint_id: str,
    *,
    url: str | None,
    events: list[str] | None,
    threads: list[str] | None,
    secret: str | None,
    description: str | None,
    enabled: bool | None,
    allow: AllowList,
) -> Endpoint:
    current = await get(store, tenant, endpoint_id)
    changed = msgspec.structs.replace(
        current,
        url=current.url if url is None else await checked_url(url, allow),
        events=current.events if events is None else _events(events),
        threads=current.threads if threads is None else _threads(threads),
        secret=current.secret if secret is None else _secret(secret),
        description=current.description if description is None else _description(description),
        enabled=current.enabled if enabled is None else enabled,
        updated_at=datetime.now(UTC),
    )
    await store.put(changed)
    return changed


async def delete(store: EndpointStore, tenant: str, endpoint_id: str) -> Endpoint:
    found = await get(store, tenant, endpoint_id)
    if not await store.delete(tenant, endpoint_id):
        raise EndpointNotFound(f"webhook {endpoint_id} not found")
    return found


async def deliveries(
    store: EndpointStore, records: DeliveryStore, tenant: str, endpoint_id: str, status: str | None, limit: int
) -> list[Delivery]:
    await get(store, tenant, endpoint_id)
    if status not in (None, "pending", "delivered", "failed"):
        raise InvalidWebhook("status is pending, delivered or failed")
    return await records.list(tenant, endpoint_id, status, limit)


async def replay(
    store: EndpointStore,
    records: DeliveryStore,
    tenant: str,
    endpoint_id: str,
    delivery_id: str,
    allow: AllowList,
    limits: Limits,
) -> Delivery:
    """One more attempt of a delivery, now, to the endpoint's current URL and secret; the record says how it went
    (delivered, or failed again with the new error)."""
    endpoint = await get(store, tenant, endpoint_id)
    record = await records.get(tenant, endpoint_id, checked(delivery_id, "dlv"))
    if record is None:
        raise DeliveryNotFound(f"delivery {delivery_id} not found")
    if record.status == "pending":
        raise ReplayConflict("the delivery is still being retried")
    outcome = await post(endpoint.url, record.body.encode(), endpoint.secret, record.id, allow, limits)
    now = datetime.now(UTC)
    record.attempts += 1
    record.updated_at = now
    record.response_status, record.error = outcome.status, outcome.error
    record.status = "delivered" if outcome.ok else "failed"
    if outcome.ok:
        record.delivered_at = now
    await records.put(record)
    return record


class ReplayConflict(DomainError):
    code = "delivery_pending"
    status = 409
