"""What the supervisor's recovery tests share: a broker of their own (no other test's hosts or runs), a
checkpoint service, and a thread whose history the test writes into the log before any worker starts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import nats
from nats.aio.client import Client as NATS

from treadle.checkpoints.git import Workspaces
from treadle.checkpoints_service.service import CheckpointService
from treadle.core import events as ev
from treadle.eventlog import streams
from treadle.eventlog.log import EventLog
from treadle.ops.servers import NatsServer
from treadle.runtime.settings import Shared


@dataclass
class World:
    nc: NATS
    log: EventLog
    shared: Shared
    workspace_ready: object  # what Workspaces.prepare answered


@asynccontextmanager
async def thread_with_history(tmp_path: Path, history: Sequence[ev.Envelope]) -> AsyncIterator[World]:
    """``history`` (envelopes of one thread, appended one by one, in order) on a fresh broker."""
    tenant, thread = history[0].tenant, history[0].thread
    async with NatsServer(tmp_path / "nats") as server:
        nc = await nats.connect(server.url)
        try:
            await streams.ensure(nc.jetstream())
            shared = Shared(state_dir=tmp_path, nats_url=server.url)
            workspaces = Workspaces(shared.workspaces, tmp_path / "shadow")
            ready = await workspaces.prepare(tenant, thread, "w")
            checkpoints = CheckpointService(nc, workspaces, shared.volume)
            await checkpoints.start()
            log = EventLog(nc)
            seq = 0
            for e in history:
                seq = await log.append(tenant, thread, seq, [e])
            try:
                yield World(nc, log, shared, ready)
            finally:
                await checkpoints.stop()
        finally:
            await nc.close()
