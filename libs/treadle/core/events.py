"""The catalogue of every event type, and the codec of the event log.

Importing this module registers every concept's events, so :func:`decode_event` knows them all. Readers
outside ``treadle.core`` use it as ``events as ev``; modules inside core import their events directly."""

from __future__ import annotations

import msgspec

from treadle.core.checkpoints.events import CheckpointCaptured
from treadle.core.envelope import PAYLOADS, SCHEMA_VERSION, Envelope, Payload, UnknownEvent, _RawEnvelope, event
from treadle.core.lineage.events import (
    ChildForked,
    ContextDelivered,
    ContextRequest,
    ContextResolved,
    DelegationEnded,
    DelegationFinished,
    DelegationStarted,
    HandoffCreated,
    ThreadDelegated,
    ThreadForked,
    TransferFailed,
)
from treadle.core.plans.events import PlanImplemented, PlanUpdated
from treadle.core.providers.events import ProviderAttached, ProviderResumeFailed, ProviderStopped
from treadle.core.requests.events import RequestOpened, RequestResolved
from treadle.core.rollback.events import RollbackCompleted, RollbackFailed, RollbackProviderRequested, RollbackStarted
from treadle.core.run.events import (
    AttemptEnded,
    AttemptStarted,
    InterruptRequested,
    InterruptSent,
    NodeCompleted,
    NodeStarted,
    RunCancelled,
    RunCompleted,
    RunDispatched,
    RunEnded,
    RunFailed,
    RunHeld,
    RunInterrupted,
    RunQueued,
    RunStarted,
    RunSteered,
    RunWarning,
    SteerDelivered,
    SteerJoined,
)
from treadle.core.thread.events import (
    MessageCompleted,
    MessageCreated,
    MessageDelta,
    QueueReordered,
    RunEdited,
    ThreadArchived,
    ThreadCreated,
    ThreadDeleted,
    ThreadMoved,
    ThreadRenamed,
    ThreadUnarchived,
)

__all__ = [
    "AttemptEnded",
    "AttemptStarted",
    "CheckpointCaptured",
    "ChildForked",
    "ContextDelivered",
    "ContextRequest",
    "ContextResolved",
    "DelegationEnded",
    "DelegationFinished",
    "DelegationStarted",
    "Envelope",
    "HandoffCreated",
    "InterruptRequested",
    "InterruptSent",
    "MessageCompleted",
    "MessageCreated",
    "MessageDelta",
    "NodeCompleted",
    "NodeStarted",
    "PAYLOADS",
    "Payload",
    "PlanImplemented",
    "PlanUpdated",
    "ProviderAttached",
    "ProviderResumeFailed",
    "ProviderStopped",
    "QueueReordered",
    "RequestOpened",
    "RequestResolved",
    "RollbackCompleted",
    "RollbackFailed",
    "RollbackProviderRequested",
    "RollbackStarted",
    "RunCancelled",
    "RunCompleted",
    "RunDispatched",
    "RunEdited",
    "RunEnded",
    "RunFailed",
    "RunHeld",
    "RunInterrupted",
    "RunQueued",
    "RunStarted",
    "RunSteered",
    "RunWarning",
    "SCHEMA_VERSION",
    "SteerDelivered",
    "SteerJoined",
    "ThreadArchived",
    "ThreadCreated",
    "ThreadDeleted",
    "ThreadDelegated",
    "ThreadForked",
    "ThreadMoved",
    "ThreadRenamed",
    "ThreadUnarchived",
    "TransferFailed",
    "UnknownEvent",
    "decode_event",
    "encode_event",
    "event",
]

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
