"""The ports the coordinator and the supervisor work through: the event log, the checkpoint store and the
provider host directory, and the one the checkpoint service keeps checkpoints off the node through, the
checkpoint archive (the event log's and the archive's are defined beside their implementations, in
``eventlog.port`` and ``checkpoints.archive``). Each is a Protocol with a broker-backed implementation (``eventlog.log.EventLog``, ``checkpoints.client.CheckpointClient``,
``providers.hosts.HostClient``, ``checkpoints.archive.JetStreamArchive``) and an in-memory twin
(``treadle.memory``); one contract suite per port runs against both. Only what the services call is here.
"""

from __future__ import annotations

from typing import Protocol, TypeAlias

from treadle.checkpoints.archive import CheckpointArchive
from treadle.checkpoints.hydrate import Hydrate, Hydrated
from treadle.checkpoints.materialize import Materialize, Materialized
from treadle.checkpoints.protocol import Capture, Captured, DiffRequest, DiffResult, Restore, Restored, WorkspaceReady
from treadle.eventlog.port import EventLog
from treadle.providers import protocol as hp
from treadle.runtime.volumes import Snapshot

__all__ = ["CheckpointArchive", "CheckpointStore", "EventLog", "HostDirectory", "HostRequest", "VolumeDirectory"]

# What the verbs of ``protocol.VERB_REQUESTS`` carry.
HostRequest: TypeAlias = hp.StartTurn | hp.SteerTurn | hp.StopTurn | hp.Respond | hp.ForkThread | hp.RollbackTurns


class CheckpointStore(Protocol):
    """Workspace checkpoints, on the volume each request names (the thread's home). Refusals raise ``CheckpointError`` (with its failure code); a store
    that does not answer raises ``CheckpointUnavailable`` (retryable)."""

    async def prepare(self, tenant: str, thread: str, workspace: str, *, volume: str) -> WorkspaceReady: ...

    async def capture(self, request: Capture, *, volume: str) -> Captured: ...

    async def diff(self, request: DiffRequest, *, volume: str) -> DiffResult: ...

    async def restore(self, request: Restore, *, volume: str) -> Restored: ...

    async def materialize(self, request: Materialize, *, volume: str) -> Materialized:
        """L6.5: a fork's workspace made from a checkpoint commit of its source (idempotent)."""
        ...

    async def hydrate(self, request: Hydrate, *, volume: str) -> Hydrated:
        """A missing or empty workspace made from the checkpoint archive; one that holds the checkpoint is left
        as it is (idempotent)."""
        ...


class HostDirectory(Protocol):
    """The provider hosts of a volume, reached by placement (any host with room) or by host id. A host id that
    nobody serves raises ``HostGone``; no answer in time raises ``HostUnavailable``. Refusals are returned as
    ``HostFailure`` replies."""

    async def place(
        self, request: hp.PlaceSession, timeout: float | None = None, full: bool = False, *, volume: str
    ) -> hp.SessionPlaced | hp.HostFailure: ...

    async def warm(self, request: hp.WarmSession, *, volume: str) -> None:
        """A hint, never an error: a host of ``volume`` may launch the session's runtime before its placement."""
        ...

    async def start_turn(self, host_id: str, request: hp.StartTurn) -> hp.TurnAccepted | hp.HostFailure: ...

    async def verb(self, host_id: str, verb: str, request: HostRequest) -> hp.TurnAccepted | hp.HostFailure: ...

    async def summarise(self, request: hp.Summarise, *, volume: str) -> hp.Summary | hp.HostFailure: ...

    async def fork(self, host_id: str, request: hp.ForkThread) -> hp.Forked | hp.HostFailure: ...

    async def rollback(
        self, host_id: str, request: hp.RollbackTurns, timeout: float | None = None
    ) -> hp.RolledBack | hp.HostFailure: ...


class VolumeDirectory(Protocol):
    """The workspace volumes as they announce themselves (``runtime.volumes.Volumes``), for placing new threads."""

    async def snapshot(self) -> Snapshot: ...

    def placed(self, volume: str, tenant: str) -> None:
        """A thread of ``tenant`` was just created on ``volume``: counted there before its heartbeat says so."""
        ...
