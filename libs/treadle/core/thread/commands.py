"""Commands on a thread, its messages and its queue."""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.api.limits import Id, Model, ModeName, Provider, QueueOrder, RuntimeModeName, Text, Title, Workspace
from treadle.core.thread.events import DEFAULT_PROVIDER


class CreateThread(msgspec.Struct, kw_only=True, tag="thread.create", forbid_unknown_fields=True):
    title: Title = ""
    provider: Provider = DEFAULT_PROVIDER
    model: Model | None = None
    runtime_mode: RuntimeModeName = "approval_required"
    workspace: Workspace | None = None
    thread_id: Id | None = None  # set by the coordinator from the command id


class SendMessage(msgspec.Struct, kw_only=True, tag="thread.send", forbid_unknown_fields=True):
    text: Text
    mode: ModeName = "auto"
    target_run_id: Id | None = None
    provider: Provider | None = None
    model: Model | None = None  # L5.4: this run's model (None: the thread's); another model is another provider thread
    script: dict[str, Any] | None = None
    clean_context: bool = False  # L5.4: a fresh provider thread with a full summary
    merge_back_from: Id | None = None  # L7.1: bring a fork's results home with this message


class ReorderQueue(msgspec.Struct, kw_only=True, tag="queue.reorder", forbid_unknown_fields=True):
    order: QueueOrder


class EditQueued(msgspec.Struct, kw_only=True, tag="queue.edit", forbid_unknown_fields=True):
    run_id: Id
    text: Text
    script: dict[str, Any] | None = None


class CancelQueued(msgspec.Struct, kw_only=True, tag="queue.cancel", forbid_unknown_fields=True):
    run_id: Id


class UpdateThread(msgspec.Struct, kw_only=True, tag="thread.update", forbid_unknown_fields=True):
    """Rename and/or archive (True) or unarchive (False) the thread; None leaves that field as it is."""

    title: Title | None = None
    archived: bool | None = None


class DeleteThread(msgspec.Struct, kw_only=True, tag="thread.delete", forbid_unknown_fields=True):
    """Erase the thread's data. Repeated on a deleted thread it answers again and the erasure resumes."""
