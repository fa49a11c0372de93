"""Per-token rate limits for the HTTP API: a token bucket per authenticated token (keyed by its token id),
and one per client address for every request without a token that resolves (no header, a malformed one,
an unknown or revoked token), answered with 429 and ``Retry-After`` when empty. Garbage Authorization
headers therefore share their address's bucket instead of minting a fresh one each.

Buckets live in the gateway process (each replica limits on its own, so the effective limit is the
replica count times this one); keys are token ids, so no token is kept in memory in the clear. Health,
metrics and the OpenAPI document are not limited.
"""

from __future__ import annotations

import math
import time

import msgspec
from litestar.enums import ScopeType
from litestar.types import ASGIApp, HTTPResponseBodyEvent, HTTPResponseStartEvent, Receive, Scope, Send

from treadle.ops.tokens import TokenStore, token_id

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


def bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return (token.strip() or None) if scheme.lower() == "bearer" else None
    return None


async def bucket_key(scope: Scope, tokens: TokenStore | None) -> str:
    """The token's id once it resolves to a principal (a cached lookup the route repeats), else the address."""
    token = bearer(scope)
    if token is not None and tokens is not None and await tokens.resolve(token) is not None:
        return "t:" + token_id(token)
    client = scope.get("client") or ("?", 0)
    return f"a:{client[0]}"


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, buckets: TokenBuckets) -> None:
        self.app, self.buckets = app, buckets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP and scope["path"].startswith(LIMITED_PREFIX) and self.buckets.rate > 0:
            tokens = getattr(scope["app"].state, "tokens", None)
            wait = self.buckets.take(await bucket_key(scope, tokens))
            if wait:
                retry = str(max(1, math.ceil(wait)))
                payload = msgspec.json.encode(
                    body(
                        "rate_limited",
                        "too many requests for this token; retry later",
                        {"retry_after_seconds": int(retry)},
                    )
                )
                start: HTTPResponseStartEvent = {
                    "type": "http.response.start",
                    "status": 429,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"retry-after", retry.encode()),
                        (b"content-length", str(len(payload)).encode()),
                    ],
                }
                await send(start)
                end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": payload, "more_body": False}
                await send(end)
                return
        await self.app(scope, receive, send)
