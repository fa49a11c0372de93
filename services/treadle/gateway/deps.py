"""What every route of the gateway depends on: the app's handles, the caller's principal, path ids, and the
thread's views read from the projection store (rebuilt from the log when missing). Route modules import
this module, never ``app.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeAlias, TypeVar

import msgspec
from litestar import Request, Response
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import HeaderParameter, QueryParameter

from treadle.core.ids import is_id
from treadle.core.policy import ROLES
from treadle.eventlog.subjects import parse_event_subject
from treadle.ops.tokens import Principal
from treadle.projections import notices
from treadle.projections.parts import Missing, Snapshot
from treadle.runtime.access_log import note_tenant
from treadle.runtime.settings import GatewaySettings
from treadle.usecases.ids import checked
from treadle.usecases.messages import MessageLimits
from treadle.usecases.ports import ThreadReads
from treadle.views.of_state import replay
from treadle.views.thread import ThreadView

from . import sessions
from .errors import ApiError
from .params import number

HttpRequest: TypeAlias = Request[Any, Any, State]  # whose ``app.state`` holds what ``create_app`` opened

# The dependencies every route may ask for by name (``create_app`` provides them): the caller, resolved from its
# bearer token, session cookie or the ``/mcp`` door; and the thread reads the use cases work through.
Who = NamedDependency[Principal]
Reads = NamedDependency[ThreadReads]
IdempotencyKey = Annotated[str | None, HeaderParameter(name="Idempotency-Key")]
MinSeq = Annotated[
    str | None,
    QueryParameter(
        description=(
            "a stream sequence the client has seen, e.g. the `seq` a write answered with or an SSE event's id "
            "(ASCII digits): finds the thread of an id the index does not know yet. Every read reflects the "
            "thread's last event when it came, with or without it"
        )
    ),
]

_view_decoder = msgspec.json.Decoder(ThreadView)
T = TypeVar("T")
PRINCIPAL_KEY = "treadle.principal"  # an ASGI scope key: set by server code only, never from a request


def app_state(request: HttpRequest) -> State:
    """The handles the app's lifespan opened: nc, log, commands, tokens, policies, projections, checkpoints."""
    return request.app.state


async def principal(request: HttpRequest) -> Principal:
    found = await _principal(request)
    note_tenant(request.scope, found.tenant)
    return found


