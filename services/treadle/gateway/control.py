"""HTTP routes for life inside a run (L3 queue, L8 interrupt, L11 requests, L12 plans and activity).

Ids in paths resolve to their thread through the projection's index, so clients never need the thread id.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from litestar import Request, delete, get, patch, post
from litestar.params import FromPath, JSONBody

from treadle.core.commands import Body
from treadle.core.plans.commands import ImplementPlan
from treadle.core.plans.decide import implementation_text
from treadle.core.requests.commands import RespondRequest
from treadle.core.run.commands import InterruptRun
from treadle.core.thread.commands import CancelQueued, CreateThread, EditQueued, ReorderQueue, SendMessage
from treadle.projections import parts
from treadle.views.runs import QueueView
from treadle.views.thread import queue_view

from .deps import (
    IdempotencyKey,
    MinSeq,
    app_state,
    check_message_size,
    owner,
    path_id,
    principal,
    thread_read,
    thread_view,
)
from .errors import ApiError
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


class InterruptRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    allow_destructive: bool = True  # without native interrupt, stop the provider session (L8.3)


class Acknowledged(msgspec.Struct, kw_only=True):
    """An acknowledgement, not the outcome (L8.2): the run's status says when it actually ended."""

    thread_id: str
    run_id: str | None
    disposition: str
    seq: int


class RespondBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    decision: Literal["accept", "accept_for_session", "decline", "cancel"] | None = None
    answers: dict[str, str] | None = None
    message: str | None = None


class ReorderBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    order: list[str]


class EditBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    text: str
    script: dict[str, Any] | None = None


class ImplementBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    as_: Literal["run", "thread"] = msgspec.field(name="as", default="run")


class Implemented(msgspec.Struct, kw_only=True):
    plan_id: str
    as_: str = msgspec.field(name="as")
    thread_id: str
    run_id: str


async def _send(request: Request[Any, Any, Any], verb: str, thread: str, body: Body, key: str | None) -> Acknowledged:
    who = await principal(request)
    accepted = await app_state(request).commands.send(
        tenant=who.tenant, user=who.user, verb=verb, thread=thread, body=body, idempotency_key=key
    )
    return Acknowledged(
        thread_id=thread, run_id=accepted.run_id, disposition=accepted.disposition or "", seq=accepted.seq
    )


async def _interrupt(
    request: Request[Any, Any, Any], entity_id: str, prefix: str, data: InterruptRequest | None, key: str | None
) -> Acknowledged:
    who = await principal(request)
    thread = await owner(request, who.tenant, entity_id, prefix, f"{prefix}_not_found")
    target = {"run_id": entity_id} if prefix == "run" else {"node_id": entity_id}
    body = InterruptRun(**target, allow_destructive=data.allow_destructive if data else True)
    return await _send(request, "interrupt", thread, body, key)


