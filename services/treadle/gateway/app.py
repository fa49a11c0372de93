"""HTTP API v1 (Litestar, msgspec-native): the app, its lifespan and the thread routes. Reads serve the views
(``treadle.views``) the projector keeps in Redis, writes go to the thread coordinator as commands, and the
event stream comes straight from JetStream. What routes depend on is in ``deps``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated

import msgspec
from litestar import Litestar, Response, delete, get, patch, post
from litestar.config.cors import CORSConfig
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.middleware import DefineMiddleware
from litestar.params import FromPath, HeaderParameter, JSONBody, QueryParameter
from litestar.response import Stream
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError
from prometheus_client import CONTENT_TYPE_LATEST
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from treadle.api import (
    CreateThreadRequest,
    MessageAccepted,
    SendMessageRequest,
    ThreadCreated,
    ThreadDeleted,
    ThreadUpdated,
    UpdateThreadRequest,
)
from treadle.checkpoints.client import CheckpointClient
from treadle.core.errors import DomainError
from treadle.eventlog import streams
from treadle.eventlog.errors import Unavailable as LogUnavailable
from treadle.eventlog.log import EventLog
from treadle.eventlog.tracing import http_spans
from treadle.ops.keys import shared_key
from treadle.ops.policies import PolicyStore
from treadle.ops.policy_cache import PolicyCache
from treadle.ops.schedules import ScheduleStore
from treadle.ops.tokens import TokenStore, token_id
from treadle.projections import parts
from treadle.projections.connect import redis_client
from treadle.projections.store import ProjectionStore
from treadle.runtime.access_log import access_log
from treadle.runtime.commands import CommandSender
from treadle.runtime.metrics import exposition as metrics_text
from treadle.runtime.metrics import http_metrics
from treadle.runtime.settings import GatewaySettings, Shared
from treadle.runtime.worker import connect
from treadle.usecases import messages, threads
from treadle.views.thread import RunView, ThreadView, recent, run_view, thread_head

from . import checkpoints, console, control, lineage, lists, mcp, openapi, policy, reference, schedules, webhooks
from . import errors as handlers
from .deps import (
    HttpRequest,
    IdempotencyKey,
    MinSeq,
    Who,
    app_state,
    documented,
    json_response,
    message_limits,
    path_id,
    principal,
    thread_doc,
    thread_of,
    thread_read,
    wanted_seq,
)
from .errors import ApiError
from .headers import nosniff
from .limits import RateLimitMiddleware, TokenBuckets, bearer
from .openapi import (
    ADMITTED,
    BODY,
    COMMAND,
    CREATE,
    DELETE,
    ON_THREAD,
    PARAMS,
    PATH_ID,
    SEND,
    THREAD_READ,
    UPDATE,
    errors,
    event_stream,
)
from .params import number
from .reads import reads_of
from .sse import thread_events
from .stream_slots import StreamSlots

# --- parameters (the bodies and receipts are the contract's, ``treadle.api``) -----------------------

MAX_RECENT_RUNS = 1000
Runs = Annotated[
    str | None,
    QueryParameter(
        description=(
            f"only the last N runs (1..{MAX_RECENT_RUNS}) with their messages, activity and checkpoints (and the "
            "checkpoint before the first), every other field whole: a read that costs the same however long the "
            "thread is. The runs before are listed by /v1/threads/{thread_id}/runs"
        )
    ),
]
_encode = msgspec.json.Encoder().encode


# --- routes -----------------------------------------------------------------------------------------


@post(
    "/v1/threads",
    status_code=201,
    summary="Create a thread (no provider work until the first run, L1.1)",
    tags=["threads"],
    responses=errors(BODY, COMMAND, ADMITTED, CREATE),
)
async def create_thread(
    request: HttpRequest, who: Who, data: JSONBody[CreateThreadRequest], idempotency_key: IdempotencyKey = None
) -> ThreadCreated:
    state = app_state(request)
    return await threads.create(who, state.commands, state.policies, data, idempotency_key)


@get(
    "/v1/threads/{thread_id:str}",
    responses=documented(ThreadView) | errors(PARAMS, PATH_ID, THREAD_READ),
    tags=["threads"],
    summary="The thread's projection: runs, attempts, nodes, messages, requests, plans, checkpoints, activity",
)
async def get_thread(
    request: HttpRequest, who: Who, thread_id: FromPath[str], min_seq: MinSeq = None, runs: Runs = None
) -> Response[bytes]:
    thread = path_id(thread_id, "thr")
    window = number(runs, "runs", low=1, high=MAX_RECENT_RUNS)
    if window is None:
        return json_response(await thread_doc(request, who.tenant, thread, min_seq))
    view = await thread_read(
        request, who.tenant, thread, partial(parts.recent, runs=window), partial(recent, runs=window), min_seq
    )
    return json_response(_encode(view))


@patch(
    "/v1/threads/{thread_id:str}",
    summary="Rename, archive or unarchive a thread (L1.3): archived threads leave the default list and take no messages",
    tags=["threads"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, UPDATE),
)
async def update_thread(
    request: HttpRequest,
    who: Who,
    thread_id: FromPath[str],
    data: JSONBody[UpdateThreadRequest],
    idempotency_key: IdempotencyKey = None,
) -> ThreadUpdated:
    return await threads.update(who, app_state(request).commands, thread_id, data, idempotency_key)


@delete(
    "/v1/threads/{thread_id:str}",
    status_code=200,
    summary="Delete a thread and erase its data (L1.4); refused while a run is active or queued",
    tags=["threads"],
    responses=errors(PATH_ID, COMMAND, ON_THREAD, DELETE),
)
async def delete_thread(
    request: HttpRequest, who: Who, thread_id: FromPath[str], idempotency_key: IdempotencyKey = None
) -> ThreadDeleted:
    return await threads.delete(who, app_state(request).commands, thread_id, idempotency_key)


@post(
    "/v1/threads/{thread_id:str}/messages",
    status_code=202,
    summary="Send a message: starts or queues a run (L2.1, L3)",
    tags=["messages"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, ADMITTED, SEND),
)
async def send_message(
    request: HttpRequest,
    who: Who,
    thread_id: FromPath[str],
    data: JSONBody[SendMessageRequest],
    idempotency_key: IdempotencyKey = None,
) -> MessageAccepted:
    commands, limits = app_state(request).commands, message_limits(request)
    return await messages.send(who, commands, limits, thread_id, data, idempotency_key)


@get(
    "/v1/runs/{run_id:str}",
    summary="One run with its attempts and execution graph",
    tags=["runs"],
    responses=errors(PARAMS, PATH_ID, {404: ("run_not_found",)}),
)
async def get_run(request: HttpRequest, who: Who, run_id: FromPath[str], min_seq: MinSeq = None) -> RunView:
    run_id = path_id(run_id, "run")
    thread = await thread_of(request, who.tenant, run_id, wanted_seq(request, min_seq))
    if thread is None:
        raise ApiError(404, "run_not_found", f"run {run_id} not found")
    run = await thread_read(
        request, who.tenant, thread, lambda snap: parts.run(snap, run_id), lambda view: run_view(view, run_id), min_seq
    )
    if run is None:
        raise ApiError(404, "run_not_found", f"run {run_id} not found")
    return run


@get(
    "/v1/threads/{thread_id:str}/events",
    summary="Server-Sent Events: id = stream sequence; resumable with Last-Event-ID",
    tags=["events"],
    responses=event_stream()
    | errors(PARAMS, PATH_ID, THREAD_READ, {400: ("invalid_last_event_id",), 429: ("quota_exceeded",)}),
)
async def stream_events(
    request: HttpRequest,
    who: Who,
    thread_id: FromPath[str],
    last_event_id: Annotated[str | None, HeaderParameter(name="Last-Event-ID")] = None,
    after: Annotated[str | None, QueryParameter(description="a stream sequence")] = None,
    live: Annotated[
        bool, QueryParameter(description="false: durable events only, no live.delta frames (a wait for a run's end)")
    ] = True,
) -> Stream:
    thread = path_id(thread_id, "thr")
    start = number(after, "after") or 0
    if last_event_id is not None:
        start = number(last_event_id, "Last-Event-ID", code="invalid_last_event_id") or 0
    # 404 for unknown threads and other tenants' threads: the thread's head, not its whole document.
    await thread_read(request, who.tenant, thread, parts.head, thread_head)
    slots: StreamSlots = app_state(request).stream_slots
    holder = getattr(request.state, "stream_holder", None) or token_id(bearer(request.scope) or "")
    slots.open(holder, who.tenant)  # 429 before any subscription: the generator subscribes when first read
    stream = slots.held(holder, who.tenant, thread_events(app_state(request).nc, who.tenant, thread, start, live))
    # Subscribed before the answer starts: a broker that does not answer is a typed 503, not a cut stream.
    connected = await anext(stream)
    return Stream(
        _after(connected, stream),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _after(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for frame in rest:
        yield frame


READY_PING_SECONDS = 1.0  # a Redis that cannot answer a PING this quickly cannot serve reads either


@get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz", include_in_schema=False)
async def readyz(request: HttpRequest) -> Response[dict[str, str]]:
    """Ready when both of what every request needs answer: the broker and the projection store."""
    state = app_state(request)
    if not state.nc.is_connected:
        status = "nats unavailable"
    elif not await state.projections.reachable(READY_PING_SECONDS):
        status = "redis unavailable"
    else:
        return Response({"status": "ready"}, status_code=200)
    return Response({"status": status}, status_code=503, headers={"Retry-After": "1"})


@get("/metrics", include_in_schema=False)
async def metrics() -> Response[bytes]:
    return Response(metrics_text("gateway"), media_type=CONTENT_TYPE_LATEST)


# What a browser on an allowed origin may send and read: the API's own request and answer headers.
CORS_REQUEST_HEADERS = ["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID", "X-Treadle-Min-Seq"]
CORS_ANSWER_HEADERS = ["Retry-After", "WWW-Authenticate"]


def cors(origins: tuple[str, ...]) -> CORSConfig | None:
    """None (no CORS headers at all: same origin only) unless origins are configured. Never with credentials:
    the console's cookie stays same-site, a cross-origin client sends its bearer token."""
    if not origins:
        return None
    return CORSConfig(
        allow_origins=list(origins),
        allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        allow_headers=CORS_REQUEST_HEADERS,
        allow_credentials=False,
        expose_headers=CORS_ANSWER_HEADERS,
    )


