"""API tokens: random bearer secrets stored only as SHA-256 digests in KV ``treadle-tokens``.

A token is never compared with anything: it is hashed and the digest is the lookup key, so the time a
lookup takes does not depend on how much of a guess matches a real token. Creation and revocation are
audited (:mod:`treadle.ops.audit`); a revoked token stops working within the gateways' cache time."""

from __future__ import annotations

import hashlib
import secrets
import time
from datetime import UTC, datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import KeyNotFoundError

from treadle.core.ids import is_token
from treadle.core.policy import ROLES
from treadle.eventlog.kv_bucket import LazyBucket

from . import audit

BUCKET = "treadle-tokens"
PREFIX = "trd_"


class Principal(msgspec.Struct, kw_only=True, frozen=True):
    tenant: str
    user: str
    role: str = "member"
    created_at: str = ""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_id(token: str) -> str:
    """A token's public name (audit records, ``treadle tokens revoke --id``): a prefix of its digest."""
    return digest(token)[:16]


class UnknownToken(LookupError):
    pass


class TokenStore:
    def __init__(self, js: JetStreamContext, cache_seconds: float = 5.0) -> None:
        self._js = js
        self._bucket = LazyBucket(js, BUCKET)
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._ttl = cache_seconds

    async def create(self, tenant: str, user: str, role: str = "member") -> str:
        if not (is_token(tenant) and is_token(user)):
            raise ValueError("tenant and user must be tokens ([A-Za-z0-9_-], 1..64 characters)")
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        token = PREFIX + secrets.token_urlsafe(32)
        principal = Principal(tenant=tenant, user=user, role=role, created_at=datetime.now(UTC).isoformat())
        await (await self._bucket()).put(digest(token), msgspec.json.encode(principal))
        await audit.record(
            self._js,
            tenant=tenant,
            action="token.created",
            target=token_id(token),
            details={"user": user, "role": role},
        )
        return token

    async def revoke(self, token: str | None = None, *, id: str | None = None) -> Principal:
        """Delete a token, given the token itself or its id; returns whom it belonged to."""
        kv = await self._bucket()
        if token is not None:
            key = digest(token)
        else:
            if not id or len(id) < 8 or any(c not in "0123456789abcdef" for c in id):
                raise UnknownToken(f"{id!r} is not a token id (hex digits, at least 8)")
            keys = [k for k in await _keys(self._js) if k.startswith(id)]
            if len(keys) != 1:
                raise UnknownToken(f"no token with id {id}" if not keys else f"token id {id} is ambiguous")
            key = keys[0]
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            raise UnknownToken("unknown or already revoked token") from None
        if not entry.value:
            raise UnknownToken("unknown or already revoked token")
        principal = msgspec.json.decode(entry.value, type=Principal)
        await kv.delete(key)
        self._cache.pop(key, None)
        await audit.record(
            self._js, tenant=principal.tenant, action="token.revoked", target=key[:16], details={"user": principal.user}
        )
        return principal

    async def resolve(self, token: str) -> Principal | None:
        """The principal of a bearer token; lookups are by digest, so no secret is ever compared directly."""
        return await self.resolve_digest(digest(token))

    async def resolve_digest(self, key: str) -> Principal | None:
        """The principal of the token with this digest (a console session keeps only the digest)."""
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


async def _keys(js: JetStreamContext) -> list[str]:
    """The bucket's live keys. Not ``KeyValue.keys()``: its watcher may signal the end before the entries it was
    delivered (it compares the consumer's pending count with what has reached the client), and then lists none:
    a token made a moment before could not be revoked by its id. A pull consumer is read until it has no more."""
    stream, prefix = f"KV_{BUCKET}", f"$KV.{BUCKET}."
    config = ConsumerConfig(
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=AckPolicy.NONE,
        headers_only=True,
        inactive_threshold=30,
    )
    sub = await js.pull_subscribe(prefix + ">", stream=stream, config=config)
    try:
        keys, pending = [], (await sub.consumer_info()).num_pending
        while pending:
            for msg in await sub.fetch(min(pending, 256), timeout=5):
                pending = msg.metadata.num_pending
                if (msg.headers or {}).get("KV-Operation") not in ("DEL", "PURGE"):
                    keys.append(msg.subject[len(prefix) :])
        return keys
    finally:
        await sub.unsubscribe()
