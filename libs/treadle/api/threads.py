"""Creating a thread (``POST /v1/threads``), renaming or archiving it (``PATCH``) and deleting it (``DELETE``)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from treadle.api.constraints import coded
from treadle.api.limits import Model, Provider, Title, Workspace
from treadle.api.modes import RuntimeMode

RuntimeModeChoice = Annotated[RuntimeMode, coded("invalid_runtime_mode")]


class CreateThreadRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    title: Title = ""
    provider: Provider = "scripted"
    model: Model | None = None
    runtime_mode: RuntimeModeChoice = "approval_required"
    workspace: Workspace | None = None


class ThreadCreated(msgspec.Struct, kw_only=True):
    thread_id: str
    seq: int


class UpdateThreadRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """At least one field; a field left out (or null) stays as it is."""

    title: Title | None = None
    archived: bool | None = None


class ThreadUpdated(msgspec.Struct, kw_only=True):
    thread_id: str
    seq: int  # read with min_seq=seq to see the change
    changed: bool  # False: the thread already was so (nothing appended)


class ThreadDeleted(msgspec.Struct, kw_only=True):
    """The thread's tombstone is in the log and its data erased (a repeated delete answers the same)."""

    thread_id: str
    seq: int
