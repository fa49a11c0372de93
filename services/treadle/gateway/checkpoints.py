"""HTTP routes of checkpoints: diffs and rollbacks (L10.5, L10.6).

Diffs are read from git by the checkpoint service between the commits the thread's projection names;
rollbacks are thread commands (the coordinator owns rollback intent) whose outcome is read back from the
thread's log, so the answer is the audited record, not a guess.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get, post
from litestar.params import FromPath, JSONBody, QueryParameter

from treadle.api.rollbacks import NodeRollbackRequest, RollbackRequest
from treadle.checkpoints.client import CheckpointUnavailable
from treadle.checkpoints.protocol import CheckpointError, DiffRequest, FileStat
from treadle.projections import parts
from treadle.usecases import rollbacks
from treadle.views.checkpoints import Checkpoint, RollbackView
from treadle.views.thread import Thread, run_change

from .deps import (
    HttpRequest,
    IdempotencyKey,
    MinSeq,
    Reads,
    Who,
    app_state,
    path_id,
    thread_of,
    thread_read,
    thread_view,
    wanted_seq,
)
from .errors import ApiError
from .openapi import BODY, COMMAND, DIFF, ON_THREAD, PARAMS, PATH_ID, ROLLBACK, THREAD_READ, errors
from .params import number

DEFAULT_DIFF_BYTES = 256 * 1024
MAX_DIFF_BYTES = 4 * 1024 * 1024
MAX_ORDINAL = 2**31 - 1


# --- shapes -----------------------------------------------------------------------------------------


class CheckpointPoint(msgspec.Struct, kw_only=True):
    checkpoint_id: str
    ordinal: int
    scope: str
    commit: str


class Diff(msgspec.Struct, kw_only=True):
    """A unified diff (cut at ``max_bytes``: ``truncated``) and per-file stats between two checkpoints."""

    thread_id: str
    run_id: str | None = None
    from_: CheckpointPoint | None = msgspec.field(default=None, name="from")
    to: CheckpointPoint
    files: list[FileStat]  # at most 1,000 (files_total: how many changed)
    files_total: int
    patch: str
    truncated: bool
    patch_bytes: int


MaxBytes = Annotated[str | None, QueryParameter(description=f"1..{MAX_DIFF_BYTES}, {DEFAULT_DIFF_BYTES}")]


def _max_bytes(value: str | None) -> int:
    return number(value, "max_bytes", low=1, high=MAX_DIFF_BYTES) or DEFAULT_DIFF_BYTES


# --- helpers ----------------------------------------------------------------------------------------


def _point(c: Checkpoint) -> CheckpointPoint:
    assert c.commit is not None
    return CheckpointPoint(checkpoint_id=c.id, ordinal=c.ordinal, scope=c.scope, commit=c.commit)


def _usable(c: Checkpoint | None, what: str) -> Checkpoint:
    if c is None or c.commit is None:
        raise ApiError(409, "checkpoint_unavailable", f"{what} has no checkpoint with files to compare")
    return c


async def _diff(
    request: HttpRequest,
    tenant: str,
    thread: Thread,
    old: Checkpoint | None,
    new: Checkpoint,
    max_bytes: int,
    run_id: str | None = None,
) -> Diff:
    client = request.app.state.checkpoints
    try:
        got = await client.diff(
            DiffRequest(
                tenant=tenant,
                thread=thread.id,
                workspace=thread.workspace,
                from_commit=old.commit if old else None,
                to_commit=new.commit or "",
                max_bytes=max_bytes,
            ),
            volume=thread.volume,
        )
    except CheckpointUnavailable:
        raise ApiError(
            503, "unavailable", "the checkpoint service did not answer; retry", headers={"Retry-After": "1"}
        ) from None
    except CheckpointError as exc:
        if exc.code == "store_unavailable":  # the checkpoint archive, behind the service: retryable like it
            raise ApiError(503, exc.code, exc.message, headers={"Retry-After": "1"}) from None
        raise ApiError(
            409 if exc.code in ("unknown_commit", "workspace_missing") else 400, exc.code, exc.message
        ) from None
    return Diff(
        thread_id=thread.id,
        run_id=run_id,
        from_=_point(old) if old else None,
        to=_point(new),
        files=got.files,
        files_total=got.files_total,
        patch=got.patch,
        truncated=got.truncated,
        patch_bytes=got.patch_bytes,
    )


# --- diffs ------------------------------------------------------------------------------------------


@get(
    "/v1/runs/{run_id:str}/diff",
    summary="What a run changed: its checkpoint vs the previous root checkpoint",
    tags=["checkpoints"],
    responses=errors(PARAMS, PATH_ID, DIFF, {404: ("run_not_found",)}),
)
async def run_diff(
    request: HttpRequest, who: Who, run_id: FromPath[str], max_bytes: MaxBytes = None, min_seq: MinSeq = None
) -> Diff:
    run_id = path_id(run_id, "run")
    limit = _max_bytes(max_bytes)
    thread = await thread_of(request, who.tenant, run_id, wanted_seq(request, min_seq))
    change = (
        await thread_read(
            request,
            who.tenant,
            thread,
            lambda snap: parts.change(snap, run_id),
            lambda view: run_change(view, run_id),
            min_seq,
        )
        if thread
        else None
    )
    if change is None:
        raise ApiError(404, "run_not_found", f"run {run_id} not found")
    new = _usable(change.new, f"run {run_id}")
    return await _diff(request, who.tenant, change.thread, change.old, new, limit, run_id=run_id)


@get(
    "/v1/threads/{thread_id:str}/diff",
    summary="The change between two runs' checkpoints (ordinals; 0 = before run 1)",
    tags=["checkpoints"],
    responses=errors(PARAMS, PATH_ID, THREAD_READ, DIFF, {400: ("invalid_range",)}),
)
async def thread_diff(
    request: HttpRequest,
    who: Who,
    thread_id: FromPath[str],
    from_: Annotated[str | None, QueryParameter(name="from", description="a run ordinal")] = None,
    to: Annotated[str | None, QueryParameter(name="to", description="a run ordinal")] = None,
    max_bytes: MaxBytes = None,
    min_seq: MinSeq = None,
) -> Diff:
    thread = path_id(thread_id, "thr")
    from_ordinal, to_ordinal = number(from_, "from", high=MAX_ORDINAL), number(to, "to", high=MAX_ORDINAL)
    limit = _max_bytes(max_bytes)
    state = await thread_view(request, who.tenant, thread, min_seq)
    if to_ordinal is None:
        latest = [c.ordinal for c in state.checkpoints if c.scope == "root" and not c.stale and c.commit]
        if not latest:
            raise ApiError(409, "checkpoint_unavailable", "the thread has no checkpoint yet")
        to_ordinal = max(latest)
    if from_ordinal is None:
        from_ordinal = max(to_ordinal - 1, 0)
    if from_ordinal > to_ordinal:
        raise ApiError(400, "invalid_range", "from must not be after to")
    new = _usable(state.checkpoint(to_ordinal), f"run {to_ordinal}")
    old = _usable(state.checkpoint(from_ordinal), f"run {from_ordinal}")
    assert state.thread is not None
    return await _diff(request, who.tenant, state.thread, old, new, limit)


# --- rollbacks --------------------------------------------------------------------------------------


@post(
    "/v1/threads/{thread_id:str}/rollback",
    status_code=200,
    summary="Roll the thread back to run N's files (L10.5); later runs become rolled_back",
    tags=["checkpoints"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, ROLLBACK, {400: ("invalid_ordinal",), 409: ("run_active",)}),
)
async def rollback_thread(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    thread_id: FromPath[str],
    data: JSONBody[RollbackRequest],
    idempotency_key: IdempotencyKey = None,
) -> RollbackView:
    return await rollbacks.thread(who, app_state(request).commands, reads, thread_id, data, idempotency_key)


@post(
    "/v1/nodes/{node_id:str}/rollback",
    status_code=200,
    summary="Restore a child node's checkpoint (L10.6); says whether the parent's workspace is touched",
    tags=["checkpoints"],
    responses=errors(PATH_ID, BODY, COMMAND, ON_THREAD, ROLLBACK, {404: ("node_not_found", "checkpoint_not_found")}),
)
async def rollback_node(
    request: HttpRequest,
    who: Who,
    reads: Reads,
    node_id: FromPath[str],
    data: JSONBody[NodeRollbackRequest],
    idempotency_key: IdempotencyKey = None,
) -> RollbackView:
    return await rollbacks.node(who, app_state(request).commands, reads, node_id, data, idempotency_key)


ROUTES = [run_diff, thread_diff, rollback_thread, rollback_node]