def create_app(shared: Shared | None = None, own: GatewaySettings | None = None) -> Litestar:
    shared = shared or Shared()
    own = own or GatewaySettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        app.state.settings = own
        app.state.stream_slots = StreamSlots(own.max_streams_per_token, own.max_streams_per_tenant)
        nc: NATS = await connect(
            shared.nats_url, "treadle-gateway", user=shared.nats_user, password=shared.nats_password
        )
        redis = redis_client(shared.redis_url)
        await streams.ensure(nc.jetstream(), shared.stream_replicas)
        app.state.nc = nc
        app.state.log = EventLog(nc)
        app.state.tokens = TokenStore(nc.jetstream())
        app.state.policies = policies = PolicyCache(PolicyStore(nc.jetstream()))  # a PUT here applies here at once
        app.state.commands = CommandSender(nc, own.command_timeout, policies.revision)  # … and at any coordinator
        await policies.start()
        app.state.schedules = ScheduleStore(nc.jetstream())
        app.state.projections = ProjectionStore(redis)
        app.state.checkpoints = CheckpointClient(nc)  # each diff goes to its thread's home volume
        app.state.cursor_key = await shared_key(nc.jetstream(), "page-cursors")
        try:
            yield
        finally:
            await policies.stop()
            with contextlib.suppress(Exception):
                await nc.drain()
            await redis.aclose()

    app = Litestar(
        route_handlers=[
            create_thread,
            get_thread,
            update_thread,
            delete_thread,
            send_message,
            get_run,
            stream_events,
            healthz,
            readyz,
            metrics,
            *lists.ROUTES,
            *control.ROUTES,
            *checkpoints.ROUTES,
            *lineage.ROUTES,
            *policy.ROUTES,
            *schedules.ROUTES,
            *webhooks.ROUTES,
            *console.ROUTES,
            *reference.ROUTES,
            *mcp.ROUTES,
        ],
        lifespan=[lifespan, mcp.lifespan],
        dependencies={"who": Provide(principal), "reads": Provide(reads_of, sync_to_thread=False)},
        exception_handlers={
            ApiError: handlers.on_api_error,
            DomainError: handlers.on_domain_error,
            HTTPException: handlers.on_http_error,
            RecursionError: handlers.on_too_deep,
            NatsError: handlers.on_broker_unavailable,
            LogUnavailable: handlers.on_broker_unavailable,
            RedisConnectionError: handlers.on_store_unavailable,
            RedisTimeoutError: handlers.on_store_unavailable,
            Exception: handlers.on_unexpected,
        },
        openapi_config=openapi.config(),
        cors_config=cors(own.cors_origins),
        request_max_body_size=own.max_body_bytes,
        middleware=[
            DefineMiddleware(RateLimitMiddleware, buckets=TokenBuckets(own.rate_limit, own.rate_burst)),
        ],
        debug=False,
        logging_config=None,  # Litestar's own would replace the root handler: its lines are in ours (runtime/logs.py)
    )
    # Around the router, not among the middleware: Litestar runs those only once a route matched, so a 404
    # would go uncounted
    # (the server span and the access log too, the log inside the span: its line carries the request's trace id)
    handler = access_log(app.asgi_handler) if own.access_log else app.asgi_handler
    app.asgi_handler = nosniff(http_metrics(http_spans(handler)))
    return app
