"""Implementing a plan."""

from __future__ import annotations

import msgspec

from treadle.api.limits import Id


class ImplementPlan(msgspec.Struct, kw_only=True, tag="plan.implement", forbid_unknown_fields=True):
    """L12.3 as a run of this thread (the run is queued here) or the record of a new thread implementing it."""

    plan_id: Id
    as_: Id = msgspec.field(name="as", default="run")
    thread_id: Id | None = None  # with as=thread: the thread the gateway created for it
