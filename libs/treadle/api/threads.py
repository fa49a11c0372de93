"""Creating a thread: ``POST /v1/threads``."""

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
