"""HTTP routes for life inside a run (L3 queue, L8 interrupt, L11 requests, L12 plans and activity): adapters
over ``treadle.usecases``. Ids in paths resolve to their thread through the projection's index, so clients
never need the thread id."""

from __future__ import annotations

from litestar import delete, get, patch, post
from litestar.params import FromPath, JSONBody

from treadle.api import Acknowledged, EditBody, ImplementBody, Implemented, InterruptRequest, ReorderBody, RespondBody
from treadle.usecases import plans, queue, requests, runs
from treadle.views.runs import QueueView

from .deps import HttpRequest, IdempotencyKey, MinSeq, Reads, Who, app_state, message_limits, wanted_seq
from .openapi import (
    ADMITTED,
    BODY,
    COMMAND,
    EDIT,
    INTERRUPT,
    ON_THREAD,
    PARAMS,
    PATH_ID,
    PLAN,
    QUEUED_RUN,
    REORDER,
    RESPOND,
    THREAD_READ,
    errors,
)


@post(
    "/v1/runs/{run_id:str}/interrupt",
    status_code=202,
    summary="Interrupt a run (L8): acknowledged now, interrupted when the provider says so",
    tags=["runs"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, INTERRUPT),
)
async def interrupt_run(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    run_id: FromPath[str],
    data: JSONBody[InterruptRequest | None] = None,
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    destructive = data.allow_destructive if data else True
    commands = app_state(request).commands
    return await runs.interrupt(who, commands, reads, run_id, "run", idempotency_key, allow_destructive=destructive)


@post(
    "/v1/nodes/{node_id:str}/interrupt",
    status_code=202,
    summary="Interrupt the run a root-turn node belongs to (L8)",
    tags=["runs"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, INTERRUPT),
)
async def interrupt_node(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    node_id: FromPath[str],
    data: JSONBody[InterruptRequest | None] = None,
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    destructive = data.allow_destructive if data else True
    commands = app_state(request).commands
    return await runs.interrupt(who, commands, reads, node_id, "node", idempotency_key, allow_destructive=destructive)


@post(
    "/v1/requests/{request_id:str}/respond",
    status_code=200,
    summary="Answer an approval or a question (L11); 409 not_resumable when its provider callback is gone",
    tags=["requests"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, RESPOND),
)
async def respond(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    request_id: FromPath[str],
    data: JSONBody[RespondBody],
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    return await requests.answer(who, app_state(request).commands, reads, request_id, data, idempotency_key)


@get(
    "/v1/threads/{thread_id:str}/queue",
    summary="Runs waiting behind the active one, in the order they will start (L3.6)",
    tags=["queue"],
    responses=errors(PARAMS, PATH_ID, THREAD_READ),
)
async def get_queue(
    request: HttpRequest, who: Who, reads: Reads, thread_id: FromPath[str], min_seq: MinSeq = None
) -> QueueView:
    wanted_seq(request, min_seq)  # validated: every read reflects the thread's last event when it came
    return await queue.read(who, reads, thread_id)


@patch(
    "/v1/threads/{thread_id:str}/queue",
    summary="Reorder the queue: name every queued run in the new order",
    tags=["queue"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, REORDER),
)
async def reorder_queue(
    request: HttpRequest,
    who: Who,
    thread_id: FromPath[str],
    data: JSONBody[ReorderBody],
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    return await queue.reorder(who, app_state(request).commands, thread_id, data, idempotency_key)


@patch(
    "/v1/threads/{thread_id:str}/queue/{run_id:str}",
    summary="Edit a queued run's message before it starts",
    tags=["queue"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, QUEUED_RUN, EDIT, {429: ("quota_exceeded",)}),
)
async def edit_queued(
    request: HttpRequest,
    who: Who,
    thread_id: FromPath[str],
    run_id: FromPath[str],
    data: JSONBody[EditBody],
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    commands, limits = app_state(request).commands, message_limits(request)
    return await queue.edit(who, commands, limits, thread_id, run_id, data, idempotency_key)


@delete(
    "/v1/threads/{thread_id:str}/queue/{run_id:str}",
    status_code=200,
    summary="Cancel a queued run",
    tags=["queue"],
    responses=errors(PATH_ID, COMMAND, ON_THREAD, QUEUED_RUN),
)
async def cancel_queued(
    request: HttpRequest,
    who: Who,
    thread_id: FromPath[str],
    run_id: FromPath[str],
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    return await queue.cancel(who, app_state(request).commands, thread_id, run_id, idempotency_key)


@post(
    "/v1/plans/{plan_id:str}/implement",
    status_code=202,
    summary="Implement a proposed plan as a new run of its thread or as a new thread (L12.3)",
    tags=["plans"],
    # as a run: a queued message of the plan's thread; as a thread: a thread made from the source's settings
    responses=errors(
        PATH_ID, BODY, COMMAND, ON_THREAD, ADMITTED, PLAN, {409: ("plan_not_implementable", "thread_exists")}
    ),
)
async def implement_plan(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    plan_id: FromPath[str],
    data: JSONBody[ImplementBody],
    idempotency_key: IdempotencyKey = None,
) -> Implemented:
    return await plans.implement(who, app_state(request).commands, reads, plan_id, data, idempotency_key)


ROUTES = [
    interrupt_run,
    interrupt_node,
    respond,
    get_queue,
    reorder_queue,
    edit_queued,
    cancel_queued,
    implement_plan,
]
