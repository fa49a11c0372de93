"""Commands on a thread, its messages and its queue."""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.core.thread.events import DEFAULT_PROVIDER


class CreateThread(msgspec.Struct, kw_only=True, tag="thread.create", forbid_unknown_fields=True):
    title: str = ""
    provider: str = DEFAULT_PROVIDER
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
    script: dict[str, Any] | None = None
    clean_context: bool = False  # L5.4: a fresh provider thread with a full summary
    merge_back_from: str | None = None  # L7.1: bring a fork's results home with this message


class ReorderQueue(msgspec.Struct, kw_only=True, tag="queue.reorder", forbid_unknown_fields=True):
    order: list[str]


class EditQueued(msgspec.Struct, kw_only=True, tag="queue.edit", forbid_unknown_fields=True):
    run_id: str
    text: str
    script: dict[str, Any] | None = None


class CancelQueued(msgspec.Struct, kw_only=True, tag="queue.cancel", forbid_unknown_fields=True):
    run_id: str
