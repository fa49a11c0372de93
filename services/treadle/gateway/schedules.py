"""HTTP routes of schedules (docs/schedules.md): a thread's under ``/v1/threads/{id}/schedules``, the tenant's
(a new thread per firing) under ``/v1/schedules``, which also lists every schedule of the tenant. Adapters over
``usecases.schedules``; another tenant's schedule is 404 ``schedule_not_found`` like one that never was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, NamedTuple

from litestar import delete, get, patch, post
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath, JSONBody, QueryParameter

from treadle.api.schedules import ScheduleBody, ScheduleDeleted, ScheduleList, ScheduleUpdate, ScheduleView
from treadle.usecases import schedules

from .deps import HttpRequest, Reads, Who, app_state, message_limits
from .openapi import BODY, PARAMS, PATH_ID, THREAD_READ, Codes, errors

THREAD = "/v1/threads/{thread_id:str}/schedules"
TENANT = "/v1/schedules"
NOT_FOUND: Codes = {404: ("schedule_not_found",)}
INVALID: Codes = {  # core.schedules (timing, cron), api.schedules' field types, usecases.messages.within
    400: (
        "invalid_cron",
        "invalid_timezone",
        "invalid_interval",
        "invalid_schedule",
        "text_too_long",
        "invalid_title",
        "invalid_provider",
        "invalid_model",
        "invalid_mode",
        "invalid_runtime_mode",
        "invalid_id",
    ),
    409: ("schedule_changed",),
}
Route = Callable[[Callable[..., Any]], HTTPRouteHandler]
Count = Annotated[int, QueryParameter(ge=1, le=50, description="how many next firing times to list")]


class Scoped(NamedTuple):
    """One operation's route on a thread's schedule and on the tenant's: two handlers (two operation ids), the
    same summary, answers and status on both paths."""

    thread: Route
    tenant: Route


def scoped(route: type[HTTPRouteHandler], suffix: str, **spec: Any) -> Scoped:
    return Scoped(
        route(THREAD + suffix, tags=["schedules"], **spec), route(TENANT + suffix, tags=["schedules"], **spec)
    )


@post(
    THREAD,
    status_code=201,
    summary="Schedule a message to this thread",
    tags=["schedules"],
    responses=errors(PATH_ID, BODY, THREAD_READ, INVALID, {403: ("mode_not_allowed",), 429: ("quota_exceeded",)}),
)
async def create_thread_schedule(
    request: HttpRequest, who: Who, reads: Reads, thread_id: FromPath[str], data: JSONBody[ScheduleBody]
) -> ScheduleView:
    state = app_state(request)
    return await schedules.create(who, state.schedules, state.policies, reads, message_limits(request), thread_id, data)


@post(
    TENANT,
    status_code=201,
    summary="Schedule a message to a new thread per firing",
    tags=["schedules"],
    responses=errors(BODY, INVALID, {403: ("mode_not_allowed",), 429: ("quota_exceeded",)}),
)
async def create_tenant_schedule(
    request: HttpRequest, who: Who, reads: Reads, data: JSONBody[ScheduleBody]
) -> ScheduleView:
    state = app_state(request)
    return await schedules.create(who, state.schedules, state.policies, reads, message_limits(request), None, data)


@get(THREAD, summary="This thread's schedules", tags=["schedules"], responses=errors(PATH_ID))
async def list_thread_schedules(request: HttpRequest, who: Who, thread_id: FromPath[str]) -> ScheduleList:
    return ScheduleList(schedules=await schedules.listed(who, app_state(request).schedules, thread_id))


@get(TENANT, summary="All the tenant's schedules", tags=["schedules"], responses=errors())
async def list_tenant_schedules(request: HttpRequest, who: Who) -> ScheduleList:
    return ScheduleList(schedules=await schedules.listed(who, app_state(request).schedules, None))


ONE = "/{schedule_id:str}"
READ = scoped(get, ONE, summary="A schedule and its next firing times", responses=errors(PARAMS, PATH_ID, NOT_FOUND))
CHANGE = scoped(
    patch,
    ONE,
    summary="Change a schedule",
    responses=errors(PATH_ID, BODY, NOT_FOUND, INVALID, {403: ("mode_not_allowed",)}),
)
DELETE = scoped(delete, ONE, status_code=200, summary="Delete a schedule", responses=errors(PATH_ID, NOT_FOUND))
PAUSING = errors(PATH_ID, NOT_FOUND, {409: ("schedule_changed",)})
PAUSE = scoped(post, ONE + "/pause", status_code=200, summary="Pause a schedule", responses=PAUSING)
RESUME = scoped(post, ONE + "/resume", status_code=200, summary="Resume a schedule from now on", responses=PAUSING)


@READ.thread
async def get_thread_schedule(
    request: HttpRequest, who: Who, thread_id: FromPath[str], schedule_id: FromPath[str], count: Count = 5
) -> ScheduleView:
    return await schedules.read(who, app_state(request).schedules, schedule_id, thread_id, count)


@READ.tenant
async def get_schedule(request: HttpRequest, who: Who, schedule_id: FromPath[str], count: Count = 5) -> ScheduleView:
    return await schedules.read(who, app_state(request).schedules, schedule_id, None, count)


@CHANGE.thread
async def update_thread_schedule(
    request: HttpRequest, who: Who, thread_id: FromPath[str], schedule_id: FromPath[str], data: JSONBody[ScheduleUpdate]
) -> ScheduleView:
    state, limits = app_state(request), message_limits(request)
    return await schedules.change(who, state.schedules, state.policies, limits, schedule_id, thread_id, data)


@CHANGE.tenant
async def update_schedule(
    request: HttpRequest, who: Who, schedule_id: FromPath[str], data: JSONBody[ScheduleUpdate]
) -> ScheduleView:
    state, limits = app_state(request), message_limits(request)
    return await schedules.change(who, state.schedules, state.policies, limits, schedule_id, None, data)


@DELETE.thread
async def delete_thread_schedule(
    request: HttpRequest, who: Who, thread_id: FromPath[str], schedule_id: FromPath[str]
) -> ScheduleDeleted:
    await schedules.remove(who, app_state(request).schedules, schedule_id, thread_id)
    return ScheduleDeleted(schedule_id=schedule_id)


@DELETE.tenant
async def delete_schedule(request: HttpRequest, who: Who, schedule_id: FromPath[str]) -> ScheduleDeleted:
    await schedules.remove(who, app_state(request).schedules, schedule_id, None)
    return ScheduleDeleted(schedule_id=schedule_id)


@PAUSE.thread
async def pause_thread_schedule(
    request: HttpRequest, who: Who, thread_id: FromPath[str], schedule_id: FromPath[str]
) -> ScheduleView:
    return await schedules.pause(who, app_state(request).schedules, schedule_id, thread_id, True)


@RESUME.thread
async def resume_thread_schedule(
    request: HttpRequest, who: Who, thread_id: FromPath[str], schedule_id: FromPath[str]
) -> ScheduleView:
    return await schedules.pause(who, app_state(request).schedules, schedule_id, thread_id, False)


@PAUSE.tenant
async def pause_schedule(request: HttpRequest, who: Who, schedule_id: FromPath[str]) -> ScheduleView:
    return await schedules.pause(who, app_state(request).schedules, schedule_id, None, True)


@RESUME.tenant
async def resume_schedule(request: HttpRequest, who: Who, schedule_id: FromPath[str]) -> ScheduleView:
    return await schedules.pause(who, app_state(request).schedules, schedule_id, None, False)


ROUTES = [
    create_thread_schedule,
    create_tenant_schedule,
    list_thread_schedules,
    list_tenant_schedules,
    get_thread_schedule,
    get_schedule,
    update_thread_schedule,
    update_schedule,
    delete_thread_schedule,
    delete_schedule,
    pause_thread_schedule,
    resume_thread_schedule,
    pause_schedule,
    resume_schedule,
]
