"""The catalogue of every event type, and the codec of the event log.

Importing this module registers every concept's events, so :func:`decode_event` knows them all. Readers
outside ``treadle.core`` use it as ``events as ev``; modules inside core import their events directly. Each
event is named here once (an explicit re-export); what readers need to know of it (its traits: whether it ends
a run, which ids it indexes, what its fold may change) is declared with the event itself (``envelope.event``)."""

from __future__ import annotations

import msgspec

from treadle.core.checkpoints.events import CheckpointCaptured as CheckpointCaptured
from treadle.core.envelope import PAYLOADS as PAYLOADS
from treadle.core.envelope import SCHEMA_VERSION as SCHEMA_VERSION
from treadle.core.envelope import Envelope as Envelope
from treadle.core.envelope import Payload as Payload
from treadle.core.envelope import Traits as Traits
from treadle.core.envelope import UnknownEvent as UnknownEvent
from treadle.core.envelope import _RawEnvelope
from treadle.core.envelope import event as event
from treadle.core.envelope import indexed as indexed
from treadle.core.lineage.events import ChildForked as ChildForked
from treadle.core.lineage.events import ContextDelivered as ContextDelivered
from treadle.core.lineage.events import ContextRequest as ContextRequest
from treadle.core.lineage.events import ContextResolved as ContextResolved
from treadle.core.lineage.events import DelegationEnded as DelegationEnded
from treadle.core.lineage.events import DelegationFinished as DelegationFinished
from treadle.core.lineage.events import DelegationStarted as DelegationStarted
from treadle.core.lineage.events import HandoffCreated as HandoffCreated
from treadle.core.lineage.events import ThreadDelegated as ThreadDelegated
from treadle.core.lineage.events import ThreadForked as ThreadForked
from treadle.core.lineage.events import TransferFailed as TransferFailed
from treadle.core.plans.events import PlanImplemented as PlanImplemented
from treadle.core.plans.events import PlanUpdated as PlanUpdated
from treadle.core.providers.events import ProviderAttached as ProviderAttached
from treadle.core.providers.events import ProviderResumeFailed as ProviderResumeFailed
from treadle.core.providers.events import ProviderStopped as ProviderStopped
from treadle.core.requests.events import RequestOpened as RequestOpened
from treadle.core.requests.events import RequestResolved as RequestResolved
from treadle.core.rollback.events import RollbackCompleted as RollbackCompleted
from treadle.core.rollback.events import RollbackFailed as RollbackFailed
from treadle.core.rollback.events import RollbackProviderRequested as RollbackProviderRequested
from treadle.core.rollback.events import RollbackStarted as RollbackStarted
from treadle.core.run.events import AttemptEnded as AttemptEnded
from treadle.core.run.events import AttemptStarted as AttemptStarted
from treadle.core.run.events import InterruptRequested as InterruptRequested
from treadle.core.run.events import InterruptSent as InterruptSent
from treadle.core.run.events import NodeCompleted as NodeCompleted
from treadle.core.run.events import NodeStarted as NodeStarted
from treadle.core.run.events import RunCancelled as RunCancelled
from treadle.core.run.events import RunCompleted as RunCompleted
from treadle.core.run.events import RunDispatched as RunDispatched
from treadle.core.run.events import RunEnded as RunEnded
from treadle.core.run.events import RunFailed as RunFailed
from treadle.core.run.events import RunHeld as RunHeld
from treadle.core.run.events import RunInterrupted as RunInterrupted
from treadle.core.run.events import RunQueued as RunQueued
from treadle.core.run.events import RunStarted as RunStarted
from treadle.core.run.events import RunSteered as RunSteered
from treadle.core.run.events import RunWarning as RunWarning
from treadle.core.run.events import SteerDelivered as SteerDelivered
from treadle.core.run.events import SteerJoined as SteerJoined
from treadle.core.thread.events import MessageCompleted as MessageCompleted
from treadle.core.thread.events import MessageCreated as MessageCreated
from treadle.core.thread.events import MessageDelta as MessageDelta
from treadle.core.thread.events import QueueReordered as QueueReordered
from treadle.core.thread.events import RunEdited as RunEdited

# Managing a thread (L1.3, L1.4)
from treadle.core.thread.events import ThreadArchived as ThreadArchived
from treadle.core.thread.events import ThreadCreated as ThreadCreated
from treadle.core.thread.events import ThreadDeleted as ThreadDeleted
from treadle.core.thread.events import ThreadMoved as ThreadMoved
from treadle.core.thread.events import ThreadRenamed as ThreadRenamed
from treadle.core.thread.events import ThreadUnarchived as ThreadUnarchived

# The types of the events that end a run, in the order they were declared (the coordinator's run-end consumers
# filter on them; ``treadle check`` finds a run's end by them).
RUN_ENDING: tuple[str, ...] = tuple(t for t, cls in PAYLOADS.items() if cls.TRAITS.ends_run)
# The event that ends a run in each status.
ENDING_IN: dict[str, type[Payload]] = {cls.TRAITS.ends_run: cls for cls in PAYLOADS.values() if cls.TRAITS.ends_run}

_raw_decoder = msgspec.json.Decoder(_RawEnvelope)


_payload_decoders = {name: msgspec.json.Decoder(cls) for name, cls in PAYLOADS.items()}


_encoder = msgspec.json.Encoder()


def encode_event(env: Envelope) -> bytes:
    return _encoder.encode(env)


def decode_event(data: bytes, seq: int | None = None) -> Envelope:
    raw = _raw_decoder.decode(data)
    decoder = _payload_decoders.get(raw.type)
    payload = decoder.decode(raw.data) if decoder else UnknownEvent(raw=msgspec.json.decode(raw.data))
    return Envelope(
        id=raw.id,
        type=raw.type,
        tenant=raw.tenant,
        thread=raw.thread,
        at=raw.at,
        command_id=raw.command_id,
        causation_id=raw.causation_id,
        correlation_id=raw.correlation_id,
        actor=raw.actor,
        schema_version=raw.schema_version,
        seq=seq if seq is not None else raw.seq,
        data=payload,
    )
