"""Interrupting a run, and the acknowledgement every command on a thread answers with."""

from __future__ import annotations

import msgspec


class InterruptRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    allow_destructive: bool = True  # without native interrupt, stop the provider session (L8.3)


class Acknowledged(msgspec.Struct, kw_only=True):
    """An acknowledgement, not the outcome (L8.2): the run's status says when it actually ended."""

    thread_id: str
    run_id: str | None
    disposition: str
    seq: int
