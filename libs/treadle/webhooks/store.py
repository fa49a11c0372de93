"""Endpoints in KV ``treadle-webhooks`` (key ``<tenant>.<endpoint>``) and delivery records in KV
``treadle-webhook-deliveries`` (key ``<tenant>.<endpoint>.<delivery>``, kept for a week). Every key starts with
the tenant, so one tenant's reads never reach another's records."""

from __future__ import annotations

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue

from treadle.core.ids import is_token

from .model import Delivery, Endpoint

ENDPOINTS_BUCKET = "treadle-webhooks"
DELIVERIES_BUCKET = "treadle-webhook-deliveries"


class _Bucket:
    def __init__(self, js: JetStreamContext, name: str) -> None:
        self._js, self._name = js, name
        self._kv: KeyValue | None = None

    async def kv(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._js.key_value(self._name)
        return self._kv

    async def keys(self, prefix: str) -> list[str]:
        """The keys under ``prefix``, filtered by the broker: the subjects the bucket's stream holds there, in one
        request. (A KV watch ends its first read on nats-py's marker, which can come before a key the broker
        already pushed: a listing then read empty.) A deleted key is still listed; its ``get`` is None."""
        kv_prefix = f"$KV.{self._name}."
        info = await self._js.stream_info(f"KV_{self._name}", subjects_filter=f"{kv_prefix}{prefix}>")
        return sorted(subject.removeprefix(kv_prefix) for subject in (info.state.subjects or {}))

    async def get(self, key: str) -> bytes | None:
        try:
            entry = await (await self.kv()).get(key)
        except (KeyNotFoundError, KeyDeletedError):  # never written, or deleted or purged since
            return None
        return entry.value or None


def _tokens(*values: str) -> str:
    if not all(is_token(v) for v in values):
        raise KeyError("not an id")
    return ".".join(values)


class EndpointStore:
    def __init__(self, js: JetStreamContext) -> None:
        self._bucket = _Bucket(js, ENDPOINTS_BUCKET)

    async def get(self, tenant: str, endpoint: str) -> Endpoint | None:
        try:
            key = _tokens(tenant, endpoint)
        except KeyError:
            return None
        raw = await self._bucket.get(key)
        return msgspec.json.decode(raw, type=Endpoint) if raw else None

    async def list(self, tenant: str) -> list[Endpoint]:
        found = []
        for key in await self._bucket.keys(_tokens(tenant) + "."):
            raw = await self._bucket.get(key)
            if raw:
                found.append(msgspec.json.decode(raw, type=Endpoint))
        return sorted(found, key=lambda e: e.created_at)

    async def put(self, endpoint: Endpoint) -> None:
        await (await self._bucket.kv()).put(_tokens(endpoint.tenant, endpoint.id), msgspec.json.encode(endpoint))

    async def delete(self, tenant: str, endpoint: str) -> bool:
        if await self.get(tenant, endpoint) is None:
            return False
        await (await self._bucket.kv()).purge(_tokens(tenant, endpoint))
        return True


class DeliveryStore:
    def __init__(self, js: JetStreamContext) -> None:
        self._bucket = _Bucket(js, DELIVERIES_BUCKET)

    async def get(self, tenant: str, endpoint: str, delivery: str) -> Delivery | None:
        try:
            key = _tokens(tenant, endpoint, delivery)
        except KeyError:
            return None
        raw = await self._bucket.get(key)
        return msgspec.json.decode(raw, type=Delivery) if raw else None

    async def put(self, delivery: Delivery) -> None:
        key = _tokens(delivery.tenant, delivery.endpoint, delivery.id)
        await (await self._bucket.kv()).put(key, msgspec.json.encode(delivery))

    async def list(self, tenant: str, endpoint: str, status: str | None = None, limit: int = 100) -> list[Delivery]:
        found = []
        for key in await self._bucket.keys(_tokens(tenant, endpoint) + "."):
            raw = await self._bucket.get(key)
            if raw:
                d = msgspec.json.decode(raw, type=Delivery)
                if status is None or d.status == status:
                    found.append(d)
        found.sort(key=lambda d: (d.created_at, d.seq), reverse=True)
        return found[:limit]
