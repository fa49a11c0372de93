"""A KV bucket bound on its first use: stores are made before the broker's buckets are known to exist (a worker
starts them first, ``streams.ensure`` makes the buckets), and binding asks the broker once."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.kv import KeyValue


class LazyBucket:
    def __init__(self, js: JetStreamContext, name: str) -> None:
        self._js = js
        self._name = name
        self._kv: KeyValue | None = None

    async def __call__(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._js.key_value(self._name)
        return self._kv
