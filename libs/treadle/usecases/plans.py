"""Implementing a proposed plan (L12.3): as a run of its thread, or as a new thread made from its settings."""

from __future__ import annotations

from treadle.api import ImplementBody, Implemented
from treadle.core.errors import Conflict
from treadle.core.plans.commands import ImplementPlan
from treadle.core.plans.decide import implementation_text
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.usecases.ids import owner
from treadle.usecases.ports import Caller, CommandBus, ThreadReads


async def implement(
    who: Caller, commands: CommandBus, reads: ThreadReads, plan_id: str, request: ImplementBody, key: str | None
) -> Implemented:
    thread = await owner(reads, who.tenant, plan_id, "plan", "plan_not_found")
    if request.as_ == "run":  # a queued message of the plan's thread
        accepted = await commands.send(
            tenant=who.tenant,
            user=who.user,
            verb="plan",
            thread=thread,
            body=ImplementPlan(plan_id=plan_id),
            idempotency_key=key,
        )
        return Implemented(plan_id=plan_id, as_="run", thread_id=thread, run_id=accepted.run_id or "")
    state = await reads.view(who.tenant, thread)
    plan = state.plan(plan_id)
    if plan is None or plan.kind != "proposed_plan" or plan.status == "implemented":
        raise Conflict(f"plan {plan_id} is not an open proposed plan", code="plan_not_implementable")
    assert state.thread is not None
    source = state.thread
    # Three commands, each idempotent under a key derived from the client's: a retry redoes none twice.
    key = key or f"implement-{plan_id}"
    created = await commands.send(
        tenant=who.tenant,
        user=who.user,
        verb="create",
        thread=None,
        idempotency_key=f"{key}|create",
        body=CreateThread(
            title=f"Plan from {source.title or source.id}"[:200],
            provider=source.provider,
            model=source.model,
            runtime_mode=source.runtime_mode,
        ),
    )
    sent = await commands.send(
        tenant=who.tenant,
        user=who.user,
        verb="send",
        thread=created.thread_id,
        idempotency_key=f"{key}|send",
        body=SendMessage(text=implementation_text(plan.text)),  # the text the coordinator gives an implementing run
    )
    await commands.send(
        tenant=who.tenant,
        user=who.user,
        verb="plan",
        thread=thread,
        idempotency_key=f"{key}|link",
        body=ImplementPlan(plan_id=plan_id, as_="thread", thread_id=created.thread_id),
    )
    return Implemented(plan_id=plan_id, as_="thread", thread_id=created.thread_id, run_id=sent.run_id or "")
