"""Per-session MCP credentials (issue 21): minted when a provider host opens a session, scoped to (tenant,
thread, session, tools), refused when idle or past their lifetime, deleted whenever the session is reported
stopped, and valid only while the host life that minted them is the host's current one (its heartbeat record
names its boot and its tool setting, read at each call: a restart or a narrower setting ends or narrows every
credential of the host at once, whichever gateway replica answers). Only the SHA-256 digest of a credential
is a key; the secret itself is returned once, to the host that injects it into the runtime's environment, and
never stored or logged."""

from __future__ import annotations

import contextlib
import secrets
from datetime import UTC, datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from treadle.core.credentials import MintingHost, SessionCredential, in_force, needs_touch, refusal
from treadle.core.ids import is_token
from treadle.eventlog.kv_bucket import LazyBucket
from treadle.eventlog.kv_latest import latest

from .tokens import digest

BUCKET = "treadle-mcp-credentials"
HOSTS = "treadle-hosts"  # the provider hosts' heartbeat records (provider_host/registry.py)
PREFIX = "trs_"  # tells a session credential from a user token (trd_) at the door


def is_session_credential(token: str) -> bool:
    return token.startswith(PREFIX)


class SessionCredentials:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._bucket = LazyBucket(js, BUCKET)
        self._hosts = LazyBucket(js, HOSTS)

    async def _minting_host(self, host_id: str) -> MintingHost | None:
        try:
            entry = await (await self._hosts()).get(host_id)
        except KeyNotFoundError:
            return None
        return msgspec.json.decode(entry.value, type=MintingHost) if entry.value else None

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
        host_id: str | None = None,
        boot_id: str | None = None,
    ) -> str:
        """``host_id``/``boot_id``: the host life minting it (a provider host always names itself)."""
        if not all(is_token(v) for v in (tenant, thread, session_id)):
            raise ValueError("tenant, thread and session must be tokens")
        if (host_id is None) != (boot_id is None) or not all(is_token(v) for v in (host_id, boot_id) if v):
            raise ValueError("a minting host names its id and its boot, both tokens")
        now = now or datetime.now(UTC)
        limits = {"idle_seconds": idle_seconds, "lifetime_seconds": lifetime_seconds}
        record = SessionCredential(
            tenant=tenant,
            thread=thread,
            session_id=session_id,
            capabilities=capabilities,
            issued_at=now,
            last_used_at=now,
            host_id=host_id,
            boot_id=boot_id,
            **{k: v for k, v in limits.items() if v is not None},
        )
        token = PREFIX + secrets.token_urlsafe(32)
        kv = await self._bucket()
        if host_id is not None:  # first: a host that dies mid-mint leaves this for its next life's sweep
            await kv.put(f"h.{host_id}.{session_id}", msgspec.json.encode(_Minted(digest(token), boot_id or "")))
        await kv.put(f"c.{digest(token)}", msgspec.json.encode(record))
        await kv.put(f"s.{session_id}", digest(token).encode())  # what a release deletes
        return token

    async def resolve(self, token: str, now: datetime | None = None) -> SessionCredential | None:
        """The credential's record while it is valid, with the tools its host's current setting allows; None when
        unknown, revoked, idle, expired, or its host life is over."""
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
        current = in_force(record, await self._minting_host(record.host_id) if record.host_id else None)
        if current is None:
            return None
        if needs_touch(record, now):
            await kv.put(key, msgspec.json.encode(msgspec.structs.replace(record, last_used_at=now)))
        return current

    async def revoke_session(self, session_id: str) -> bool:
        """Delete the session's credential (whenever the session is reported stopped); False when it had none."""
        kv = await self._bucket()
        try:
            entry = await kv.get(f"s.{session_id}")
        except KeyNotFoundError:
            return False
        if not entry.value:
            return False
        key = f"c.{entry.value.decode()}"
        with contextlib.suppress(KeyNotFoundError):
            record = await kv.get(key)
            if record.value:
                host_id = msgspec.json.decode(record.value, type=SessionCredential).host_id
                if host_id is not None:
                    await kv.delete(f"h.{host_id}.{session_id}")
        await kv.delete(key)
        await kv.delete(f"s.{session_id}")
        return True

    async def sweep_host(self, host_id: str, boot_id: str) -> int:
        """At a host's start: delete every credential its earlier lives minted (a crash revoked none of them,
        and one minted just before the crash has no session record to be reported by). Returns how many."""
        kv = await self._bucket()
        swept = 0
        for key, entry in (await latest(self._js, BUCKET, f"h.{host_id}.>")).items():
            minted = msgspec.json.decode(entry.value, type=_Minted)
            if minted.boot_id == boot_id:
                continue
            session_id = key.rsplit(".", 1)[1]
            await kv.delete(f"c.{minted.digest}")
            with contextlib.suppress(KeyNotFoundError):
                if (await kv.get(f"s.{session_id}")).value == minted.digest.encode():
                    await kv.delete(f"s.{session_id}")
            await kv.delete(key)
            swept += 1
        return swept


class _Minted(msgspec.Struct, array_like=True, frozen=True):
    """``h.<host>.<session>``: which credential a host life minted, for that host's next start."""

    digest: str
    boot_id: str