async def _principal(request: HttpRequest) -> Principal:
    if isinstance(known := request.scope.get(PRINCIPAL_KEY), Principal):  # resolved at a mount's door (``/mcp``)
        return known
    header = request.headers.get("authorization", "")
    if not header and (sid := request.cookies.get(sessions.COOKIE)):  # a signed-in console page
        return await sessions.principal(request, sid)
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "a bearer token is required", headers={"WWW-Authenticate": "Bearer"})
    found: Principal | None = await app_state(request).tokens.resolve(token.strip())
    if found is None:
        raise ApiError(401, "unauthorized", "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})
    if found.role not in ROLES:  # a token made before roles were checked, with a role that means nothing
        raise ApiError(403, "forbidden", f"role {found.role!r} is not a known role", {"role": found.role})
    return found


def path_id(value: str, prefix: str) -> str:
    """Path ids are ours; anything else (dots, wildcards, other prefixes) never reaches a subject or key: the
    use cases' rule (``usecases.ids.checked``), a typed 400 ``invalid_id``."""
    return checked(value, prefix)


MIN_SEQ_HEADER = "X-Treadle-Min-Seq"  # the same as ``min_seq``, for clients that set it once for every read
MinSeqHeader = Annotated[
    str | None, HeaderParameter(name=MIN_SEQ_HEADER, description="as the min_seq query parameter", required=False)
]


def wanted_seq(request: HttpRequest, min_seq: str | None) -> int | None:
    """The stream sequence a read must reflect: the highest of ``min_seq`` and the ``X-Treadle-Min-Seq`` header."""
    asked = [number(min_seq, "min_seq"), number(request.headers.get(MIN_SEQ_HEADER), MIN_SEQ_HEADER)]
    return max((s for s in asked if s), default=None)


PROJECTION_WAIT = 2.0  # seconds a read waits for the projector before it folds the thread's log itself


async def fresh(
    request: HttpRequest, tenant: str, thread: str, read: Callable[[], Awaitable[tuple[int, T] | None]]
) -> tuple[int, T] | None:
    """What ``read`` finds in the projection (the sequence it reflects, and its answer), once it reflects every
    event of the thread the stream held when the read came: it waits up to ``PROJECTION_WAIT`` for the projector
    (it writes a few ms after the log has an event), woken by its notice. By default, not only with the client's
    ``min_seq``: a client that saw a run end on the stream and reads it at once must see it ended, with or
    without the SDK. The client's ``min_seq`` asks for no more than that (a larger one is another thread's
    sequence: the thread's last event is all it can mean). None: not (wholly) in the projection, or the
    projector is further behind: fold the log instead.

    The read is made beside the direct get of the thread's last sequence, not after a look at the projection's:
    when the projection has it, as nearly every read's does, the read costs one round trip less (the SDK's wait
    for a run's end is one). A read found behind is made again once the projector has caught up."""
    state = app_state(request)
    target, got = await asyncio.gather(state.log.last_seq(tenant, thread), read())
    if got is not None and got[0] >= target:
        return got
    if not target:  # the log holds no event of the thread: nothing to wait for (an unknown id's 404)
        return None
    if not await notices.reached(state.nc, state.projections, tenant, thread, target, PROJECTION_WAIT):
        return None
    return await read()  # the projection never goes back: this one reflects ``target`` at least


def _check_min_seq(request: HttpRequest, min_seq: str | None, *, own: bool) -> None:
    """A malformed ``min_seq`` (or header) is still a 400, though every read now waits for the thread's last event."""
    if own:
        wanted_seq(request, min_seq)
    else:
        number(min_seq, "min_seq")


async def thread_doc(
    request: HttpRequest, tenant: str, thread: str, min_seq: str | None = None, *, own: bool = True
) -> bytes:
    """The thread's document (its view's JSON); a thread missing from Redis is folded from the log on demand.
    The read waits briefly for the projector to reach the thread's last event (``fresh``), and folds the log
    itself when the projector is further behind: a read never goes back in time.
    ``own=False``: a thread the request does not name (a lineage's parent), which the header does not concern."""
    _check_min_seq(request, min_seq, own=own)
    got = await fresh(request, tenant, thread, lambda: app_state(request).projections.doc_at(tenant, thread))
    return got[1] if got is not None else await folded_doc(request, tenant, thread)


async def folded_doc(request: HttpRequest, tenant: str, thread: str) -> bytes:
    """The thread's document folded from its log now (and stored, for the reads after it); 404 when none."""
    state = app_state(request)
    doc: bytes | None = await state.projections.refold(await state.log.read(tenant, thread))
    if doc is None:
        raise ApiError(404, "thread_not_found", f"thread {thread} not found")
    return doc


async def thread_read(
    request: HttpRequest,
    tenant: str,
    thread: str,
    read: Callable[[Snapshot], Awaitable[T]],
    whole: Callable[[ThreadView], T],
    min_seq: str | None = None,
    *,
    own: bool = True,
) -> T:
    """A read of only what the thread answers with (``read``, one Redis call: see ``projections.parts``), with
    the guarantees of ``thread_doc``: when the projection is behind the thread's last event, or not (wholly)
    stored in this view version, the same answer is shaped by ``whole`` from the thread folded from its log."""
    _check_min_seq(request, min_seq, own=own)

    async def stored() -> tuple[int, T] | None:
        snaps: list[Snapshot] = []

        async def reader(snap: Snapshot) -> T:
            snaps.append(snap)
            return await read(snap)

        try:
            found = await app_state(request).projections.read(tenant, thread, reader)
        except Missing:
            return None
        return (snaps[0].sequence if snaps and snaps[0].seq is not None else 0), found

    got = await fresh(request, tenant, thread, stored)
    if got is not None:
        return got[1]
    return whole(_view_decoder.decode(await folded_doc(request, tenant, thread)))


async def thread_view(
    request: HttpRequest, tenant: str, thread: str, min_seq: str | None = None, *, own: bool = True
) -> ThreadView:
    return _view_decoder.decode(await thread_doc(request, tenant, thread, min_seq, own=own))


async def logged_view(request: HttpRequest, tenant: str, thread: str) -> ThreadView | None:
    """The thread's views folded from its log right now, not from the projection (which may lag behind it)."""
    return replay(await app_state(request).log.read(tenant, thread))


async def thread_of(request: HttpRequest, tenant: str, entity_id: str, wanted: int | None = None) -> str | None:
    """The thread of a run, node, request or plan. The index is written by the projector just after the event
    is stored, so a client acting on an id it has only just been given may be a moment early: a miss is
    looked up again for up to a second before it counts as unknown. A client that says which sequence it has
    seen (``wanted``, from the write that made the id or an event of its thread) is answered from the thread
    of that event when the index is further behind: the route then reads that thread at that sequence."""
    projections = app_state(request).projections
    for delay in (0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.35):
        await asyncio.sleep(delay)
        thread: str | None = await projections.thread_of(tenant, entity_id)
        if thread is not None:
            return thread
    if wanted and (subject := await app_state(request).log.subject_at(wanted)) is not None:
        owner_tenant, thread, _ = parse_event_subject(subject)
        if owner_tenant == tenant and is_id(thread, "thr"):
            return thread
    return None


def message_limits(request: HttpRequest) -> MessageLimits:
    """This deployment's limits of a message (``GatewaySettings``), within the contract's."""
    own: GatewaySettings = app_state(request).settings
    return MessageLimits(text_chars=own.max_text_chars, script_bytes=own.max_script_bytes)


def json_response(content: bytes, status: int = 200) -> Response[bytes]:
    return Response(content=content, media_type="application/json", status_code=status)


def documented(model: type) -> dict[int, ResponseSpec]:
    """For routes that pass stored JSON through untouched: the OpenAPI document still names its shape."""
    return {200: ResponseSpec(data_container=model, description="OK", generate_examples=False)}
