"""Checkpoint service: `treadle.ckpt.<volume>.{prepare,capture,diff,restore,prune,materialize,hydrate}` over core
NATS request/reply."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from treadle.checkpoints import erase, hydrate, materialize
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.protocol import (
    CheckpointError,
    Failure,
    decode_capture,
    decode_diff,
    decode_prepare,
    decode_prune,
    decode_restore,
    encode,
)
from treadle.eventlog import nats_patches, subjects, tracing
from treadle.runtime.settings import CheckpointsSettings
from treadle.runtime.volumes import Announcer

from .eviction import IdleEviction

__all__ = ["CheckpointService"]

log = logging.getLogger(__name__)

QUEUE = "checkpoints"

Handler = Callable[[bytes], Awaitable[msgspec.Struct]]


class CheckpointService:
    """Answers checkpoint requests for the workspaces of one volume.

    Every request runs in its own task so a slow capture never holds up other workspaces (the
    NATS subscription callback runs messages one at a time); `Workspaces` serialises per
    workspace and bounds the git processes.
    """

    def __init__(
        self,
        nc: NATS,
        workspaces: Workspaces,
        volume: str,
        retention: CheckpointsSettings | None = None,
        announce: Path | None = None,
    ) -> None:
        """``announce``: the volume's workspace root; given, the service heartbeats its volume (runtime/volumes.py)
        so threads are placed on it."""
        self._nc = nc
        self._retention = retention
        self._sweeper: asyncio.Task[None] | None = None
        self._workspaces = workspaces
        self._volume = subjects.token(volume, "volume")
        self._subs: list[Subscription] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._announcer = Announcer(nc.jetstream(), self._volume, announce) if announce is not None else None
        self._eviction: IdleEviction | None = None
        if retention is not None and retention.evict_idle_seconds > 0 and workspaces.durable is not None:
            self._eviction = IdleEviction(
                nc, workspaces, self._volume, retention.evict_idle_seconds, retention.evict_interval_seconds,
                self._announcer,
            )  # fmt: skip

    async def start(self) -> None:
        handlers: dict[str, Handler] = {
            "prepare": self._prepare,
            "capture": self._capture,
            "diff": self._diff,
            "restore": self._restore,
            "prune": self._prune,
            materialize.VERB: materialize.MaterializeHandler.serving(self._workspaces),  # L6.5: a fork's workspace
            hydrate.VERB: self._hydrate,  # a thread's workspace made from the archive (off the node)
            erase.VERB: self._erase,  # a deleted thread's refs, and its own workspace (L1.4)
        }
        for verb, handler in handlers.items():
            sub = await nats_patches.subscribe(
                self._nc, subjects.checkpoint(self._volume, verb), self._dispatcher(verb, handler), QUEUE
            )
            self._subs.append(sub)
        if self._retention is not None and self._retention.retention_idle_days > 0:
            self._sweeper = asyncio.create_task(self._sweep(self._retention), name="ckpt-retention")
        if self._announcer is not None:
            await self._announcer.start()  # once it answers: placed threads find it
        if self._eviction is not None:
            self._eviction.start()

    async def stop(self) -> None:
        """Stop taking requests, then let the ones in flight finish and reply."""
        if self._announcer is not None:
            await self._announcer.stop()  # no new thread is placed here from now on
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._eviction is not None:
            await self._eviction.stop()
        subs, self._subs = self._subs, []
        for sub in subs:
            try:
                await sub.drain()
            except Exception:  # connection already closed/draining: nothing more will arrive
                log.debug("drain of %s failed", sub.subject, exc_info=True)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _dispatcher(self, verb: str, handler: Handler) -> Callable[[Msg], None]:
        def on_message(msg: Msg) -> None:  # called by the read loop: the request's own task starts now
            task = asyncio.create_task(self._handle(verb, handler, msg), name=f"ckpt-{verb}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return on_message

    async def _handle(self, verb: str, handler: Handler, msg: Msg) -> None:
        try:
            with tracing.nats_span(
                f"checkpoint {verb}",
                msg.subject,
                "process",
                msg.headers,
                kind="server",
                extra={"treadle.volume": self._volume},
            ):  # in the requester's trace
                reply = await handler(msg.data)
        except msgspec.DecodeError as e:  # includes ValidationError
            reply = Failure(code="bad_request", message=f"invalid {verb} request: {e}")
        except CheckpointError as e:
            reply = e.to_failure()
        except Exception:
            log.exception("checkpoint %s failed", verb)
            reply = Failure(code="internal", message=f"{verb} failed unexpectedly")
        if not msg.reply:
            return  # a publish without reply subject: nobody to tell
        try:
            await msg.respond(encode(reply))
        except Exception:
            log.warning("could not reply to checkpoint %s", verb, exc_info=True)

    @property
    def eviction(self) -> IdleEviction | None:
        return self._eviction

    async def _prepare(self, data: bytes) -> msgspec.Struct:
        req = decode_prepare(data)
        return await self._workspaces.prepare(req.tenant, req.thread, req.workspace)

    async def _capture(self, data: bytes) -> msgspec.Struct:
        return await self._workspaces.capture(decode_capture(data))

    async def _sweep(self, policy: CheckpointsSettings) -> None:
        """Retention: every interval, prune the refs of threads idle for longer than the policy allows."""
        while True:
            await asyncio.sleep(policy.retention_interval_seconds)  # the policy's period, not a synchronisation
            try:
                deleted = await self._workspaces.sweep(policy.retention_idle_days * 86400, policy.retention_keep_latest)
                if deleted:
                    log.info("retention pruned %d checkpoint refs", len(deleted))
            except Exception:
                log.exception("retention sweep failed")

    async def _diff(self, data: bytes) -> msgspec.Struct:
        return await self._workspaces.diff(decode_diff(data))

    async def _restore(self, data: bytes) -> msgspec.Struct:
        return await self._workspaces.restore(decode_restore(data))

    async def _hydrate(self, data: bytes) -> msgspec.Struct:
        return await self._workspaces.hydrate(hydrate.decode(data))

    async def _erase(self, data: bytes) -> msgspec.Struct:
        return await erase.erase(self._workspaces, erase.decode(data))

    async def _prune(self, data: bytes) -> msgspec.Struct:
        return await self._workspaces.prune(decode_prune(data))
