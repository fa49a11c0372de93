"""Events: past-tense facts with stable type tags, wrapped in the envelope of ARCHITECTURE.md.

The type tag doubles as the last two tokens of the subject
``treadle.evt.<tenant>.<thread>.<aggregate>.<event>``, so consumers can filter by type on the broker.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import msgspec

from .entities import ChildCheckpoint, FileChange, ProviderCapabilities, ProviderThreadSettings, TodoItem

SCHEMA_VERSION = 1


class Payload(msgspec.Struct, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[str]


PAYLOADS: dict[str, type[Payload]] = {}


def event(type_: str):
    def register(cls: type[Payload]) -> type[Payload]:
        cls.TYPE = type_
        PAYLOADS[type_] = cls
        return cls

    return register


# --- threads and messages -------------------------------------------------------------------------


@event("thread.created")
class ThreadCreated(Payload, kw_only=True):
    thread_id: str
    title: str = ""
    provider: str = "scripted"
    model: str | None = None
    runtime_mode: str = "approval_required"
    workspace: str
    created_by: str


@event("message.created")
class MessageCreated(Payload, kw_only=True):
    message_id: str
    role: str
    text: str
    run_id: str | None = None
    author: str | None = None


@event("message.delta")
class MessageDelta(Payload, kw_only=True):
    """Coalesced assistant text (≤ 1 per message per 250 ms or 4 KiB); the first one opens the message."""

    message_id: str
    run_id: str
    attempt_id: str
    node_id: str
    text: str


@event("message.completed")
class MessageCompleted(Payload, kw_only=True):
    message_id: str
    run_id: str
    attempt_id: str
    node_id: str
    text: str
    status: str = "completed"


# --- runs, attempts, nodes ------------------------------------------------------------------------


@event("run.queued")
class RunQueued(Payload, kw_only=True):
    """L2.1 in one fact: the user message, its run (ordinal N) with root node and first attempt, and — when
    nothing else is active — its dispatch. One event, so the decision is atomic without a batch."""

    run_id: str
    ordinal: int
    message_id: str
    text: str
    author: str | None = None
    root_node_id: str
    attempt_id: str
    mode: str
    disposition: str
    dispatched: bool = False
    provider: str
    model: str | None = None
    script: dict | None = None
    supersedes_run_id: str | None = None  # L3.4: the message was a steer of this run, which had answered already
    front: bool = False  # queued at the head (start_immediately behind a run being interrupted)
    context: ContextRequest | None = None  # L5.4 clean context / L7.1 merge-back asked with the message


@event("run.dispatched")
class RunDispatched(Payload, kw_only=True):
    run_id: str


@event("run.held")
class RunHeld(Payload, kw_only=True):
    """L9.3: no provider host can take the run's attempt now; the run waits ``queued`` for ``reason``
    (``capacity``: every host is busy; ``tenant_quota``: its tenant is at a limit; ``sandbox_unavailable``: no host
    that answered can sandbox its runtime) and starts once room frees."""

    run_id: str
    attempt_id: str
    reason: str


@event("run.started")
class RunStarted(Payload, kw_only=True):
    """L2.2: the provider accepted the turn; root node and run are running."""

    run_id: str
    attempt_id: str
    session_id: str
    turn_id: str
    native_turn_ref: str | None = None


class RunEnded(Payload, kw_only=True):
    """A terminal run carries its checkpoint (L10.2): the barrier's last step and its result land together."""

    run_id: str
    attempt_id: str
    checkpoint: CheckpointCaptured | None = None
    error: str | None = None


@event("run.completed")
class RunCompleted(RunEnded, kw_only=True):
    pass


@event("run.failed")
class RunFailed(RunEnded, kw_only=True):
    pass


@event("run.interrupted")
class RunInterrupted(RunEnded, kw_only=True):
    pass


@event("run.cancelled")
class RunCancelled(RunEnded, kw_only=True):
    pass


@event("attempt.started")
class AttemptStarted(Payload, kw_only=True):
    """A further attempt at a run (recovery, steering restart); the first attempt comes with run.queued."""

    run_id: str
    attempt_id: str
    root_node_id: str
    reason: str
    message_ids: list[str] = []  # the steering messages this attempt carries (reason steering_restart)
    script: dict | None = None


@event("attempt.ended")
class AttemptEnded(Payload, kw_only=True):
    """An attempt that will not complete its run (lost with its provider, interrupted, failed)."""

    run_id: str
    attempt_id: str
    status: str
    reason: str | None = None


@event("node.started")
class NodeStarted(Payload, kw_only=True):
    node_id: str
    run_id: str
    attempt_id: str
    parent_id: str | None = None
    kind: str
    title: str = ""
    input: dict | None = None
    native_thread_ref: str | None = None  # L6.4: the provider thread a subagent owns (forkable natively)


@event("node.completed")
class NodeCompleted(Payload, kw_only=True):
    node_id: str
    run_id: str
    status: str = "completed"
    output: str | None = None


@event("run.warning")
class RunWarning(Payload, kw_only=True):
    """A provider error that does not end the run (L2.5)."""

    run_id: str
    message: str


