"""Every tenant's webhook endpoints in memory, kept current by a watch of the endpoints bucket: matching an
event costs no broker round trip, and a new, changed or deleted endpoint applies to the next event. While the
watch is down (the broker restarting), the last index serves and the watch is opened again."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
from nats.js import JetStreamContext

from treadle.runtime import kv_follow
from treadle.webhooks.model import Endpoint
from treadle.webhooks.store import ENDPOINTS_BUCKET

_decoder = msgspec.json.Decoder(Endpoint)


class EndpointIndex:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._by_tenant: dict[str, dict[str, Endpoint]] = {}
        self._fresh: dict[str, dict[str, Endpoint]] | None = None  # the index a (re)opened watch is building
        self._task: asyncio.Task[Any] | None = None
        self.loaded = asyncio.Event()

    def of(self, tenant: str) -> list[Endpoint]:
        return list(self._by_tenant.get(tenant, {}).values())

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
            self._fresh = {}
        elif item is kv_follow.Mark.LOADED:
            if self._fresh is not None:
                self._by_tenant, self._fresh = self._fresh, None
                self.loaded.set()
        else:
            index = self._by_tenant if self._fresh is None else self._fresh
            tenant, _, endpoint = item.key.partition(".")
            if item.value is None:
                index.get(tenant, {}).pop(endpoint, None)
            else:
                index.setdefault(tenant, {})[endpoint] = _decoder.decode(item.value)
