"""Commands on a run."""

from __future__ import annotations

import msgspec

from treadle.api.limits import Id


class InterruptRun(msgspec.Struct, kw_only=True, tag="run.interrupt", forbid_unknown_fields=True):
    """L8: interrupt a run (or one of its nodes). ``allow_destructive``: without native interrupt, stop the
    provider session (L8.3); when false, such a provider answers ``interrupt_unsupported`` instead."""

    run_id: Id | None = None
    node_id: Id | None = None
    allow_destructive: bool = True
