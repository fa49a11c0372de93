"""The schedule operations (docs/schedules.md) as :class:`Call` builders, and the methods both clients get
from them. A thread schedule's operations take its ``thread_id``; the tenant's (a new thread per firing) do not.
Fields of a schedule: ``cron`` + ``timezone`` or ``interval_seconds``, ``provider``, ``model``, ``mode``,
``on_active`` (skip, queue, dispatch), ``paused``, and for a tenant schedule ``title`` and ``runtime_mode``."""

from __future__ import annotations

from typing import Any

from treadle.api.schedules import ScheduleDeleted, ScheduleList, ScheduleView

from .calls import Call, _p, _present
from .schedule_ops import OPERATIONS

__all__ = ["OPERATIONS", "AsyncScheduleMethods", "ScheduleMethods"]


def _base(thread_id: str | None) -> str:
    return f"/v1/threads/{_p(thread_id)}/schedules" if thread_id is not None else "/v1/schedules"


def create(thread_id: str | None, text: str, fields: dict[str, Any]) -> Call[ScheduleView]:
    op = "create_thread_schedule" if thread_id is not None else "create_tenant_schedule"
    return Call(op, "POST", _base(thread_id), ScheduleView, body={"text": text, **_present(**fields)})


def listed(thread_id: str | None) -> Call[ScheduleList]:
    op = "list_thread_schedules" if thread_id is not None else "list_tenant_schedules"
    return Call(op, "GET", _base(thread_id), ScheduleList)


def read(thread_id: str | None, schedule_id: str, count: int | None) -> Call[ScheduleView]:
    op = "get_thread_schedule" if thread_id is not None else "get_schedule"
    path = f"{_base(thread_id)}/{_p(schedule_id)}"
    return Call(op, "GET", path, ScheduleView, params=_present(count=count))


def update(thread_id: str | None, schedule_id: str, fields: dict[str, Any]) -> Call[ScheduleView]:
    op = "update_thread_schedule" if thread_id is not None else "update_schedule"
    return Call(op, "PATCH", f"{_base(thread_id)}/{_p(schedule_id)}", ScheduleView, body=_present(**fields))


def delete(thread_id: str | None, schedule_id: str) -> Call[ScheduleDeleted]:
    op = "delete_thread_schedule" if thread_id is not None else "delete_schedule"
    return Call(op, "DELETE", f"{_base(thread_id)}/{_p(schedule_id)}", ScheduleDeleted)


def pausing(thread_id: str | None, schedule_id: str, paused: bool) -> Call[ScheduleView]:
    verb = "pause" if paused else "resume"
    op = f"{verb}_thread_schedule" if thread_id is not None else f"{verb}_schedule"
    return Call(op, "POST", f"{_base(thread_id)}/{_p(schedule_id)}/{verb}", ScheduleView)


