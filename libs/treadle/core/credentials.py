"""Issue 21: a provider session's MCP credential, and when it stops being valid. Pure: the store (ops) keeps
only the credential's digest and this record, and asks :func:`refusal` with the time it read."""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

IDLE = timedelta(minutes=30)  # unused this long: refused (the session is probably reaped already)
LIFETIME = timedelta(hours=8)  # refused after this whatever its use
TOUCH_EVERY = timedelta(minutes=1)  # how stale the recorded last use may grow before a use writes it again


class SessionCredential(msgspec.Struct, kw_only=True, frozen=True):
    tenant: str
    thread: str
    session_id: str
    capabilities: tuple[str, ...]  # the tools it may call
    issued_at: datetime
    last_used_at: datetime
    idle_seconds: float = IDLE.total_seconds()
    lifetime_seconds: float = LIFETIME.total_seconds()
    # The provider host life that minted it (None: minted outside a host). It is valid only while that life is
    # the host's current one, and for the tools that life's setting still allows (see in_force).
    host_id: str | None = None
    boot_id: str | None = None


class MintingHost(msgspec.Struct, kw_only=True, frozen=True):
    """What the minting host publishes of itself in its heartbeat record, read at each call."""

    boot_id: str
    mcp_tools: tuple[str, ...] | None = None  # None: a host that publishes no tool setting


def in_force(credential: SessionCredential, host: MintingHost | None) -> SessionCredential | None:
    """The credential as its minting host's current setting allows it, or None when that life is over (the host
    restarted or is gone): a credential outlives no host life, and an operator's narrower tool setting applies
    to the next call, not only to the sessions opened after it."""
    if credential.host_id is None:
        return credential
    if host is None or host.boot_id != credential.boot_id:
        return None
    if host.mcp_tools is None:
        return credential
    allowed = tuple(tool for tool in credential.capabilities if tool in host.mcp_tools)
    return msgspec.structs.replace(credential, capabilities=allowed)


def refusal(credential: SessionCredential, now: datetime) -> str | None:
    """Why the credential is refused at ``now`` (``expired``, ``idle``), or None while it is valid."""
    if now - credential.issued_at >= timedelta(seconds=credential.lifetime_seconds):
        return "expired"
    if now - credential.last_used_at >= timedelta(seconds=credential.idle_seconds):
        return "idle"
    return None


def needs_touch(credential: SessionCredential, now: datetime) -> bool:
    return now - credential.last_used_at >= min(TOUCH_EVERY, timedelta(seconds=credential.idle_seconds / 4))