# --- steering, interrupts, the queue (L3, L8) ----------------------------------------------------


@event("run.steered")
class RunSteered(Payload, kw_only=True):
    """A user message that steers the active run (L3.2/L3.3): attached to the run, delivered by the
    supervisor natively or through an interrupt and a replacement attempt."""

    run_id: str
    message_id: str
    text: str
    author: str | None = None
    steering: str  # native | restart (restart_active, or no active steering)
    script: dict | None = None


@event("steer.delivered")
class SteerDelivered(Payload, kw_only=True):
    """The provider accepted a native steer into the attempt's turn."""

    run_id: str
    attempt_id: str
    message_id: str


@event("interrupt.requested")
class InterruptRequested(Payload, kw_only=True):
    """L8.1: someone asked; the run ends only when the provider says so (L8.2)."""

    run_id: str
    attempt_id: str
    reason: str = "user"  # user | steering | preempted
    by: str | None = None


@event("interrupt.sent")
class InterruptSent(Payload, kw_only=True):
    """How the interrupt reached the provider: ``native`` or ``stop_session`` (L8.3's degradation)."""

    run_id: str
    attempt_id: str
    path: str


@event("queue.reordered")
class QueueReordered(Payload, kw_only=True):
    order: list[str]


@event("run.edited")
class RunEdited(Payload, kw_only=True):
    """A queued run's message was edited before it started (L3.6)."""

    run_id: str
    text: str
    script: dict | None = None


@event("plan.implemented")
class PlanImplemented(Payload, kw_only=True):
    plan_id: str
    run_id: str
    by: str  # the run or thread implementing it (L12.3)
    as_: str = msgspec.field(name="as")


# --- provider sessions and threads ----------------------------------------------------------------


@event("provider.attached")
class ProviderAttached(Payload, kw_only=True):
    """A provider session is live for this app thread, with its provider thread (created or resumed)."""

    session_id: str
    provider: str
    host_id: str
    boot_id: str
    provider_thread_id: str
    native_ref: str
    resumed: bool = False
    capabilities: ProviderCapabilities
    replaces: str | None = None  # L9.4: a replacement for this provider thread, which could not resume
    settings: ProviderThreadSettings | None = None  # L5.4: what the run that placed it asked for


@event("provider.resume_failed")
class ProviderResumeFailed(Payload, kw_only=True):
    """L9.4: the provider thread could not be resumed; it is kept in the graph, marked unusable."""

    provider_thread_id: str
    reason: str


@event("provider.stopped")
class ProviderStopped(Payload, kw_only=True):
    """L9.3: the live runtime is gone; the provider thread and its native ref are kept."""

    session_id: str
    reason: str
    detail: str | None = None  # how a runtime that died under a turn ended ("codex app-server was killed by SIGKILL")


# --- requests, plans, checkpoints -----------------------------------------------------------------


@event("request.opened")
class RequestOpened(Payload, kw_only=True):
    request_id: str
    run_id: str
    node_id: str
    attempt_id: str
    parent_id: str | None = None  # the node that asked (a subagent's requests nest under it)
    kind: str
    native_ref: str | None = None
    prompt: str = ""
    detail: dict | None = None


@event("request.resolved")
class RequestResolved(Payload, kw_only=True):
    request_id: str
    run_id: str
    status: str = "resolved"
    response: dict | None = None


@event("plan.updated")
class PlanUpdated(Payload, kw_only=True):
    plan_id: str
    run_id: str
    node_id: str | None = None
    kind: str
    text: str = ""
    items: list[TodoItem] = []


@event("checkpoint.captured")
class CheckpointCaptured(Payload, kw_only=True):
    checkpoint_id: str
    run_id: str | None = None
    scope: str = "root"
    ordinal: int
    kind: str = "run"
    status: str = "completed"
    ref: str | None = None
    commit: str | None = None
    tree: str | None = None
    unchanged: bool = False
    files: list[FileChange] = []
    node_id: str | None = None  # a child scope's node (L10.3)
    children: list[ChildCheckpoint] = []  # a root checkpoint's summaries of its run's child scopes (L10.3)
    skipped: list[str] = []  # paths a checkpoint leaves alone: "<path> (submodule)"
    files_total: int | None = None  # set when `files` was cut (at 1,000): the number of files changed


# --- lineage: forks, provider switches, handoffs, merge-back (L5, L6, L7) --------------------------


@event("thread.forked")
class ThreadForked(Payload, kw_only=True):
    """L6.1, on the new thread right after its ``thread.created``: its lineage and a pending fork transfer.
    Nothing else: no provider, session, provider thread or summary until its first run."""

    parent_thread_id: str
    root_thread_id: str
    transfer_id: str
    source_point: dict
    fidelity: str | None = None  # "synthetic" when only a low-fidelity fork is possible (L6.4)


@event("thread.child_forked")
class ChildForked(Payload, kw_only=True):
    """On the source thread: a fork was made from it. Its own history is untouched."""

    child_thread_id: str
    transfer_id: str
    source_point: dict


class ContextRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a message asked of its run's context, carried by its ``run.queued`` (so a reader that sees the run
    sees the request): a clean provider thread (L5.4) and/or the results of a fork (L7.1: the merge-back
    transfer, pending until the run starts)."""

    clean_context: bool = False
    transfer_id: str | None = None
    merge_back_from: str | None = None
    source_point: dict | None = None
    base_point: dict | None = None


@event("handoff.created")
class HandoffCreated(Payload, kw_only=True):
    """L5.5: a context handoff artifact, stored before the provider sees it."""

    handoff_id: str
    run_id: str
    strategy: str
    reason: str = ""
    from_provider: str | None = None
    to_provider: str
    provider_thread_id: str | None = None
    transfer_id: str | None = None
    source_thread_id: str | None = None
    covered_ordinals: list[int] = []
    text: str
    truncated: bool = False
    summariser: str = "local"  # L5.5: "local" (deterministic) or "provider:<name>"
    version: int = 1  # of that summariser
    fallback: str | None = None  # why a configured provider-backed summariser was not used


@event("context.resolved")
class ContextResolved(Payload, kw_only=True):
    """L5.2/L6.2: the provider thread a run starts on and the context it gets; resolves its transfers."""

    run_id: str
    provider: str
    provider_thread_id: str
    fresh: bool
    fork_native_ref: str | None = None
    fork_at_turn_ref: str | None = None
    handoff_ids: list[str] = []
    transfers: dict[str, str] = {}  # transfer id -> resolved_native | resolved_portable


@event("context.delivered")
class ContextDelivered(Payload, kw_only=True):
    """The provider took the turn carrying the resolved context: transfers consumed, coverage extended."""

    run_id: str
    provider_thread_id: str


@event("transfer.failed")
class TransferFailed(Payload, kw_only=True):
    """A transfer that cannot be resolved; the run that needed it fails before any provider work."""

    transfer_id: str
    run_id: str | None = None
    error: str


# --- envelope -------------------------------------------------------------------------------------


class _Header(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    type: str
    tenant: str
    thread: str
    at: datetime
    command_id: str
    causation_id: str | None = None
    correlation_id: str | None = None
    actor: str
    schema_version: int = SCHEMA_VERSION
    seq: int | None = None


class Envelope(_Header, kw_only=True):
    data: Any


class _RawEnvelope(_Header, kw_only=True):
    data: msgspec.Raw


_raw_decoder = msgspec.json.Decoder(_RawEnvelope)
_payload_decoders = {name: msgspec.json.Decoder(cls) for name, cls in PAYLOADS.items()}
_encoder = msgspec.json.Encoder()


class UnknownEvent(Payload, kw_only=True):
    """Data of an event type this version does not know (a newer writer); folds as a no-op."""

    raw: dict = {}


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


# --- rollbacks (L10.5, L10.6) ---------------------------------------------------------------------
# Registered after the envelope code above, so their decoders are added to the table here.


@event("rollback.started")
class RollbackStarted(Payload, kw_only=True):
    """A rollback was accepted: new runs wait until it completes or fails. ``kind=thread`` rolls the thread
    back to run ``to_run_ordinal``; ``kind=node`` restores a child node's checkpoint (L10.6)."""

    rollback_id: str
    kind: str
    to_run_ordinal: int | None = None
    node_id: str | None = None
    checkpoint_id: str
    commit: str
    rolled_back_run_ids: list[str] = []
    stale_checkpoint_ids: list[str] = []
    touches_parent_workspace: bool = False
    after_run_id: str | None = None  # carried out once this run (interrupted for it) has ended


@event("rollback.completed")
class RollbackCompleted(Payload, kw_only=True):
    """The files are restored (``files``: what changed). Later runs are ``rolled_back``, later checkpoints
    stale; ``provider_context`` says what became of the provider conversation."""

    rollback_id: str
    undo_ref: str
    undo_commit: str
    files: list[FileChange] = []
    # kept: the provider thread saw none of the rolled-back runs; rolled_back: it dropped their turns
    # natively (``provider_thread_id`` kept, ``provider_turns_dropped``); divergent: it still remembers them,
    # so the next run opens a fresh one (``provider_error``: why a native rollback was not done, if tried).
    provider_context: str = "divergent"
    skipped: list[str] = []
    provider_thread_id: str | None = None
    provider_turns_dropped: int = 0
    provider_error: str | None = None


@event("rollback.provider_requested")
class RollbackProviderRequested(Payload, kw_only=True):
    """The files are restored and provider thread ``provider_thread_id`` is asked (through ``session_id`` on
    ``host_id``) to drop its last ``turns`` turns (L10.5). Recorded before the host is asked: a coordinator
    that dies after this asks that same session again (hosts answer a rollback id once), never another."""

    rollback_id: str
    provider_thread_id: str
    session_id: str
    host_id: str
    turns: int


@event("rollback.failed")
class RollbackFailed(Payload, kw_only=True):
    """The restore could not be done; nothing is marked rolled back (files may be as the error says)."""

    rollback_id: str
    error: str


_payload_decoders.update(
    {name: msgspec.json.Decoder(cls) for name, cls in PAYLOADS.items() if name not in _payload_decoders}
)
