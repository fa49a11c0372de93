"""HTTP API v1 (Litestar, msgspec-native). Reads come from Redis projections, writes go to the thread
coordinator as commands, and the event stream comes straight from JetStream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated

import msgspec
from litestar import Litestar, Request, Response, get, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.params import FromPath, HeaderParameter, JSONBody, QueryParameter
from litestar.response import Stream
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError

from treadle.checkpoints.client import CheckpointClient
from treadle.domain.commands import CreateThread, SendMessage
from treadle.domain.errors import DomainError
from treadle.domain.ids import is_id
from treadle.domain.policy import ROLES, check_mode
from treadle.domain.entities import Checkpoint, Message, Run
from treadle.domain.thread import ThreadState, fold
from treadle.eventlog import streams
from treadle.eventlog.errors import Unavailable as LogUnavailable
from treadle.eventlog.log import EventLog
from treadle.projections.connect import redis_client
from treadle.projections.store import ProjectionStore, ThreadSummary, all_indexed, encode_state
from treadle.runtime.settings import GatewaySettings, Shared
from treadle.ops.policies import PolicyStore
from treadle.ops.tokens import Principal, TokenStore, token_id
from treadle.runtime.worker import connect

from . import errors
from .commands import Commands
from .errors import ApiError
from .limits import RateLimitMiddleware, TokenBuckets, bearer
from .params import number
from .sse import thread_events
from .stream_slots import StreamSlots


# --- request and response shapes (the OpenAPI document is generated from these) --------------------


class CreateThreadRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    title: str = ""
    provider: str = "scripted"
    model: str | None = None
    runtime_mode: str = "approval_required"
    workspace: str | None = None


class ThreadCreated(msgspec.Struct, kw_only=True):
    thread_id: str
    seq: int


class SendMessageRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    text: str
    mode: str = "auto"
    target_run_id: str | None = None
    provider: str | None = None
    model: str | None = None  # L5.4: this run's model; a provider thread started under another is not resumed
    script: dict | None = None
    clean_context: bool = False  # L5.4: start a fresh provider thread with a full summary
    merge_back_from: str | None = None  # L7: a fork of this thread whose results this message brings home


class MessageAccepted(msgspec.Struct, kw_only=True):
    thread_id: str
    message_id: str
    run_id: str
    disposition: str
    seq: int


IdempotencyKey = Annotated[str | None, HeaderParameter(name="Idempotency-Key")]


# --- plumbing ---------------------------------------------------------------------------------------


def _state(request: Request) -> State:
    return request.app.state


async def principal(request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "a bearer token is required", headers={"WWW-Authenticate": "Bearer"})
    found = await _state(request).tokens.resolve(token.strip())
    if found is None:
        raise ApiError(401, "unauthorized", "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})
    if found.role not in ROLES:  # a token made before roles were checked, with a role that means nothing
        raise ApiError(403, "forbidden", f"role {found.role!r} is not a known role", {"role": found.role})
    return found


def _id(value: str, prefix: str) -> str:
    """Path ids are ours; anything else (dots, wildcards, other prefixes) never reaches a subject or key."""
    if not is_id(value, prefix):
        raise ApiError(400, "invalid_id", f"{value!r} is not a valid {prefix} id")
    return value


MinSeq = Annotated[str | None, QueryParameter(description=(
    "read your writes: wait (up to 2 s) until the projection reflects this stream sequence, e.g. the `seq` "
    "a write answered with or an SSE event's id (ASCII digits)"))]


async def _thread_doc(request: Request, tenant: str, thread: str, min_seq: str | None = None) -> bytes:
    """The thread's projection; a thread missing from Redis is rebuilt from the log on demand. With
    ``min_seq`` the read waits briefly for the projector to reach that sequence (it writes just after), and
    folds the log itself when the projector is further behind: such a read never goes back in time."""
    state = _state(request)
    behind = False
    if min_seq := number(min_seq, "min_seq"):
        for delay in (0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8):
            await asyncio.sleep(delay)
            if behind := await state.projections.seq(tenant, thread) < min_seq:
                continue
            break
    doc = None if behind else await state.projections.doc(tenant, thread)
    if doc is not None:
        return doc
    folded = fold(await state.log.read(tenant, thread))
    if folded.thread is None:
        raise ApiError(404, "thread_not_found", f"thread {thread} not found")
    await state.projections.write([(folded, all_indexed(folded), None)])
    return encode_state(folded)


async def thread_of(request: Request, tenant: str, entity_id: str) -> str | None:
    """The thread of a run, node, request or plan. The index is written by the projector just after the event
    is stored, so a client acting on an id it has only just been given may be a moment early: a miss is
    looked up again for up to a second before it counts as unknown."""
    projections = _state(request).projections
    for delay in (0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.35):
        await asyncio.sleep(delay)
        if (thread := await projections.thread_of(tenant, entity_id)) is not None:
            return thread
    return None


async def check_new_thread_mode(request: Request, tenant: str, mode: str) -> None:
    """Early refusal at the door; the coordinator decides it again for every path that makes a thread."""
    try:
        check_mode(await _state(request).policies.get(tenant), mode, "a new thread")
    except DomainError as exc:
        raise ApiError(exc.status, exc.code, exc.message, exc.details) from None


def check_message_size(request: Request, text: str, script: dict | None) -> None:
    """400 before anything reaches the broker: a message's text and its script each have a limit."""
    own: GatewaySettings = _state(request).settings
    if len(text) > own.max_text_chars:
        raise ApiError(400, "text_too_long", f"text is at most {own.max_text_chars} characters",
                       {"field": "text", "limit": own.max_text_chars, "size": len(text)})
    if script is not None and (size := len(msgspec.json.encode(script))) > own.max_script_bytes:
        raise ApiError(400, "script_too_large", f"script is at most {own.max_script_bytes} bytes as JSON",
                       {"field": "script", "limit": own.max_script_bytes, "size": size})


