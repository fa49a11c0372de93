"""Commands: what clients ask of a thread, in the envelope the gateway sends, and the replies.

Each concept declares its commands in its own ``commands`` module; ``Body`` is their union."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from treadle.core.lineage.commands import DelegateTask, ForkSource, ForkThread
from treadle.core.plans.commands import ImplementPlan
from treadle.core.requests.commands import RespondRequest
from treadle.core.rollback.commands import RollbackNode, RollbackThread
from treadle.core.run.commands import InterruptRun
from treadle.core.thread.commands import (
    CancelQueued,
    CreateThread,
    DeleteThread,
    EditQueued,
    ReorderQueue,
    SendMessage,
    UpdateThread,
)

__all__ = [
    "Accepted",
    "Body",
    "CancelQueued",
    "Command",
    "CreateThread",
    "DelegateTask",
    "DeleteThread",
    "EditQueued",
    "ForkSource",
    "ForkThread",
    "ImplementPlan",
    "InterruptRun",
    "Rejected",
    "ReorderQueue",
    "Reply",
    "RespondRequest",
    "RollbackNode",
    "RollbackThread",
    "SendMessage",
    "UpdateThread",
]


class Command(msgspec.Struct, kw_only=True):
    """The envelope the gateway sends on ``treadle.cmd.<tenant>.thread.<verb>``."""

    id: str
    tenant: str
    user: str
    thread: str | None = None
    issued_at: datetime
    body: Body
    # The tenant policy's revision the sender knew (at least its own PUT's): the coordinator decides on a policy
    # no older, so a change applies at once to commands sent through the replica that took it.
    policy_revision: int = 0


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
    details: dict[str, Any] = {}


Reply = Accepted | Rejected


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
    | DelegateTask
    | UpdateThread
    | DeleteThread
)
