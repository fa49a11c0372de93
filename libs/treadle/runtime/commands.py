"""Sending thread commands to the coordinator, with idempotency keys and retries: the command bus of every
worker that acts for a user (the gateway's routes and tools, the scheduler's firings). A refusal is a
``CommandRefused``, a ``DomainError`` carrying the status the coordinator (or this sender) gave it."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from treadle.core.commands import Accepted, Body, Command, Rejected, Reply
from treadle.core.errors import DomainError
from treadle.core.ids import new_id
from treadle.core.limits import check_sizes
from treadle.eventlog import subjects, tracing

_reply = msgspec.json.Decoder(Reply)
_encode = msgspec.json.Encoder().encode
MAX_KEY = 255
ENVELOPE_BYTES = 1024  # a command's id, tenant, user, thread and time around its body


class CommandRefused(DomainError):
    """The command was not taken: the coordinator's rejection, a bad Idempotency-Key, or no answer in time (503,
    retryable like the coordinator's own 429s and 503s)."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code, details=details)
        self.status = status


class IdempotencyRecord(msgspec.Struct, kw_only=True):
    command_id: str
    issued_at: datetime
    fingerprint: str


class CommandSender:
    def __init__(self, nc: NATS, timeout: float, policy_revision: Callable[[str], int] = lambda tenant: 0) -> None:
        self._nc = nc
        self._policy_revision = policy_revision  # the tenant policy's revision this replica knows
        self._js = nc.jetstream()
        self._timeout = timeout
        self._kv: KeyValue | None = None

    async def _identity(self, tenant: str, key: str | None, fingerprint: str) -> tuple[str, datetime]:
        """A fresh command id, or the one first minted for this tenant's Idempotency-Key (kept 24 h)."""
        now = datetime.now(UTC)
        if key is None:
            return new_id("cmd", int(now.timestamp() * 1000)), now
        if not 0 < len(key) <= MAX_KEY:
            raise CommandRefused(400, "invalid_idempotency_key", f"Idempotency-Key must be 1..{MAX_KEY} characters")
        if self._kv is None:
            self._kv = await self._js.key_value("treadle-idempotency")
        kv_key = f"{tenant}.{hashlib.sha256(key.encode()).hexdigest()[:40]}"
        record = IdempotencyRecord(
            command_id=new_id("cmd", int(now.timestamp() * 1000)), issued_at=now, fingerprint=fingerprint
        )
        try:
            await self._kv.create(kv_key, _encode(record))
            return record.command_id, now
        except KeyWrongLastSequenceError:
            pass
        try:
            entry = await self._kv.get(kv_key)
        except KeyNotFoundError:
            raise CommandRefused(409, "idempotency_conflict", "Idempotency-Key is being processed; retry") from None
        assert entry.value is not None  # created with a record above; a deleted key raises KeyNotFoundError
        stored = msgspec.json.decode(entry.value, type=IdempotencyRecord)
        if stored.fingerprint != fingerprint:
            raise CommandRefused(422, "idempotency_key_reused", "Idempotency-Key was used with a different request")
        return stored.command_id, stored.issued_at

    async def send(
        self, *, tenant: str, user: str, verb: str, thread: str | None, body: Body, idempotency_key: str | None
    ) -> Accepted:
        # Every size limit before anything reaches the broker: a command over its message limit would fail
        # to send, which reads as the broker being down (a 503 whose retry never succeeds).
        check_sizes(body)
        encoded = _encode(body)
        if len(encoded) + ENVELOPE_BYTES > self._nc.max_payload:  # the field limits keep within it: a backstop
            raise CommandRefused(
                413,
                "too_large",
                f"the command is {len(encoded)} bytes; the broker takes {self._nc.max_payload - ENVELOPE_BYTES}",
                {"limit": self._nc.max_payload - ENVELOPE_BYTES},
            )
        fingerprint = hashlib.sha256(f"{verb}|{thread}|".encode() + encoded).hexdigest()
        command_id, issued_at = await self._identity(tenant, idempotency_key, fingerprint)
        payload = _encode(
            Command(
                id=command_id,
                tenant=tenant,
                user=user,
                thread=thread,
                issued_at=issued_at,
                body=body,
                policy_revision=self._policy_revision(tenant),
            )
        )
        deadline = time.monotonic() + self._timeout
        delay = 0.05
        while True:
            try:
                # A retry carries the same command id: the coordinator answers it with the original receipt.
                msg = await self._nc.request(
                    subjects.command(tenant, verb),
                    payload,
                    timeout=max(0.1, min(2.0, deadline - time.monotonic())),
                    headers=tracing.inject(None),
                )
                reply = _reply.decode(msg.data)
                if isinstance(reply, Rejected):
                    if reply.status == 503 and time.monotonic() < deadline:
                        raise NatsTimeout
                    # a quota (retry when it frees) or the thread still busy at the deadline (retry soon): the
                    # gateway answers a 429 or 503 with Retry-After
                    raise CommandRefused(reply.status, reply.code, reply.message, reply.details)
                return reply
            except (TimeoutError, NatsTimeout, NoRespondersError):
                if time.monotonic() >= deadline:
                    raise CommandRefused(503, "unavailable", "the thread coordinator did not answer; retry") from None
                await asyncio.sleep(delay)  # backoff before re-sending the same command
                delay = min(delay * 2, 1.0)
