"""The schedule use cases over an in-memory book (the KV store's twin): a tenant's quota, replanning on a new
timing, pause and resume, a thread's schedule reached only through its own thread, bad input changing nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from treadle.api.schedules import Schedule, ScheduleBody, ScheduleUpdate
from treadle.core.errors import BadRequest, Conflict, Forbidden, NotFound, QuotaExceeded
from treadle.core.ids import new_id
from treadle.core.policy import TenantPolicy
from treadle.usecases import schedules
from treadle.usecases.messages import MessageLimits

NOW = datetime(2026, 3, 28, 12, tzinfo=UTC)
THREAD = new_id("thr", 1)


@dataclass(frozen=True)
class Who:
    tenant: str = "acme"
    user: str = "alice"


class Book:
    def __init__(self) -> None:
        self.records: dict[tuple[str, str], tuple[Schedule, int]] = {}

    async def create(self, tenant: str, schedule: Schedule) -> int:
        self.records[(tenant, schedule.schedule_id)] = (schedule, 1)
        return 1

    async def get(self, tenant: str, schedule_id: str) -> tuple[Schedule, int]:
        if (tenant, schedule_id) not in self.records:
            raise NotFound("no", code="schedule_not_found")
        return self.records[(tenant, schedule_id)]

    async def update(self, tenant: str, schedule: Schedule, revision: int) -> int:
        if self.records[(tenant, schedule.schedule_id)][1] != revision:
            raise Conflict("changed", code="schedule_changed")
        self.records[(tenant, schedule.schedule_id)] = (schedule, revision + 1)
        return revision + 1

    async def delete(self, tenant: str, schedule_id: str) -> None:
        del self.records[(tenant, schedule_id)]

    async def of_tenant(self, tenant: str) -> list[Schedule]:
        return [s for (t, _), (s, _) in self.records.items() if t == tenant]


class Policies:
    def __init__(self, policy: TenantPolicy | None = None) -> None:
        self.policy = policy or TenantPolicy()

    async def get(self, tenant: str) -> TenantPolicy:
        return self.policy


class Reads:
    """Only ``head`` is asked: the thread exists for its tenant."""

    async def head(self, tenant: str, thread: str) -> object:
        if thread != THREAD or tenant != "acme":
            raise NotFound("no", code="thread_not_found")
        return object()


async def made(book: Book, body: ScheduleBody, policies: Policies | None = None, thread: str | None = THREAD):
    reads = Reads()
    return await schedules.create(
        Who(),
        book,
        policies or Policies(),
        reads,
        MessageLimits(),
        thread,
        body,
        NOW,  # type: ignore[arg-type]
    )


async def test_create_plans_the_next_firing_in_the_zone_and_lists_the_next_ones() -> None:
    book = Book()
    view = await made(book, ScheduleBody(text="hi", cron="30 2 * * *", timezone="Europe/Berlin"))
    assert view.schedule.next_at == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST: 02:30 is skipped
    assert len(view.next_firings) == 5 and view.next_firings[0] == view.schedule.next_at


async def test_quota_per_tenant_from_the_policy() -> None:
    book, policies = Book(), Policies(TenantPolicy(max_schedules=2))
    for _ in range(2):
        await made(book, ScheduleBody(text="x", interval_seconds=60), policies)
    with pytest.raises(QuotaExceeded) as refused:
        await made(book, ScheduleBody(text="x", interval_seconds=60), policies)
    assert refused.value.details == {"quota": "schedules_per_tenant", "limit": 2, "current": 2}
    assert len(book.records) == 2


async def test_bad_input_changes_nothing() -> None:
    book = Book()
    for body, code in (
        (ScheduleBody(text="x", cron="0 9 * * funday"), "invalid_cron"),
        (ScheduleBody(text="x", cron="0 9 * * *", timezone="Nowhere/Land"), "invalid_timezone"),
        (ScheduleBody(text="x", interval_seconds=10), "invalid_interval"),
        (ScheduleBody(text="x" * 100_001, interval_seconds=60), "text_too_long"),
    ):
        with pytest.raises(BadRequest) as refused:
            await made(book, body)
        assert refused.value.code == code
    with pytest.raises(NotFound):
        await made(book, ScheduleBody(text="x", interval_seconds=60), thread=new_id("thr", 2))
    assert book.records == {}


async def test_a_new_timing_replans_and_pause_resume_plan_from_now() -> None:
    book = Book()
    view = await made(book, ScheduleBody(text="x", interval_seconds=3600))
    sid = view.schedule.schedule_id
    later = NOW + timedelta(minutes=10)
    update = ScheduleUpdate(cron="0 * * * *")
    changed = await schedules.change(Who(), book, Policies(), MessageLimits(), sid, THREAD, update, later)
    assert changed.schedule.interval_seconds is None and changed.schedule.next_at == datetime(
        2026, 3, 28, 13, tzinfo=UTC
    )
    paused = await schedules.pause(Who(), book, sid, THREAD, True, later)
    assert paused.schedule.next_at is None and paused.next_firings == []
    resumed = await schedules.pause(Who(), book, sid, None, False, NOW + timedelta(hours=5, minutes=1))
    assert resumed.schedule.next_at == datetime(2026, 3, 28, 18, tzinfo=UTC)  # no firing made up for the pause


async def test_a_tenant_schedule_keeps_to_the_allowed_runtime_modes() -> None:
    book = Book()
    with pytest.raises(Forbidden):
        await made(book, ScheduleBody(text="x", interval_seconds=60, runtime_mode="full_access"), thread=None)
    sid = (await made(book, ScheduleBody(text="x", interval_seconds=60), thread=None)).schedule.schedule_id
    with pytest.raises(Forbidden):
        update = ScheduleUpdate(runtime_mode="full_access")
        await schedules.change(Who(), book, Policies(), MessageLimits(), sid, None, update, NOW)
    assert book.records[("acme", sid)][0].runtime_mode == "approval_required"


async def test_a_thread_schedule_is_reached_through_its_own_thread_only() -> None:
    book = Book()
    sid = (await made(book, ScheduleBody(text="x", interval_seconds=60))).schedule.schedule_id
    with pytest.raises(NotFound):
        await schedules.read(Who(), book, sid, new_id("thr", 3), 5)
    with pytest.raises(BadRequest):
        await schedules.read(Who(), book, "sch_../../x", None, 5)
    assert (await schedules.read(Who(), book, sid, None, 2)).schedule.schedule_id == sid
    await schedules.remove(Who(), book, sid, THREAD)
    assert await schedules.listed(Who(), book, None) == []
