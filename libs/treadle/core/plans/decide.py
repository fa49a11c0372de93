"""L12.3: implementing a proposed plan as a new run of its thread, or as a new thread."""

from __future__ import annotations

from collections.abc import Callable

from treadle.core.commands import Accepted, Command
from treadle.core.envelope import Payload
from treadle.core.errors import BadRequest, Conflict, NotFound, check
from treadle.core.plans.commands import ImplementPlan
from treadle.core.plans.events import PlanImplemented
from treadle.core.plans.model import Plan
from treadle.core.thread.commands import SendMessage
from treadle.core.view import ThreadView


def implementation_text(plan_text: str) -> str:
    """The message an implementing run gets (the coordinator's and the gateway's new-thread path alike)."""
    return f"Implement this plan:\n\n{plan_text}"


def implementable(state: ThreadView, plan_id: str) -> Plan:
    for plan in state.plans:
        if plan.id == plan_id:
            check(
                plan.kind == "proposed_plan",
                Conflict,
                "only a proposed plan can be implemented",
                code="plan_not_implementable",
            )
            check(
                plan.status != "implemented",
                Conflict,
                f"plan {plan_id} is implemented by {plan.implemented_by}",
                code="plan_implemented",
                details={"by": plan.implemented_by},
            )
            return plan
    raise NotFound(f"plan {plan_id} not found", code="plan_not_found")


def implement(
    state: ThreadView,
    command: Command,
    body: ImplementPlan,
    send: Callable[[ThreadView, Command, SendMessage], tuple[list[Payload], Accepted]],
) -> tuple[list[Payload], Accepted | None]:
    """As a run: the plan's text becomes a queued message of this thread (``send`` decides it like any
    message). As a thread: the gateway made the thread; this records the link."""
    check(body.as_ in ("run", "thread"), BadRequest, "as must be run or thread", code="invalid_as")
    if body.as_ == "run" and state.message_for_command(command.id) is not None:
        return send(state, command, SendMessage(text="", mode="queue_after_active"))  # a retry: its receipt
    plan = implementable(state, body.plan_id)
    if body.as_ == "thread":
        check(body.thread_id is not None, BadRequest, "thread_id missing", code="invalid_target")
        return [PlanImplemented(plan_id=plan.id, run_id=plan.run_id, by=body.thread_id or "", as_="thread")], None
    message = SendMessage(text=implementation_text(plan.text), mode="queue_after_active")
    events, receipt = send(state, command, message)
    return events + [PlanImplemented(plan_id=plan.id, run_id=plan.run_id, by=receipt.run_id or "", as_="run")], receipt