class AsyncScheduleMethods:
    """The schedule methods of :class:`AsyncTreadle`."""

    async def call(self, call: Call[Any]) -> Any:
        raise NotImplementedError  # the client's own

    async def create_thread_schedule(self, thread_id: str, text: str, **fields: Any) -> ScheduleView:
        result: ScheduleView = await self.call(create(thread_id, text, fields))
        return result

    async def create_tenant_schedule(self, text: str, **fields: Any) -> ScheduleView:
        result: ScheduleView = await self.call(create(None, text, fields))
        return result

    async def list_thread_schedules(self, thread_id: str) -> ScheduleList:
        result: ScheduleList = await self.call(listed(thread_id))
        return result

    async def list_tenant_schedules(self) -> ScheduleList:
        result: ScheduleList = await self.call(listed(None))
        return result

    async def get_thread_schedule(self, thread_id: str, schedule_id: str, *, count: int | None = None) -> ScheduleView:
        result: ScheduleView = await self.call(read(thread_id, schedule_id, count))
        return result

    async def get_schedule(self, schedule_id: str, *, count: int | None = None) -> ScheduleView:
        result: ScheduleView = await self.call(read(None, schedule_id, count))
        return result

    async def update_thread_schedule(self, thread_id: str, schedule_id: str, **fields: Any) -> ScheduleView:
        result: ScheduleView = await self.call(update(thread_id, schedule_id, fields))
        return result

    async def update_schedule(self, schedule_id: str, **fields: Any) -> ScheduleView:
        result: ScheduleView = await self.call(update(None, schedule_id, fields))
        return result

    async def delete_thread_schedule(self, thread_id: str, schedule_id: str) -> ScheduleDeleted:
        result: ScheduleDeleted = await self.call(delete(thread_id, schedule_id))
        return result

    async def delete_schedule(self, schedule_id: str) -> ScheduleDeleted:
        result: ScheduleDeleted = await self.call(delete(None, schedule_id))
        return result

    async def pause_thread_schedule(self, thread_id: str, schedule_id: str) -> ScheduleView:
        result: ScheduleView = await self.call(pausing(thread_id, schedule_id, True))
        return result

    async def resume_thread_schedule(self, thread_id: str, schedule_id: str) -> ScheduleView:
        result: ScheduleView = await self.call(pausing(thread_id, schedule_id, False))
        return result

    async def pause_schedule(self, schedule_id: str) -> ScheduleView:
        result: ScheduleView = await self.call(pausing(None, schedule_id, True))
        return result

    async def resume_schedule(self, schedule_id: str) -> ScheduleView:
        result: ScheduleView = await self.call(pausing(None, schedule_id, False))
        return result


class ScheduleMethods:
    """The schedule methods of :class:`Treadle`."""

    def call(self, call: Call[Any]) -> Any:
        raise NotImplementedError  # the client's own

    def create_thread_schedule(self, thread_id: str, text: str, **fields: Any) -> ScheduleView:
        result: ScheduleView = self.call(create(thread_id, text, fields))
        return result

    def create_tenant_schedule(self, text: str, **fields: Any) -> ScheduleView:
        result: ScheduleView = self.call(create(None, text, fields))
        return result

    def list_thread_schedules(self, thread_id: str) -> ScheduleList:
        result: ScheduleList = self.call(listed(thread_id))
        return result

    def list_tenant_schedules(self) -> ScheduleList:
        result: ScheduleList = self.call(listed(None))
        return result

    def get_thread_schedule(self, thread_id: str, schedule_id: str, *, count: int | None = None) -> ScheduleView:
        result: ScheduleView = self.call(read(thread_id, schedule_id, count))
        return result

    def get_schedule(self, schedule_id: str, *, count: int | None = None) -> ScheduleView:
        result: ScheduleView = self.call(read(None, schedule_id, count))
        return result

    def update_thread_schedule(self, thread_id: str, schedule_id: str, **fields: Any) -> ScheduleView:
        result: ScheduleView = self.call(update(thread_id, schedule_id, fields))
        return result

    def update_schedule(self, schedule_id: str, **fields: Any) -> ScheduleView:
        result: ScheduleView = self.call(update(None, schedule_id, fields))
        return result

    def delete_thread_schedule(self, thread_id: str, schedule_id: str) -> ScheduleDeleted:
        result: ScheduleDeleted = self.call(delete(thread_id, schedule_id))
        return result

    def delete_schedule(self, schedule_id: str) -> ScheduleDeleted:
        result: ScheduleDeleted = self.call(delete(None, schedule_id))
        return result

    def pause_thread_schedule(self, thread_id: str, schedule_id: str) -> ScheduleView:
        result: ScheduleView = self.call(pausing(thread_id, schedule_id, True))
        return result

    def resume_thread_schedule(self, thread_id: str, schedule_id: str) -> ScheduleView:
        result: ScheduleView = self.call(pausing(thread_id, schedule_id, False))
        return result

    def pause_schedule(self, schedule_id: str) -> ScheduleView:
        result: ScheduleView = self.call(pausing(None, schedule_id, True))
        return result

    def resume_schedule(self, schedule_id: str) -> ScheduleView:
        result: ScheduleView = self.call(pausing(None, schedule_id, False))
        return result