def _json(content: bytes, status: int = 200) -> Response:
    return Response(content=content, media_type="application/json", status_code=status)


# --- routes -----------------------------------------------------------------------------------------


@post("/v1/threads", status_code=201, summary="Create a thread (no provider work until the first run, L1.1)")
async def create_thread(request: Request, data: JSONBody[CreateThreadRequest],
                        idempotency_key: IdempotencyKey = None) -> ThreadCreated:
    who = await principal(request)
    await check_new_thread_mode(request, who.tenant, data.runtime_mode)
    body = CreateThread(**msgspec.structs.asdict(data))
    accepted = await _state(request).commands.send(tenant=who.tenant, user=who.user, verb="create", thread=None,
                                                   body=body, idempotency_key=idempotency_key)
    return ThreadCreated(thread_id=accepted.thread_id, seq=accepted.seq)


class ThreadList(msgspec.Struct):
    threads: list[ThreadSummary]


class RunView(Run, kw_only=True):
    thread_id: str
    messages: list[Message]
    checkpoint: Checkpoint | None


def _documented(model: type) -> dict:
    """These routes pass stored JSON through untouched; the OpenAPI document still names its shape."""
    return {200: ResponseSpec(data_container=model, description="OK", generate_examples=False)}


@get("/v1/threads", summary="List the tenant's threads, newest first", responses=_documented(ThreadList))
async def list_threads(request: Request, limit: Annotated[str | None, QueryParameter(description="1..500, 50")] = None,
                       offset: Annotated[str | None, QueryParameter(description="0..1000000")] = None) -> Response:
    who = await principal(request)
    items = await _state(request).projections.threads(who.tenant, number(limit, "limit", low=1, high=500) or 50,
                                                      number(offset, "offset", high=1_000_000) or 0)
    return _json(b'{"threads":[' + b",".join(items) + b"]}")


@get("/v1/threads/{thread_id:str}", responses=_documented(ThreadState),
     summary="The thread's projection: runs, attempts, nodes, messages, requests, plans, checkpoints, activity")
async def get_thread(request: Request, thread_id: FromPath[str], min_seq: MinSeq = None) -> Response:
    who = await principal(request)
    return _json(await _thread_doc(request, who.tenant, _id(thread_id, "thr"), min_seq))


@post("/v1/threads/{thread_id:str}/messages", status_code=202, summary="Send a message: starts or queues a run (L2.1, L3)")
async def send_message(request: Request, thread_id: FromPath[str], data: JSONBody[SendMessageRequest],
                       idempotency_key: IdempotencyKey = None) -> MessageAccepted:
    who = await principal(request)
    thread = _id(thread_id, "thr")
    if data.target_run_id is not None:
        _id(data.target_run_id, "run")
    check_message_size(request, data.text, data.script)
    body = SendMessage(**msgspec.structs.asdict(data))
    accepted = await _state(request).commands.send(tenant=who.tenant, user=who.user, verb="send", thread=thread,
                                                   body=body, idempotency_key=idempotency_key)
    return MessageAccepted(thread_id=thread, message_id=accepted.message_id or "", run_id=accepted.run_id or "",
                           disposition=accepted.disposition or "", seq=accepted.seq)


