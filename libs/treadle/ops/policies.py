"""Tenant policies (core/policy.py) in KV ``treadle-policies``, one key per tenant; a tenant without one
has the default policy. Every change is audited (``policy.updated``)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from treadle.core.ids import is_token
from treadle.core.policy import TenantPolicy, validated
from treadle.eventlog.kv_bucket import LazyBucket

from . import audit

BUCKET = "treadle-policies"


class PolicyStore:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._bucket = LazyBucket(js, BUCKET)

    async def get(self, tenant: str) -> TenantPolicy:
        """Read on every decision that needs it, so a change applies to the next command: a direct get where the
        bucket has one replica, else a read of the stream's leader (``streams.DIRECT``)."""
        try:
            entry = await (await self._bucket()).get(tenant)
        except KeyNotFoundError:
            return TenantPolicy()
        return msgspec.json.decode(entry.value, type=TenantPolicy) if entry.value else TenantPolicy()

    @property
    def js(self) -> JetStreamContext:
        return self._js

    async def put(self, tenant: str, policy: TenantPolicy, actor: str) -> TenantPolicy:
        return (await self.write(tenant, policy, actor))[0]

    async def write(self, tenant: str, policy: TenantPolicy, actor: str) -> tuple[TenantPolicy, int]:
        """``put`` that also tells the stored revision (a cache orders its own write against the watch's)."""
        if not is_token(tenant):
            raise ValueError(f"tenant {tenant!r} is not a token ([A-Za-z0-9_-], 1..64 characters)")
        stored = msgspec.structs.replace(validated(policy), updated_at=datetime.now(UTC), updated_by=actor)
        revision = await (await self._bucket()).put(tenant, msgspec.json.encode(stored))
        await audit.record(
            self._js,
            tenant=tenant,
            action="policy.updated",
            target=tenant,
            actor=actor,
            details={  # what it allows: every field but the stamp
                k: list(v) if isinstance(v, tuple) else v
                for k, v in msgspec.structs.asdict(stored).items()
                if k not in ("updated_at", "updated_by")
            },
        )
        return stored, revision
