"""Events of plans and todo lists."""

from __future__ import annotations

import msgspec

from treadle.core.envelope import Payload, event
from treadle.core.plans.model import TodoItem


@event("plan.implemented", local=True, other_runs=True, provider_threads=True)
class PlanImplemented(Payload, kw_only=True):
    plan_id: str
    run_id: str
    by: str  # the run or thread implementing it (L12.3)
    as_: str = msgspec.field(name="as")


@event("plan.updated", local=True, other_runs=False, provider_threads=False, indexes=("plan_id",))
class PlanUpdated(Payload, kw_only=True):
    plan_id: str
    run_id: str
    node_id: str | None = None
    kind: str
    text: str = ""
    items: list[TodoItem] = []
