"""API tokens: random bearer secrets stored only as SHA-256 digests in KV ``treadle-tokens``."""

from __future__ import annotations

import hashlib
import secrets
import time
from datetime import datetime, timezone

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from ..domain.ids import is_token

BUCKET = "treadle-tokens"
PREFIX = "trd_"


class Principal(msgspec.Struct, kw_only=True, frozen=True):
    tenant: str
    user: str
    role: str = "member"
    created_at: str = ""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    def __init__(self, js: JetStreamContext, cache_seconds: float = 5.0) -> None:
        self._js = js
        self._kv = None
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._ttl = cache_seconds

    async def _bucket(self):
        if self._kv is None:
            self._kv = await self._js.key_value(BUCKET)
        return self._kv

    async def create(self, tenant: str, user: str, role: str = "member") -> str:
        if not (is_token(tenant) and is_token(user)):
            raise ValueError("tenant and user must be tokens ([A-Za-z0-9_-], 1..64 characters)")
        token = PREFIX + secrets.token_urlsafe(32)
        principal = Principal(tenant=tenant, user=user, role=role, created_at=datetime.now(timezone.utc).isoformat())
        await (await self._bucket()).put(digest(token), msgspec.json.encode(principal))
        return token

    async def resolve(self, token: str) -> Principal | None:
        """The principal of a bearer token; lookups are by digest, so no secret is ever compared directly."""
        key = digest(token)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            entry = await (await self._bucket()).get(key)
            principal = msgspec.json.decode(entry.value, type=Principal) if entry.value else None
        except KeyNotFoundError:
            principal = None
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = (now + self._ttl, principal)
        return principal