@post(
    "/v1/runs/{run_id:str}/interrupt",
    status_code=202,
    summary="Interrupt a run (L8): acknowledged now, interrupted when the provider says so",
    tags=["runs"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, INTERRUPT),
)
async def interrupt_run(
    request: Request[Any, Any, Any],
    run_id: FromPath[str],
    data: JSONBody[InterruptRequest | None] = None,
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    return await _interrupt(request, run_id, "run", data, idempotency_key)


@post(
    "/v1/nodes/{node_id:str}/interrupt",
    status_code=202,
    summary="Interrupt the run a root-turn node belongs to (L8)",
    tags=["runs"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, INTERRUPT),
)
async def interrupt_node(
    request: Request[Any, Any, Any],
    node_id: FromPath[str],
    data: JSONBody[InterruptRequest | None] = None,
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    return await _interrupt(request, node_id, "node", data, idempotency_key)


@post(
    "/v1/requests/{request_id:str}/respond",
    status_code=200,
    summary="Answer an approval or a question (L11); 409 not_resumable when its provider callback is gone",
    tags=["requests"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, RESPOND),
)
async def respond(
    request: Request[Any, Any, Any],
    request_id: FromPath[str],
    data: JSONBody[RespondBody],
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    who = await principal(request)
    thread = await owner(request, who.tenant, request_id, "req", "request_not_found")
    body = RespondRequest(request_id=request_id, decision=data.decision, answers=data.answers, message=data.message)
    return await _send(request, "respond", thread, body, idempotency_key)


@get(
    "/v1/threads/{thread_id:str}/queue",
    summary="Runs waiting behind the active one, in the order they will start (L3.6)",
    tags=["queue"],
    responses=errors(PARAMS, PATH_ID, THREAD_READ),
)
async def get_queue(request: Request[Any, Any, Any], thread_id: FromPath[str], min_seq: MinSeq = None) -> QueueView:
    who = await principal(request)
    return await thread_read(request, who.tenant, path_id(thread_id, "thr"), parts.queue, queue_view, min_seq)


@patch(
    "/v1/threads/{thread_id:str}/queue",
    summary="Reorder the queue: name every queued run in the new order",
    tags=["queue"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, REORDER),
)
async def reorder_queue(
    request: Request[Any, Any, Any],
    thread_id: FromPath[str],
    data: JSONBody[ReorderBody],
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    thread = path_id(thread_id, "thr")
    for run_id in data.order:
        path_id(run_id, "run")
    return await _send(request, "queue", thread, ReorderQueue(order=data.order), idempotency_key)


@patch(
    "/v1/threads/{thread_id:str}/queue/{run_id:str}",
    summary="Edit a queued run's message before it starts",
    tags=["queue"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, QUEUED_RUN, EDIT, {429: ("quota_exceeded",)}),
)
async def edit_queued(
    request: Request[Any, Any, Any],
    thread_id: FromPath[str],
    run_id: FromPath[str],
    data: JSONBody[EditBody],
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    check_message_size(request, data.text, data.script)
    body = EditQueued(run_id=path_id(run_id, "run"), text=data.text, script=data.script)
    return await _send(request, "queue", path_id(thread_id, "thr"), body, idempotency_key)


@delete(
    "/v1/threads/{thread_id:str}/queue/{run_id:str}",
    status_code=200,
    summary="Cancel a queued run",
    tags=["queue"],
    responses=errors(PATH_ID, COMMAND, ON_THREAD, QUEUED_RUN),
)
async def cancel_queued(
    request: Request[Any, Any, Any],
    thread_id: FromPath[str],
    run_id: FromPath[str],
    idempotency_key: IdempotencyKey = None,
) -> Acknowledged:
    body = CancelQueued(run_id=path_id(run_id, "run"))
    return await _send(request, "queue", path_id(thread_id, "thr"), body, idempotency_key)


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
    request: Request[Any, Any, Any],
    plan_id: FromPath[str],
    data: JSONBody[ImplementBody],
    idempotency_key: IdempotencyKey = None,
) -> Implemented:
    who = await principal(request)
    thread = await owner(request, who.tenant, plan_id, "plan", "plan_not_found")
    commands = app_state(request).commands
    if data.as_ == "run":
        accepted = await commands.send(
            tenant=who.tenant,
            user=who.user,
            verb="plan",
            thread=thread,
            body=ImplementPlan(plan_id=plan_id),
            idempotency_key=idempotency_key,
        )
        return Implemented(plan_id=plan_id, as_="run", thread_id=thread, run_id=accepted.run_id or "")
    state = await thread_view(request, who.tenant, thread)
    plan = state.plan(plan_id)
    if plan is None or plan.kind != "proposed_plan" or plan.status == "implemented":
        raise ApiError(409, "plan_not_implementable", f"plan {plan_id} is not an open proposed plan")
    assert state.thread is not None
    source = state.thread
    # Three commands, each idempotent under a key derived from the client's: a retry redoes none twice.
    key = idempotency_key or f"implement-{plan_id}"
    created = await commands.send(
        tenant=who.tenant,
        user=who.user,
        verb="create",
        thread=None,
        idempotency_key=f"{key}|create",
        body=CreateThread(
            title=f"Plan from {source.title or source.id}"[:200],
            provider=source.provider,
            model=source.model,
            runtime_mode=source.runtime_mode,
        ),
    )
    sent = await commands.send(
        tenant=who.tenant,
        user=who.user,
        verb="send",
        thread=created.thread_id,
        idempotency_key=f"{key}|send",
        body=SendMessage(text=implementation_text(plan.text)),  # the text the coordinator gives an implementing run
    )
    await commands.send(
        tenant=who.tenant,
        user=who.user,
        verb="plan",
        thread=thread,
        idempotency_key=f"{key}|link",
        body=ImplementPlan(plan_id=plan_id, as_="thread", thread_id=created.thread_id),
    )
    return Implemented(plan_id=plan_id, as_="thread", thread_id=created.thread_id, run_id=sent.run_id or "")


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
