"""The thread and its messages; the dispatch and runtime modes."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from treadle.api.modes import DispatchMode as DispatchMode
from treadle.api.modes import RuntimeMode as RuntimeMode
from treadle.core.entity import Entity
from treadle.core.thread.events import DEFAULT_PROVIDER

MessageStatus = Literal["streaming", "completed", "incomplete"]


class Move(Entity, kw_only=True):
    """A change of the thread's home volume (``thread.moved``)."""

    from_volume: str
    to_volume: str
    reason: str
    checkpoint_id: str | None = None
    at: datetime


class Thread(Entity, kw_only=True):
    id: str
    tenant: str
    title: str = ""
    provider: str = DEFAULT_PROVIDER
    model: str | None = None
    runtime_mode: RuntimeMode = "approval_required"
    workspace: str
    created_by: str
    created_at: datetime
    command_id: str
    parent_thread_id: str | None = None
    volume: str = "local"  # its home: the workspace volume every workspace and session request goes to
    moves: list[Move] = []  # how it got there, oldest first
    archived: bool = False  # out of the default list, refuses new messages (thread.archived)
    deleted: bool = False  # tombstoned: every command but a delete finds no thread (thread.deleted)
    erase_provider_threads: list[str] = []  # a deleted thread's provider threads, whose native state goes too


class Message(Entity, kw_only=True):
    id: str
    role: Literal["user", "assistant", "system"]
    text: str = ""
    status: MessageStatus = "completed"
    run_id: str | None = None
    attempt_id: str | None = None
    node_id: str | None = None
    author: str | None = None
    created_at: datetime
    command_id: str | None = None
    # A steering message (L3.2/L3.3): "native" or "restart" as asked; undelivered until the provider has it.
    steering: Literal["native", "restart"] | None = None
    delivered: bool = True
    script: dict[str, Any] | None = None  # a steering message's script for the scripted provider
