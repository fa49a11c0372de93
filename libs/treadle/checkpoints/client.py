"""The checkpoint service as seen by other workers: request/reply on ``treadle.ckpt.<volume>.<verb>``. Every
request names the volume: the thread's home (``Thread.volume``), never the asking process's own."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from ..eventlog import subjects, tracing
from ..runtime.consumer import Retryable
from .protocol import (
    Capture,
    Captured,
    CheckpointError,
    DiffRequest,
    DiffResult,
    Failure,
    PrepareWorkspace,
    Prune,
    Pruned,
    Restore,
    Restored,
    WorkspaceReady,
    decode_capture_reply,
    decode_diff_reply,
    decode_prepare_reply,
    decode_prune_reply,
    decode_restore_reply,
    encode,
)

if TYPE_CHECKING:
    from .hydrate import Hydrate, Hydrated
    from .materialize import Materialize, Materialized

T = TypeVar("T")


class CheckpointUnavailable(Retryable):
    """No checkpoint service answered in time (retryable)."""


class CheckpointClient:
    def __init__(self, nc: NATS, timeout: float = 30.0) -> None:
        self._nc = nc
        self._timeout = timeout

    async def _request(self, volume: str, verb: str, payload: bytes) -> bytes:
        return await request(self._nc, volume, verb, payload, self._timeout)

    async def prepare(self, tenant: str, thread: str, workspace: str, *, volume: str) -> WorkspaceReady:
        request = encode(PrepareWorkspace(tenant=tenant, thread=thread, workspace=workspace))
        reply = decode_prepare_reply(await self._request(volume, "prepare", request))
        if isinstance(reply, Failure):
            raise CheckpointError(reply.code, reply.message)
        return reply

    async def capture(self, request: Capture, *, volume: str) -> Captured:
        reply = decode_capture_reply(await self._request(volume, "capture", encode(request)))
        if isinstance(reply, Failure):
            raise CheckpointError(reply.code, reply.message)
        return reply

    async def diff(self, request: DiffRequest, *, volume: str) -> DiffResult:
        return ok(decode_diff_reply(await self._request(volume, "diff", encode(request))))

    async def restore(self, request: Restore, *, volume: str) -> Restored:
        return ok(decode_restore_reply(await self._request(volume, "restore", encode(request))))

    async def prune(self, request: Prune, *, volume: str) -> Pruned:
        return ok(decode_prune_reply(await self._request(volume, "prune", encode(request))))

    async def materialize(self, request: Materialize, *, volume: str) -> Materialized:
        """L6.5: a fork's workspace checked out from a checkpoint commit of its source (idempotent)."""
        from .materialize import request_materialize  # it imports this module

        return await request_materialize(self._nc, volume, request, self._timeout)

    async def hydrate(self, request: Hydrate, *, volume: str) -> Hydrated:
        """The workspace made from the checkpoint archive when the volume lost it (idempotent)."""
        from .hydrate import request_hydrate  # it imports this module

        return await request_hydrate(self._nc, volume, request, max(self._timeout, 60.0))


async def request(nc: NATS, volume: str, verb: str, payload: bytes, timeout: float) -> bytes:
    """One request to the checkpoint service of ``volume``; no answer in time is ``CheckpointUnavailable``."""
    try:
        msg = await nc.request(
            subjects.checkpoint(volume, verb), payload, timeout=timeout, headers=tracing.inject(None)
        )
    except (TimeoutError, NatsTimeout, NoRespondersError) as exc:
        raise CheckpointUnavailable(f"checkpoint service ({volume}) did not answer {verb}: {exc!r}") from None
    return msg.data


def ok(reply: T | Failure) -> T:
    """The service's answer, or its failure raised as ``CheckpointError``."""
    if isinstance(reply, Failure):
        raise CheckpointError(reply.code, reply.message)
    return reply
