"""Every tenant's webhook endpoints in memory, kept current by a watch of the endpoints bucket: matching an
event costs no broker round trip, and a new, changed or deleted endpoint applies to the next event. While the
watch is down (the broker restarting), the last index serves and the watch is opened again.

``wanted`` is set while any tenant has an endpoint: with none, the delivery partitions stand down (they keep no
consumer, so the events of a deployment without webhooks cost them nothing), and :meth:`since` says from when
a partition that takes up again has to read."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Any

import msgspec
from nats.js import JetStreamContext

from treadle.runtime import kv_follow
from treadle.webhooks.model import Endpoint
from treadle.webhooks.store import ENDPOINTS_BUCKET

_decoder = msgspec.json.Decoder(Endpoint)


class _Endpoints:
    """One index: the endpoints by tenant, and when the broker stored each (by its key)."""

    def __init__(self) -> None:
        self.by_tenant: dict[str, dict[str, Endpoint]] = {}
        self.stored_at: dict[str, datetime | None] = {}

    def put(self, key: str, endpoint: Endpoint, stored_at: datetime | None) -> None:
        tenant, _, name = key.partition(".")
        self.by_tenant.setdefault(tenant, {})[name] = endpoint
        self.stored_at[key] = stored_at

    def drop(self, key: str) -> None:
        tenant, _, endpoint = key.partition(".")
        endpoints = self.by_tenant.get(tenant)
        if endpoints is not None:
            endpoints.pop(endpoint, None)
            if not endpoints:
                del self.by_tenant[tenant]
        self.stored_at.pop(key, None)


class EndpointIndex:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._current = _Endpoints()
        self._fresh: _Endpoints | None = None  # the index a (re)opened watch is building
        self._task: asyncio.Task[Any] | None = None
        self.loaded = asyncio.Event()
        self.wanted = asyncio.Event()  # set while some tenant has an endpoint

    def of(self, tenant: str) -> list[Endpoint]:
        return list(self._current.by_tenant.get(tenant, {}).values())

    def any(self) -> bool:
        return bool(self._current.stored_at)

    def since(self) -> datetime | None:
        """When the oldest endpoint now in the index was stored (None: none, or the broker did not say): a
        partition that stood down reads again from there, so an endpoint created while it had no consumer still
        gets every event appended after its creation."""
        times = [t for t in self._current.stored_at.values() if t is not None]
        return min(times) if len(times) == len(self._current.stored_at) and times else None

    async def start(self, timeout: float = 30.0) -> None:
        self._task = asyncio.create_task(
            kv_follow.follow(self._js, ENDPOINTS_BUCKET, self._on), name="webhooks:endpoints"
        )
        await asyncio.wait_for(self.loaded.wait(), timeout)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _on(self, item: kv_follow.Record | kv_follow.Mark) -> None:
        """A (re)opened watch builds a fresh index from the stored endpoints and serves it once they are all in;
        the last index serves meanwhile."""
        if item is kv_follow.Mark.OPENED:
            self._fresh = _Endpoints()
            return
        if item is kv_follow.Mark.LOADED:
            if self._fresh is not None:
                self._current, self._fresh = self._fresh, None
                self.loaded.set()
        else:
            index = self._current if self._fresh is None else self._fresh
            if item.value is None:
                index.drop(item.key)
            else:
                index.put(item.key, _decoder.decode(item.value), item.stored_at)
        if self.any():
            self.wanted.set()
        else:
            self.wanted.clear()
