"""Schedules in KV ``treadle-schedules``, one key per schedule: ``<tenant>.<schedule id>``. A tenant reads and
writes only its own keys (a schedule of another tenant is ``schedule_not_found``). Every write after the first
is fenced on the revision it read, so the scheduler's record of a firing and a user's edit never overwrite
each other: the loser reads again and decides again."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from treadle.api.schedules import Schedule
from treadle.core.errors import Conflict, NotFound
from treadle.core.ids import is_id, is_token
from treadle.eventlog.kv_bucket import LazyBucket

BUCKET = "treadle-schedules"
_decode = msgspec.json.Decoder(Schedule).decode


def key(tenant: str, schedule_id: str) -> str:
    if not is_token(tenant) or not is_id(schedule_id, "sch"):
        raise NotFound(f"schedule {schedule_id!r} not found", code="schedule_not_found")
    return f"{tenant}.{schedule_id}"


class Stale(Exception):
    """The record changed since it was read (another replica fired it, or a user edited it)."""


class ScheduleStore:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._bucket = LazyBucket(js, BUCKET)

    async def create(self, tenant: str, schedule: Schedule) -> int:
        return await (await self._bucket()).create(key(tenant, schedule.schedule_id), msgspec.json.encode(schedule))

    async def get(self, tenant: str, schedule_id: str) -> tuple[Schedule, int]:
        try:
            entry = await (await self._bucket()).get(key(tenant, schedule_id))
        except KeyNotFoundError:
            raise NotFound(f"schedule {schedule_id} not found", code="schedule_not_found") from None
        if not entry.value:
            raise NotFound(f"schedule {schedule_id} not found", code="schedule_not_found")
        return _decode(entry.value), entry.revision or 0

    async def replace(self, tenant: str, schedule: Schedule, revision: int) -> int:
        """Writes the record if it is still at ``revision``; ``Stale`` otherwise."""
        try:
            return await (await self._bucket()).update(
                key(tenant, schedule.schedule_id), msgspec.json.encode(schedule), last=revision
            )
        except KeyWrongLastSequenceError:
            raise Stale(schedule.schedule_id) from None

    async def update(self, tenant: str, schedule: Schedule, revision: int) -> int:
        """``replace`` for a user: a record that changed under them is a 409 to retry."""
        try:
            return await self.replace(tenant, schedule, revision)
        except Stale:
            raise Conflict("the schedule changed meanwhile; read it and retry", code="schedule_changed") from None

    async def delete(self, tenant: str, schedule_id: str) -> None:
        await self.get(tenant, schedule_id)  # a 404 for a schedule of no one's
        await (await self._bucket()).delete(key(tenant, schedule_id))

    async def of_tenant(self, tenant: str) -> list[Schedule]:
        if not is_token(tenant):
            return []
        return [s for _, s, _ in await self.entries(f"{tenant}.*")]

    async def entries(self, pattern: str = "*.*") -> Sequence[tuple[str, Schedule, int]]:
        """(tenant, schedule, revision) of every live key matching ``pattern``. Read with a pull consumer to the
        end, not ``KeyValue.keys()`` (its end marker may come before its entries; see ``ops.tokens``)."""
        stream, prefix = f"KV_{BUCKET}", f"$KV.{BUCKET}."
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, ack_policy=AckPolicy.NONE, inactive_threshold=30
        )
        sub = await self._js.pull_subscribe(prefix + pattern, stream=stream, config=config)
        found: list[tuple[str, Schedule, int]] = []
        try:
            pending = (await sub.consumer_info()).num_pending
            while pending:
                for msg in await sub.fetch(min(pending, 256), timeout=5):
                    pending = msg.metadata.num_pending
                    if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE") or not msg.data:
                        continue
                    tenant = msg.subject[len(prefix) :].split(".", 1)[0]
                    found.append((tenant, _decode(msg.data), msg.metadata.sequence.stream))
            return found
        finally:
            await sub.unsubscribe()
