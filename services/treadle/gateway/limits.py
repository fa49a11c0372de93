"""Per-token rate limits for the HTTP API: a token bucket per bearer token (per client address for
requests without one), answered with 429 and ``Retry-After`` when empty.

Buckets live in the gateway process (each replica limits on its own, so the effective limit is the
replica count times this one); keys are digests, so no token is kept in memory in the clear. Health,
metrics and the OpenAPI document are not limited.
"""

from __future__ import annotations

import hashlib
import math
import time

import msgspec
from litestar.types import ASGIApp, Receive, Scope, Send

from .errors import body

LIMITED_PREFIX = "/v1/"
MAX_BUCKETS = 100_000


class TokenBuckets:
    """``rate`` requests per second sustained, up to ``burst`` at once, per key."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic) -> None:
        self.rate, self.burst, self._clock = rate, max(burst, 1), clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str) -> float:
        """Spend one request; returns 0 when allowed, else the seconds until one is available."""
        now = self._clock()
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens >= 1:
            if len(self._buckets) >= MAX_BUCKETS and key not in self._buckets:
                self._buckets.clear()  # bounded memory: forgetting buckets only ever lets requests through
            self._buckets[key] = (tokens - 1, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1 - tokens) / self.rate


def _key(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return "t:" + hashlib.sha256(value).hexdigest()
    client = scope.get("client") or ("?", 0)
    return f"a:{client[0]}"


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, buckets: TokenBuckets) -> None:
        self.app, self.buckets = app, buckets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(LIMITED_PREFIX) and self.buckets.rate > 0:
            wait = self.buckets.take(_key(scope))
            if wait:
                retry = str(max(1, math.ceil(wait)))
                payload = msgspec.json.encode(body("rate_limited", "too many requests for this token; retry later",
                                                   {"retry_after_seconds": int(retry)}))
                await send({"type": "http.response.start", "status": 429,
                            "headers": [(b"content-type", b"application/json"), (b"retry-after", retry.encode()),
                                        (b"content-length", str(len(payload)).encode())]})
                await send({"type": "http.response.body", "body": payload})
                return
        await self.app(scope, receive, send)
