"""Sending a message: ``POST /v1/threads/{thread_id}/messages`` and ``thread_send``."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from treadle.api.constraints import coded
from treadle.api.limits import Id, Model, Provider, Text
from treadle.api.modes import DispatchMode

SendMode = Annotated[DispatchMode, coded("invalid_mode")]


class SendMessageRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    text: Text
    mode: SendMode = "auto"
    target_run_id: Id | None = None
    provider: Provider | None = None
    model: Model | None = None  # L5.4: this run's model; a provider thread started under another is not resumed
    script: dict[str, Any] | None = None  # at most core.limits.MAX_SCRIPT_BYTES as JSON
    clean_context: bool = False  # L5.4: start a fresh provider thread with a full summary
    merge_back_from: Id | None = None  # L7: a fork of this thread whose results this message brings home


class MessageAccepted(msgspec.Struct, kw_only=True):
    thread_id: str
    message_id: str
    run_id: str
    disposition: str
    seq: int
