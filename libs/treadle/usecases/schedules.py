"""Schedules (docs/schedules.md): a thread's, whose firings send a message to it, and the tenant's, whose
firings each create a thread and send the message there. The scheduler service makes the firings through
``usecases.messages``, so a firing meets the same policy and quotas as a user's message."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

import msgspec

from treadle.api.schedules import Schedule, ScheduleBody, ScheduleUpdate, ScheduleView
from treadle.core.errors import NotFound, QuotaExceeded
from treadle.core.ids import new_id
from treadle.core.policy import check_mode
from treadle.core.schedules.timing import Timing, timing, upcoming
from treadle.usecases.ids import checked
from treadle.usecases.messages import MessageLimits, within
from treadle.usecases.ports import Caller, PolicyBook, ThreadReads

DEFAULT_MAX_SCHEDULES = 100  # per tenant, unless its policy says otherwise (``max_schedules``)
NEXT_FIRINGS = 5  # listed by a read of one schedule


class ScheduleBook(Protocol):
    """Where schedules are kept (``ops.schedules.ScheduleStore``)."""

    async def create(self, tenant: str, schedule: Schedule) -> int: ...
    async def get(self, tenant: str, schedule_id: str) -> tuple[Schedule, int]: ...
    async def update(self, tenant: str, schedule: Schedule, revision: int) -> int: ...
    async def delete(self, tenant: str, schedule_id: str) -> None: ...
    async def of_tenant(self, tenant: str) -> list[Schedule]: ...


def timing_of(schedule: Schedule) -> Timing:
    """The schedule's timing; intervals are counted from its creation."""
    return timing(
        cron=schedule.cron,
        timezone=schedule.timezone,
        interval_seconds=schedule.interval_seconds,
        anchor=schedule.created_at,
    )


def view(schedule: Schedule, now: datetime, count: int = NEXT_FIRINGS) -> ScheduleView:
    firings = [] if schedule.paused else upcoming(timing_of(schedule), now, count)
    if schedule.next_at is not None and firings and schedule.next_at < firings[0]:
        firings = [schedule.next_at, *firings[: count - 1]]  # due now, not yet made
    return ScheduleView(schedule=schedule, next_firings=firings)


async def _checked_thread(who: Caller, reads: ThreadReads, thread: str | None) -> str | None:
    if thread is None:
        return None
    thread = checked(thread, "thr")
    await reads.head(who.tenant, thread)  # a thread of no one's (or another tenant's): 404 thread_not_found
    return thread


async def create(
    who: Caller,
    book: ScheduleBook,
    policies: PolicyBook,
    reads: ThreadReads,
    limits: MessageLimits,
    thread: str | None,
    body: ScheduleBody,
    now: datetime | None = None,
) -> ScheduleView:
    now = now or datetime.now(UTC)
    within(limits, body.text, None)
    thread = await _checked_thread(who, reads, thread)
    policy = await policies.get(who.tenant)
    if thread is None:
        check_mode(policy, body.runtime_mode, "a scheduled thread")
    schedule = Schedule(
        schedule_id=new_id("sch", int(now.timestamp() * 1000)),
        thread_id=thread,
        created_by=who.user,
        created_at=now,
        updated_at=now,
        **{k: v for k, v in msgspec.structs.asdict(body).items()},
    )
    when = timing_of(schedule)  # typed 400s: bad cron, unknown zone, interval out of bounds
    limit = policy.max_schedules or DEFAULT_MAX_SCHEDULES
    current = len(await book.of_tenant(who.tenant))
    if current >= limit:
        raise QuotaExceeded(
            f"the tenant has {current} schedules, its limit",
            details={"quota": "schedules_per_tenant", "limit": limit, "current": current},
        )
    schedule = msgspec.structs.replace(schedule, next_at=None if body.paused else when.after(now))
    await book.create(who.tenant, schedule)
    return view(schedule, now)


async def _own(who: Caller, book: ScheduleBook, schedule_id: str, thread: str | None) -> tuple[Schedule, int]:
    schedule, revision = await book.get(who.tenant, checked(schedule_id, "sch"))
    if thread is not None and schedule.thread_id != checked(thread, "thr"):
        raise NotFound(f"schedule {schedule_id} not found", code="schedule_not_found")
    return schedule, revision


async def read(who: Caller, book: ScheduleBook, schedule_id: str, thread: str | None, count: int) -> ScheduleView:
    schedule, _ = await _own(who, book, schedule_id, thread)
    return view(schedule, datetime.now(UTC), count)


async def listed(who: Caller, book: ScheduleBook, thread: str | None) -> list[Schedule]:
    """A thread's schedules, or (``thread`` None) all the tenant's, oldest first."""
    if thread is not None:
        thread = checked(thread, "thr")
    schedules = await book.of_tenant(who.tenant)
    mine = [s for s in schedules if thread is None or s.thread_id == thread]
    return sorted(mine, key=lambda s: s.schedule_id)


async def change(
    who: Caller,
    book: ScheduleBook,
    policies: PolicyBook,
    limits: MessageLimits,
    schedule_id: str,
    thread: str | None,
    patch: ScheduleUpdate,
    now: datetime | None = None,
) -> ScheduleView:
    now = now or datetime.now(UTC)
    schedule, revision = await _own(who, book, schedule_id, thread)
    fields = {k: v for k, v in msgspec.structs.asdict(patch).items() if v is not None}
    if "cron" in fields:
        fields["interval_seconds"] = None
    elif "interval_seconds" in fields:
        fields["cron"] = None
    if "text" in fields:
        within(limits, fields["text"], None)
    if schedule.thread_id is None and "runtime_mode" in fields:
        check_mode(await policies.get(who.tenant), fields["runtime_mode"], "a scheduled thread")
    changed = msgspec.structs.replace(schedule, **fields, updated_at=now)
    when = timing_of(changed)
    if {"cron", "interval_seconds", "timezone"} & fields.keys():
        changed = msgspec.structs.replace(changed, next_at=None if changed.paused else when.after(now))
    await book.update(who.tenant, changed, revision)
    return view(changed, now)


async def pause(
    who: Caller, book: ScheduleBook, schedule_id: str, thread: str | None, paused: bool, now: datetime | None = None
) -> ScheduleView:
    """Pausing stops its firings; resuming plans the next one after now (none made up for the pause)."""
    now = now or datetime.now(UTC)
    schedule, revision = await _own(who, book, schedule_id, thread)
    next_at = None if paused else timing_of(schedule).after(now)
    changed = msgspec.structs.replace(schedule, paused=paused, next_at=next_at, updated_at=now)
    await book.update(who.tenant, changed, revision)
    return view(changed, now)


async def remove(who: Caller, book: ScheduleBook, schedule_id: str, thread: str | None) -> None:
    await _own(who, book, schedule_id, thread)
    await book.delete(who.tenant, schedule_id)
