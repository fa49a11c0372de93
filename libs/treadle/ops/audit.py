"""The audit trail of security-relevant operations (API tokens and broker credentials issued or revoked, a
thread's data erased):
stream ``TREADLE_AUDIT`` on ``treadle.audit.<tenant>.<action>``, one JSON record per operation.

A stream of its own, not TREADLE_EVENTS: these are facts about a tenant's access, not about a thread, and
tenant consumer credentials (which may read ``treadle.evt.<tenant>.>``) cannot read them.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from treadle.core.ids import is_token, new_id

from ..eventlog import streams

STREAM = streams.AUDIT_STREAM
ACTIONS = (
    "token.created",
    "token.revoked",
    "broker_credential.created",
    "broker_credential.revoked",
    "broker_credential.reset",
    "policy.updated",
    "thread.deleted",  # its data erased (L1.4): the thread's own log keeps its tombstone alone
)


class AuditRecord(msgspec.Struct, kw_only=True):
    """One audited operation. ``target`` names what it was about without revealing a secret: a token's
    id (the first 16 hex digits of its SHA-256 digest) or a broker credential's id."""

    id: str
    at: datetime
    tenant: str
    action: str
    actor: str
    target: str
    details: dict[str, Any] = {}


def subject(tenant: str, action: str) -> str:
    if not is_token(tenant) or action not in ACTIONS:
        raise ValueError(f"bad audit subject for tenant {tenant!r}, action {action!r}")
    return f"treadle.audit.{tenant}.{action}"


async def ensure(js: JetStreamContext) -> None:
    """Create the stream when missing (the CLI may audit before any worker ran); an existing one is the
    workers' to configure (``streams.ensure``: its replicas are the deployment's, not known here)."""
    try:
        await js.stream_info(STREAM)
    except NotFoundError:
        await streams.ensure_stream(js, streams.AUDIT)


async def record(
    js: JetStreamContext,
    *,
    tenant: str,
    action: str,
    target: str,
    actor: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditRecord:
    """Append one record (after making sure the stream exists; audited operations are rare)."""
    await streams.settled(lambda: ensure(js))
    now = datetime.now(UTC)
    entry = AuditRecord(
        id=new_id("evt", int(now.timestamp() * 1000)),
        at=now,
        tenant=tenant,
        action=action,
        actor=actor or _operator(),
        target=target,
        details=details or {},
    )
    # Repeated with the same Nats-Msg-Id while a cluster elects a leader: a copy that landed is dropped.
    payload = msgspec.json.encode(entry)
    await streams.settled(lambda: js.publish(subject(tenant, action), payload, headers={"Nats-Msg-Id": entry.id}))
    return entry


def _operator() -> str:
    return "operator:" + (os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown")
