"""The scheduler: makes the firings of due schedules (docs/schedules.md).

Exactly once, across replicas and restarts, by two fences. A schedule belongs to one partition (its thread's;
a tenant schedule's own id's),
and a replica looks only at the schedules of the partitions it leases (``runtime.leases``), so replicas do
not race in the common case. Each firing is sent with the Idempotency-Key ``schedule:<id>:<planned time>``,
so a second sender (a replica taking over mid-firing, a restart between the send and the record) gets the
first one's receipt instead of a second run. The record of the firing (the next planned time) is written
fenced on the revision read; a loser sees the winner's record through its watch of the bucket.

A firing goes through ``usecases.messages.send`` (and ``usecases.threads.create`` for a tenant schedule) as
the schedule's creator: the tenant's policy and quotas decide it as they decide a user's message."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client as NATS

from treadle.api import CreateThreadRequest, SendMessageRequest
from treadle.api.schedules import Schedule
from treadle.core.errors import DomainError
from treadle.core.schedules.catchup import CatchUp, decide
from treadle.ops.policies import PolicyStore
from treadle.ops.schedules import BUCKET, ScheduleStore, Stale
from treadle.runtime import kv_follow, partitions
from treadle.runtime.commands import CommandSender
from treadle.runtime.leases import PartitionedWork
from treadle.runtime.metrics import SCHEDULE_FIRINGS, SCHEDULE_SKIPPED
from treadle.runtime.settings import SchedulerSettings, Shared
from treadle.usecases import messages, threads
from treadle.usecases.messages import MessageLimits
from treadle.usecases.schedules import timing_of

log = logging.getLogger(__name__)
KIND = "scheduler"


class Unanswered(Exception):
    """The coordinator did not decide the firing (unavailable): it is sent again, with its key, next tick."""


@dataclass(frozen=True)
class Creator:
    tenant: str
    user: str


class _Held:
    """A leased partition: nothing to start, the tick reads ``PartitionedWork.units``."""

    async def start(self) -> None:
        return None

    async def stop(self, timeout: float) -> None:
        return None


def wall_clock(clock_file: str | None) -> datetime:
    """Now, or (tests only) the time written in ``clock_file``."""
    if clock_file:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return datetime.fromisoformat(Path(clock_file).read_text().strip()).astimezone(UTC)
    return datetime.now(UTC)


def idempotency_key(schedule_id: str, planned: datetime) -> str:
    return f"schedule:{schedule_id}:{planned.astimezone(UTC).isoformat()}"


class Scheduler:
    def __init__(self, nc: NATS, own: SchedulerSettings, shared: Shared | None = None) -> None:
        shared = shared or Shared()
        self._own = own
        js = nc.jetstream()
        self._store = ScheduleStore(js)
        self._policies = PolicyStore(js)
        self._commands = CommandSender(nc, own.command_timeout)
        self._limits = MessageLimits()
        self._work = PartitionedWork(
            nc,
            kind=KIND,
            replica=shared.replica_name(KIND),
            ttl=shared.lease_ttl,
            make=lambda partition: _Held(),
            stream_replicas=shared.stream_replicas,
        )
        self._js = js
        self._known: dict[str, tuple[str, Schedule, int]] = {}  # KV key -> (tenant, schedule, revision)
        self._loaded = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> None:
        """Follows the bucket (a watch, not a scan per tick), then leases partitions and ticks."""
        self._tasks.append(
            asyncio.create_task(kv_follow.follow(self._js, BUCKET, self._on, "*.*"), name="scheduler:watch")
        )
        await asyncio.wait_for(self._loaded.wait(), 30)
        await self._work.start()
        self._tasks.append(asyncio.create_task(self._run(), name="scheduler"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._work.stop()

    async def _on(self, item: kv_follow.Record | kv_follow.Mark) -> None:
        if item is kv_follow.Mark.LOADED:  # the stored schedules are all in
            self._loaded.set()
        if not isinstance(item, kv_follow.Record):
            return
        if item.value is None:
            self._known.pop(item.key, None)
            return
        try:
            schedule = msgspec.json.decode(item.value, type=Schedule)
        except msgspec.DecodeError:
            log.error("schedule record %s does not decode; left alone", item.key)
            return
        self._known[item.key] = (item.key.split(".", 1)[0], schedule, item.revision)

    async def _run(self) -> None:
        while True:
            try:
                await self.tick(wall_clock(self._own.clock_file))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker may be away: the next tick tries again
                log.warning("scheduler tick failed: %r", exc)
            await asyncio.sleep(self._own.tick_seconds)  # the loop's period, not synchronisation

    def _mine(self, schedule: Schedule) -> bool:
        """A thread's schedules are one partition's (its thread's), so one replica's scan sees all of them."""
        count = self._work.partitions
        key = schedule.thread_id or schedule.schedule_id
        return count > 0 and partitions.partition_of(key, count) in self._work.units

    async def tick(self, now: datetime) -> int:
        """Makes the due firings of the schedules this replica leases; how many schedules it recorded."""
        window = timedelta(seconds=self._own.catch_up_seconds)
        recorded = 0
        for tenant, schedule, revision in list(self._known.values()):
            if schedule.paused or schedule.next_at is None or not self._mine(schedule):
                continue
            catch_up = decide(timing_of(schedule), schedule.next_at, now, window)
            if catch_up is None:
                continue
            try:
                await self._fire(tenant, schedule, revision, catch_up, now)
                recorded += 1
            except Stale:
                log.info("schedule %s changed while firing; read again next tick", schedule.schedule_id)
            except Unanswered as why:
                log.warning("schedule %s: no answer (%s); tried again next tick", schedule.schedule_id, why)
        return recorded

    async def _fire(self, tenant: str, schedule: Schedule, revision: int, catch_up: CatchUp, now: datetime) -> None:
        outcome, thread, run = "missed", schedule.last_thread_id, schedule.last_run_id
        made = 0
        if catch_up.fire_at is not None:
            outcome, thread, run = await self.send(tenant, schedule, catch_up.fire_at)
            made = int(not outcome.startswith(("refused:", "skipped_")))  # started, queued, steered, …
        record = msgspec.structs.replace(
            schedule,
            next_at=catch_up.next_at,
            fired=schedule.fired + made,
            skipped=schedule.skipped + catch_up.skipped + int(catch_up.fire_at is not None and not made),
            last_fired_at=catch_up.fire_at or schedule.last_fired_at,
            last_outcome=outcome,
            last_thread_id=thread,
            last_run_id=run,
            updated_at=now,
        )
        written = await self._store.replace(tenant, record, revision)
        key = f"{tenant}.{schedule.schedule_id}"
        if self._known.get(key, ("", schedule, 0))[2] < written:  # ahead of the watch: no second look at it
            self._known[key] = (tenant, record, written)
        SCHEDULE_FIRINGS.labels(outcome.split(":", 1)[0]).inc()  # refused:<code> counts as refused
        SCHEDULE_SKIPPED.inc(catch_up.skipped)
        log.info(
            "schedule %s of %s: %s (planned %s, %d skipped)",
            schedule.schedule_id,
            tenant,
            outcome,
            catch_up.fire_at,
            catch_up.skipped,
        )

    async def send(self, tenant: str, schedule: Schedule, planned: datetime) -> tuple[str, str | None, str | None]:
        """(outcome, thread, run) of one firing; sending it again gets the first one's receipt."""
        who, key = Creator(tenant, schedule.created_by), idempotency_key(schedule.schedule_id, planned)
        mode = {"skip": "reject", "queue": "queue_after_active"}.get(schedule.on_active, schedule.mode)
        thread = schedule.thread_id
        try:
            if thread is None:
                request = CreateThreadRequest(
                    title=schedule.title or f"schedule {schedule.schedule_id}",
                    model=schedule.model,
                    runtime_mode=schedule.runtime_mode,
                    **({"provider": schedule.provider} if schedule.provider else {}),
                )
                thread = (await threads.create(who, self._commands, self._policies, request, key + ":thread")).thread_id
            message = msgspec.convert(
                {"text": schedule.text, "mode": mode, "provider": schedule.provider, "model": schedule.model},
                SendMessageRequest,
            )
            accepted = await messages.send(who, self._commands, self._limits, thread, message, key)
        except DomainError as refused:  # the sender's refusals (CommandRefused) are DomainErrors too
            if refused.status >= 500 or refused.code == "idempotency_conflict":
                raise Unanswered(refused.code) from None  # not recorded: the next tick sends it again
            if refused.code == "run_active":
                return "skipped_active", thread, None
            return f"refused:{refused.code}", thread, None
        return accepted.disposition or "started", thread, accepted.run_id or None
