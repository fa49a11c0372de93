"""Per-session MCP credentials (issue 21): minted when a provider host opens a session, scoped to (tenant,
thread, session, tools), refused when idle or past their lifetime, deleted when the session is released.
Only the SHA-256 digest of a credential is a key; the secret itself is returned once, to the host that
injects it into the runtime's environment, and never stored or logged."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from treadle.core.credentials import SessionCredential, needs_touch, refusal
from treadle.core.ids import is_token

from .tokens import digest

BUCKET = "treadle-mcp-credentials"
PREFIX = "trs_"  # tells a session credential from a user token (trd_) at the door


def is_session_credential(token: str) -> bool:
    return token.startswith(PREFIX)


class SessionCredentials:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._js.key_value(BUCKET)
        return self._kv

    async def mint(
        self,
        *,
        tenant: str,
        thread: str,
        session_id: str,
        capabilities: tuple[str, ...],
        now: datetime | None = None,
        idle_seconds: float | None = None,
        lifetime_seconds: float | None = None,
    ) -> str:
        if not all(is_token(v) for v in (tenant, thread, session_id)):
            raise ValueError("tenant, thread and session must be tokens")
        now = now or datetime.now(UTC)
        limits = {"idle_seconds": idle_seconds, "lifetime_seconds": lifetime_seconds}
        record = SessionCredential(
            tenant=tenant,
            thread=thread,
            session_id=session_id,
            capabilities=capabilities,
            issued_at=now,
            last_used_at=now,
            **{k: v for k, v in limits.items() if v is not None},
        )
        token = PREFIX + secrets.token_urlsafe(32)
        kv = await self._bucket()
        await kv.put(f"c.{digest(token)}", msgspec.json.encode(record))
        await kv.put(f"s.{session_id}", digest(token).encode())  # what a release deletes
        return token

    async def resolve(self, token: str, now: datetime | None = None) -> SessionCredential | None:
        """The credential's record while it is valid; None when unknown, revoked, idle or expired."""
        now = now or datetime.now(UTC)
        kv = await self._bucket()
        key = f"c.{digest(token)}"
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        record = msgspec.json.decode(entry.value, type=SessionCredential)
        if refusal(record, now) is not None:
            return None
        if needs_touch(record, now):
            await kv.put(key, msgspec.json.encode(msgspec.structs.replace(record, last_used_at=now)))
        return record

    async def revoke_session(self, session_id: str) -> bool:
        """Delete the session's credential (at release); False when it had none."""
        kv = await self._bucket()
        try:
            entry = await kv.get(f"s.{session_id}")
        except KeyNotFoundError:
            return False
        if not entry.value:
            return False
        await kv.delete(f"c.{entry.value.decode()}")
        await kv.delete(f"s.{session_id}")
        return True
