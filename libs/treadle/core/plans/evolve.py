"""How plans and todo lists fold into a thread, and the run progress they give (L12)."""

from __future__ import annotations

from typing import cast

from treadle.core import activity
from treadle.core.envelope import Envelope
from treadle.core.plans.events import PlanImplemented, PlanUpdated
from treadle.core.plans.model import Plan, PlanKind
from treadle.core.run.model import Progress
from treadle.core.view import Folds, ThreadView


def _plan_updated(state: ThreadView, e: Envelope, d: PlanUpdated) -> None:
    run = state.run(d.run_id)
    for p in state.plans:
        if p.id == d.plan_id:
            p.text = d.text
            p.items = list(d.items)
            break
    else:
        # L12.2: only the root turn's list is the run's; a child's nests under its node and never replaces it.
        root = run is not None and (d.node_id is None or any(a.root_node_id == d.node_id for a in run.attempts))
        p = Plan(
            id=d.plan_id,
            run_id=d.run_id,
            node_id=d.node_id,
            kind=cast(PlanKind, d.kind),  # plan.updated carries only the kinds the supervisor maps
            text=d.text,
            items=list(d.items),
            root=root,
        )
        state.plans.append(p)
    if run is not None and p.root and p.kind == "todo_list":
        run.progress = Progress(done=sum(i.status == "completed" for i in p.items), total=len(p.items))
    activity.record(state, e, "plan.updated", d.run_id, d.node_id, d.kind)


def _plan_implemented(state: ThreadView, e: Envelope, d: PlanImplemented) -> None:
    for p in state.plans:
        if p.id == d.plan_id:
            p.status, p.implemented_by = "implemented", d.by
    activity.record(state, e, "plan.implemented", d.run_id, None, f"as {d.as_}: {d.by}")


FOLDS: Folds = {PlanUpdated: _plan_updated, PlanImplemented: _plan_implemented}