@get("/v1/runs/{run_id:str}", summary="One run with its attempts and execution graph", responses=_documented(RunView))
async def get_run(request: Request, run_id: FromPath[str], min_seq: MinSeq = None) -> Response:
    who = await principal(request)
    run_id = _id(run_id, "run")
    thread = await thread_of(request, who.tenant, run_id)
    if thread is None:
        raise ApiError(404, "run_not_found", f"run {run_id} not found")
    state = msgspec.json.decode(await _thread_doc(request, who.tenant, thread, min_seq), type=ThreadState)
    run = state.run(run_id)
    if run is None:
        raise ApiError(404, "run_not_found", f"run {run_id} not found")
    out = msgspec.to_builtins(run)
    out["thread_id"] = thread
    out["messages"] = [msgspec.to_builtins(m) for m in state.messages if m.run_id == run_id]
    out["checkpoint"] = next((msgspec.to_builtins(c) for c in state.checkpoints if c.id == run.checkpoint_id), None)
    return _json(msgspec.json.encode(out))


@get("/v1/threads/{thread_id:str}/events", summary="Server-Sent Events: id = stream sequence; resumable with Last-Event-ID")
async def events(request: Request, thread_id: FromPath[str],
                 last_event_id: Annotated[str | None, HeaderParameter(name="Last-Event-ID")] = None,
                 after: Annotated[str | None, QueryParameter(description="a stream sequence")] = None) -> Stream:
    who = await principal(request)
    thread = _id(thread_id, "thr")
    start = number(after, "after") or 0
    if last_event_id is not None:
        start = number(last_event_id, "Last-Event-ID", code="invalid_last_event_id") or 0
    await _thread_doc(request, who.tenant, thread)  # 404 for unknown threads and other tenants' threads
    slots: StreamSlots = _state(request).stream_slots
    holder = token_id(bearer(request.scope) or "")
    slots.open(holder, who.tenant)  # 429 before any subscription: the generator subscribes when first read
    stream = slots.held(holder, who.tenant, thread_events(_state(request).nc, who.tenant, thread, start))
    return Stream(stream, media_type="text/event-stream",
                  headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


READY_PING_SECONDS = 1.0  # a Redis that cannot answer a PING this quickly cannot serve reads either


@get("/healthz", include_in_schema=False)
async def healthz() -> dict:
    return {"status": "ok"}


@get("/readyz", include_in_schema=False)
async def readyz(request: Request) -> Response:
    """Ready when both of what every request needs answer: the broker and the projection store."""
    state = _state(request)
    if not state.nc.is_connected:
        status = "nats unavailable"
    elif not await state.projections.reachable(READY_PING_SECONDS):
        status = "redis unavailable"
    else:
        return Response({"status": "ready"}, status_code=200)
    return Response({"status": status}, status_code=503, headers={"Retry-After": "1"})


@get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def create_app(shared: Shared | None = None, own: GatewaySettings | None = None) -> Litestar:
    shared = shared or Shared()
    own = own or GatewaySettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        app.state.settings = own
        app.state.stream_slots = StreamSlots(own.max_streams_per_token, own.max_streams_per_tenant)
        nc: NATS = await connect(shared.nats_url, "treadle-gateway", user=shared.nats_user,
                                 password=shared.nats_password)
        redis = redis_client(shared.redis_url)
        await streams.ensure(nc.jetstream(), shared.stream_replicas)
        app.state.nc = nc
        app.state.log = EventLog(nc)
        app.state.commands = Commands(nc, own.command_timeout)
        app.state.tokens = TokenStore(nc.jetstream())
        app.state.policies = PolicyStore(nc.jetstream())
        app.state.projections = ProjectionStore(redis)
        app.state.checkpoints = CheckpointClient(nc, shared.volume)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                await nc.drain()
            await redis.aclose()

    from .checkpoints import ROUTES as checkpoint_routes  # these modules import this one's plumbing
    from .control import ROUTES as control_routes
    from .lineage import ROUTES as lineage_routes
    from .policy import ROUTES as policy_routes

    return Litestar(
        route_handlers=[create_thread, list_threads, get_thread, send_message, get_run, events, healthz, readyz, metrics,
                        *control_routes, *checkpoint_routes, *lineage_routes, *policy_routes],
        lifespan=[lifespan],
        exception_handlers={ApiError: errors.on_api_error, HTTPException: errors.on_http_error,
                            RecursionError: errors.on_too_deep, NatsError: errors.on_broker_unavailable,
                            LogUnavailable: errors.on_broker_unavailable, RedisConnectionError: errors.on_store_unavailable,
                            RedisTimeoutError: errors.on_store_unavailable, Exception: errors.on_unexpected},
        openapi_config=OpenAPIConfig(title="Treadle", version="1.0.0", path="/schema"),
        request_max_body_size=own.max_body_bytes,
        middleware=[DefineMiddleware(RateLimitMiddleware, buckets=TokenBuckets(own.rate_limit, own.rate_burst))],
        debug=False,
    )
