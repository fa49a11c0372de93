"""Webhook endpoints over HTTP, for a tenant's admins (docs/webhooks.md): ``/v1/webhooks`` and each one's
deliveries. Another tenant's endpoint is not found (404), never forbidden: its existence is not revealed."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import delete, get, patch, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody, QueryParameter

from treadle.runtime.settings import WebhooksSettings
from treadle.usecases import webhooks as usecase
from treadle.webhooks.addresses import AllowList
from treadle.webhooks.model import DeliveryView, EndpointView, delivery_view, view
from treadle.webhooks.sender import Limits
from treadle.webhooks.store import DeliveryStore, EndpointStore

from .deps import HttpRequest, Who, app_state
from .openapi import BODY, PARAMS, PATH_ID, errors
from .params import number
from .policy import admin

WEBHOOK = {404: ("webhook_not_found",)}
INVALID = {400: ("invalid_webhook",)}
QUOTA = {429: ("quota_exceeded",)}
REPLAY = {404: ("webhook_not_found", "delivery_not_found"), 409: ("delivery_pending",)}


class NewWebhook(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    url: str
    events: list[str]
    threads: list[str] = msgspec.field(default_factory=list)  # empty: every thread of the tenant
    secret: str | None = None  # none: Treadle makes one (answered once, in this creation's answer only)
    description: str = ""


class WebhookChange(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    url: str | None = None
    events: list[str] | None = None
    threads: list[str] | None = None
    secret: str | None = None
    description: str | None = None
    enabled: bool | None = None


class CreatedWebhook(msgspec.Struct, kw_only=True, frozen=True):
    webhook: EndpointView
    secret: str  # shown this once: every delivery is signed with it


class WebhookList(msgspec.Struct, kw_only=True, frozen=True):
    items: list[EndpointView]


class DeliveryList(msgspec.Struct, kw_only=True, frozen=True):
    items: list[DeliveryView]


class Webhooks:
    """The gateway's handles for webhooks, made once per app."""

    def __init__(self, state: State) -> None:
        js = state.nc.jetstream()
        settings = WebhooksSettings()
        self.endpoints, self.records = EndpointStore(js), DeliveryStore(js)
        self.allow = AllowList.parse(settings.allow_hosts)
        self.limits = Limits(settings.connect_timeout, settings.read_timeout, settings.max_response_bytes)
        self.max_endpoints = settings.max_endpoints_per_tenant


def _admin(request: HttpRequest, who: Who) -> Webhooks:
    """The webhook handles, for a tenant's admin only (403 otherwise): no route reaches them unchecked."""
    admin(request, who)
    state = app_state(request)
    if not isinstance(found := getattr(state, "webhooks", None), Webhooks):
        found = state.webhooks = Webhooks(state)
    return found


@post(
    "/v1/webhooks",
    status_code=201,
    summary="Register a webhook endpoint (admin); the answer holds its signing secret, shown only this once",
    tags=["webhooks"],
    responses=errors(BODY, INVALID, QUOTA),
)
async def create_webhook(request: HttpRequest, who: Who, data: JSONBody[NewWebhook]) -> CreatedWebhook:
    h = _admin(request, who)
    made = await usecase.create(
        h.endpoints,
        who.tenant,
        who.user,
        url=data.url,
        events=data.events,
        threads=data.threads,
        secret=data.secret,
        description=data.description,
        allow=h.allow,
        max_endpoints=h.max_endpoints,
    )
    return CreatedWebhook(webhook=view(made.endpoint), secret=made.secret)


@get("/v1/webhooks", summary="The tenant's webhook endpoints (admin)", tags=["webhooks"], responses=errors())
async def list_webhooks(request: HttpRequest, who: Who) -> WebhookList:
    return WebhookList(items=[view(e) for e in await _admin(request, who).endpoints.list(who.tenant)])


@get(
    "/v1/webhooks/{webhook_id:str}",
    summary="One webhook endpoint (admin)",
    tags=["webhooks"],
    responses=errors(PATH_ID, WEBHOOK),
)
async def get_webhook(request: HttpRequest, who: Who, webhook_id: FromPath[str]) -> EndpointView:
    return view(await usecase.get(_admin(request, who).endpoints, who.tenant, webhook_id))


@patch(
    "/v1/webhooks/{webhook_id:str}",
    summary="Change a webhook endpoint (admin): URL, events, thread filter, secret, description, enabled",
    tags=["webhooks"],
    responses=errors(BODY, PATH_ID, INVALID, WEBHOOK),
)
async def update_webhook(
    request: HttpRequest, who: Who, webhook_id: FromPath[str], data: JSONBody[WebhookChange]
) -> EndpointView:
    h = _admin(request, who)
    changed = await usecase.update(
        h.endpoints,
        who.tenant,
        webhook_id,
        url=data.url,
        events=data.events,
        threads=data.threads,
        secret=data.secret,
        description=data.description,
        enabled=data.enabled,
        allow=h.allow,
    )
    return view(changed)


@delete(
    "/v1/webhooks/{webhook_id:str}",
    status_code=200,
    summary="Delete a webhook endpoint (admin), answering what it was; deliveries being retried are dropped",
    tags=["webhooks"],
    responses=errors(PATH_ID, WEBHOOK),
)
async def delete_webhook(request: HttpRequest, who: Who, webhook_id: FromPath[str]) -> EndpointView:
    return view(await usecase.delete(_admin(request, who).endpoints, who.tenant, webhook_id))


@get(
    "/v1/webhooks/{webhook_id:str}/deliveries",
    summary="A webhook endpoint's deliveries, newest first (admin); status=failed lists the dead letters",
    tags=["webhooks"],
    responses=errors(PARAMS, PATH_ID, INVALID, WEBHOOK),
)
async def list_deliveries(
    request: HttpRequest,
    who: Who,
    webhook_id: FromPath[str],
    status: Annotated[str | None, QueryParameter(description="pending, delivered or failed")] = None,
    limit: Annotated[str | None, QueryParameter(description="at most this many, 1..500 (100)")] = None,
) -> DeliveryList:
    h = _admin(request, who)
    count = number(limit, "limit", low=1, high=500) or 100
    found = await usecase.deliveries(h.endpoints, h.records, who.tenant, webhook_id, status, count)
    return DeliveryList(items=[delivery_view(d) for d in found])


@post(
    "/v1/webhooks/{webhook_id:str}/deliveries/{delivery_id:str}/replay",
    status_code=200,
    summary="Send a finished (delivered or dead-lettered) delivery once more, now (admin)",
    tags=["webhooks"],
    responses=errors(PATH_ID, REPLAY),
)
async def replay_delivery(
    request: HttpRequest, who: Who, webhook_id: FromPath[str], delivery_id: FromPath[str]
) -> DeliveryView:
    h = _admin(request, who)
    record = await usecase.replay(h.endpoints, h.records, who.tenant, webhook_id, delivery_id, h.allow, h.limits)
    return delivery_view(record)


ROUTES = [create_webhook, list_webhooks, get_webhook, update_webhook, delete_webhook, list_deliveries, replay_delivery]
