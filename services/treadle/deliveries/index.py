"""Every tenant's webhook endpoints in memory, kept current by a watch of the endpoints bucket: matching an
event costs no broker round trip, and a new, changed or deleted endpoint applies to the next event. While the
watch is down (the broker restarting), the last index serves and the watch is opened again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import msgspec
from nats.js import JetStreamContext

from treadle.webhooks.model import Endpoint
from treadle.webhooks.store import ENDPOINTS_BUCKET

log = logging.getLogger(__name__)
_decoder = msgspec.json.Decoder(Endpoint)


class EndpointIndex:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._by_tenant: dict[str, dict[str, Endpoint]] = {}
        self._task: asyncio.Task[Any] | None = None
        self.loaded = asyncio.Event()

    def of(self, tenant: str) -> list[Endpoint]:
        return list(self._by_tenant.get(tenant, {}).values())

    async def start(self, timeout: float = 30.0) -> None:
        self._task = asyncio.create_task(self._follow(), name="webhooks:endpoints")
        await asyncio.wait_for(self.loaded.wait(), timeout)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self) -> None:
        while True:
            try:
                await self._watch()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("endpoint watch ended, opening it again: %r", exc)
            await asyncio.sleep(1.0)  # backoff while the broker is away

    async def _watch(self) -> None:
        kv = await self._js.key_value(ENDPOINTS_BUCKET)
        watcher = await kv.watchall()
        fresh: dict[str, dict[str, Endpoint]] = {}
        initial = True
        try:
            async for entry in watcher:
                if entry is None:  # the stored endpoints are all in: serve them
                    if initial:
                        self._by_tenant, initial = fresh, False
                        self.loaded.set()
                    continue
                index = fresh if initial else self._by_tenant
                tenant, _, endpoint = entry.key.partition(".")
                if entry.operation in ("DEL", "PURGE") or not entry.value:
                    index.get(tenant, {}).pop(endpoint, None)
                else:
                    index.setdefault(tenant, {})[endpoint] = _decoder.decode(entry.value)
        finally:
            await watcher.stop()
