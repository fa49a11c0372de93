"""Commands: what clients ask of a thread. Each carries its id (the client's idempotency key)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from .ids import IdFactory


class CreateThread(msgspec.Struct, kw_only=True, tag="thread.create", forbid_unknown_fields=True):
    title: str = ""
    provider: str = "scripted"
    model: str | None = None
    runtime_mode: str = "approval_required"
    workspace: str | None = None
    thread_id: str | None = None  # set by the coordinator from the command id


class SendMessage(msgspec.Struct, kw_only=True, tag="thread.send", forbid_unknown_fields=True):
    text: str
    mode: str = "auto"
    target_run_id: str | None = None
    provider: str | None = None
    model: str | None = None  # L5.4: this run's model (None: the thread's); another model is another provider thread
    script: dict | None = None
    clean_context: bool = False  # L5.4: a fresh provider thread with a full summary
    merge_back_from: str | None = None  # L7.1: bring a fork's results home with this message


class InterruptRun(msgspec.Struct, kw_only=True, tag="run.interrupt", forbid_unknown_fields=True):
    """L8: interrupt a run (or one of its nodes). ``allow_destructive``: without native interrupt, stop the
    provider session (L8.3); when false, such a provider answers ``interrupt_unsupported`` instead."""

    run_id: str | None = None
    node_id: str | None = None
    allow_destructive: bool = True


class RespondRequest(msgspec.Struct, kw_only=True, tag="request.respond", forbid_unknown_fields=True):
    request_id: str
    decision: str | None = None  # accept | accept_for_session | decline | cancel (approvals)
    answers: dict[str, str] | None = None  # questions (L11.4)
    message: str | None = None


class ReorderQueue(msgspec.Struct, kw_only=True, tag="queue.reorder", forbid_unknown_fields=True):
    order: list[str]


class EditQueued(msgspec.Struct, kw_only=True, tag="queue.edit", forbid_unknown_fields=True):
    run_id: str
    text: str
    script: dict | None = None


class CancelQueued(msgspec.Struct, kw_only=True, tag="queue.cancel", forbid_unknown_fields=True):
    run_id: str


class ImplementPlan(msgspec.Struct, kw_only=True, tag="plan.implement", forbid_unknown_fields=True):
    """L12.3 as a run of this thread (the run is queued here) or the record of a new thread implementing it."""

    plan_id: str
    as_: str = msgspec.field(name="as", default="run")
    thread_id: str | None = None  # with as=thread: the thread the gateway created for it


class ForkSource(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """L6.3: a run, a node (root turn or completed subagent) or a provider thread (optionally at a turn)."""

    type: Literal["run", "node", "provider_thread"]
    id: str
    turn: str | None = None  # provider_thread only: the native turn ref to fork after


class ForkThread(msgspec.Struct, kw_only=True, tag="thread.fork", forbid_unknown_fields=True):
    """L6.1, sent to the source thread: a new thread with lineage and a pending context transfer."""

    source: ForkSource
    title: str = ""
    on_active: Literal["latest_checkpoint", "refuse"] = "latest_checkpoint"
    thread_id: str | None = None  # set by the coordinator from the command id


class Command(msgspec.Struct, kw_only=True):
    """The envelope the gateway sends on ``treadle.cmd.<tenant>.thread.<verb>``."""

    id: str
    tenant: str
    user: str
    thread: str | None = None
    issued_at: datetime
    body: Body


class Accepted(msgspec.Struct, kw_only=True, omit_defaults=True, tag="accepted"):
    seq: int
    thread_id: str
    message_id: str | None = None
    run_id: str | None = None
    disposition: str | None = None
    duplicate: bool = False
    rollback_id: str | None = None


class Rejected(msgspec.Struct, kw_only=True, omit_defaults=True, tag="rejected"):
    code: str
    message: str
    status: int = 400
    details: dict = {}


Reply = Accepted | Rejected


class Ctx(msgspec.Struct, kw_only=True):
    """Everything non-deterministic a decision may use: time and ids come from here only."""

    now: datetime
    ids: IdFactory
    actor: str

    @classmethod
    def for_command(cls, command: Command) -> Ctx:
        ms = int(command.issued_at.timestamp() * 1000)
        return cls(now=command.issued_at, ids=IdFactory(command.id, ms), actor=f"user:{command.user}")


def thread_id_for(command_id: str, issued_at: datetime) -> str:
    """The id of the thread a create command makes: derived, so a retried create names the same thread."""
    return IdFactory(f"{command_id}|thread", int(issued_at.timestamp() * 1000)).next("thr")


def reaction_ctx(seed: str, now: datetime, actor: str) -> Ctx:
    """The context of a worker's reaction to an event: ids seeded by what triggered it."""
    return Ctx(now=now, ids=IdFactory(seed, int(now.timestamp() * 1000)), actor=actor)


# --- rollbacks (L10.5, L10.6) ---------------------------------------------------------------------


class RollbackThread(msgspec.Struct, kw_only=True, tag="thread.rollback", forbid_unknown_fields=True):
    to_run_ordinal: int
    interrupt_active: bool = False


class RollbackNode(msgspec.Struct, kw_only=True, tag="node.rollback", forbid_unknown_fields=True):
    node_id: str
    checkpoint_id: str


# `Command.body` is resolved when its decoder is first built, so widening the union here reaches it.
Body = (
    CreateThread
    | SendMessage
    | InterruptRun
    | RespondRequest
    | ReorderQueue
    | EditQueued
    | CancelQueued
    | ImplementPlan
    | RollbackThread
    | RollbackNode
    | ForkThread
)
