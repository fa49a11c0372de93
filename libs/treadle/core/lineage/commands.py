"""Forking a thread."""

from __future__ import annotations

from typing import Literal

import msgspec


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
