"""Per-token rate limits for every route that takes a credential or a sign-in (``/v1/``, ``/mcp``, the
console's ``/console/session``): a token bucket per credential that resolves (a user token by its id, a
provider session's MCP credential by its digest), and one per client address for everything else (no header,
a malformed one, an unknown, revoked or expired token, every console sign-in, whose token is in the body),
answered with 429 and ``Retry-After`` when empty. Guessed tokens and sign-ins therefore share their address's
bucket instead of minting a fresh one each.

Buckets live in the gateway process (each replica limits on its own, so the effective limit is the
replica count times this one); keys are token ids and digests, so no token is kept in memory in the clear.
Health, metrics and the OpenAPI document are not limited.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import msgspec
from litestar.enums import ScopeType
from litestar.types import ASGIApp, HTTPResponseBodyEvent, HTTPResponseStartEvent, Receive, Scope, Send

from treadle.ops.session_credentials import SessionCredentials, is_session_credential
from treadle.ops.tokens import TokenStore, digest, token_id

from .errors import body

SIGN_IN = "/console/session"
MCP = "/mcp"
MAX_BUCKETS = 100_000


class TokenBuckets:
    """``rate`` requests per second sustained, up to ``burst`` at once, per key."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
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


def route(scope: Scope) -> str:
    """The matched route's path (a mount sees its own remainder in ``scope["path"]``: ``/`` for ``/mcp``)."""
    handler = scope.get("route_handler")
    return next(iter(getattr(handler, "paths", None) or ()), scope["path"])


def limited(path: str) -> bool:
    return path.startswith("/v1/") or path in (MCP, SIGN_IN)


async def bucket_key(scope: Scope, tokens: TokenStore | None, credentials: SessionCredentials | None = None) -> str:
    """The credential's id once it resolves (a lookup the route repeats; only ``/mcp`` takes a session's
    credential), else the address."""
    token, path = bearer(scope), route(scope)
    if token is not None and path != SIGN_IN:
        if is_session_credential(token):
            if path == MCP and credentials is not None and await credentials.resolve(token) is not None:
                return "s:" + digest(token)
        elif tokens is not None and await tokens.resolve(token) is not None:
            return "t:" + token_id(token)
    client = scope.get("client") or ("?", 0)
    return f"a:{client[0]}"


def session_credentials(state: Any) -> SessionCredentials | None:
    """The app's one store of session credentials (its bucket handle is looked up once, not per request)."""
    store = getattr(state, "session_credentials", None)
    if store is None and getattr(state, "nc", None) is not None:
        store = state.session_credentials = SessionCredentials(state.nc.jetstream())
    return store


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, buckets: TokenBuckets) -> None:
        self.app, self.buckets = app, buckets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP and limited(route(scope)) and self.buckets.rate > 0:
            state = scope["app"].state
            key = await bucket_key(scope, getattr(state, "tokens", None), session_credentials(state))
            wait = self.buckets.take(key)
            if wait:
                retry = str(max(1, math.ceil(wait)))
                payload = msgspec.json.encode(
                    body(
                        "rate_limited",
                        "too many requests for this credential or client; retry later",
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
