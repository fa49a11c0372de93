"""Issue 21, part 3: what a delegated task may be and what it reports. A child's runtime and interaction modes
may only narrow its parent's; a tenant's delegations are bounded in depth, children per run and children
running at once; a task's key is derived from the parent run and the caller's request id, so a retried
``delegate_task`` names the same child; the result transfer's summary is the child's last assistant text,
else its status. The coordinator carries these out (``services/treadle/coordinator/delegations.py``): the
child's thread and first run, the parent's app-owned node, and — driven by the child's run-ended event — the
node finalised with its result transfer, once."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

import msgspec

from treadle.core.commands import Command, CreateThread, SendMessage
from treadle.core.ctx import Ctx, thread_id_for
from treadle.core.envelope import Payload
from treadle.core.errors import BadRequest, Conflict, Forbidden, QuotaExceeded, check
from treadle.core.ids import IdFactory
from treadle.core.lineage.commands import DelegateTask
from treadle.core.lineage.events import DelegationEnded, DelegationFinished, DelegationStarted, ThreadDelegated
from treadle.core.providers.catalogue import Catalogue
from treadle.core.run.model import ExecutionNode, Run
from treadle.core.state import ThreadState
from treadle.core.thread.decide import create_thread
from treadle.core.thread.model import RuntimeMode
from treadle.core.view import ThreadView

MODES: tuple[str, ...] = get_args(RuntimeMode)  # least to most permissive
INTERACTION_MODES = ("plan", "default")  # least to most permissive: plan proposes, default acts
SUMMARY_CHARS = 4000
ACTIVE = ("starting", "running", "waiting")  # a parent run that may delegate: its turn is under way
NODE_STATUS = {"completed": "completed", "failed": "failed", "interrupted": "interrupted", "rolled_back": "cancelled"}


class DelegationBounds(msgspec.Struct, kw_only=True, frozen=True):
    max_depth: int = 3  # a child's child's child, no further
    max_children_per_run: int = 10
    max_running_children: int = 5  # of the tenant, at once


def narrowed_mode(parent: str, child: str | None) -> str:
    """The child's runtime mode: the parent's when not asked, else the one asked if it is no wider."""
    check(parent in MODES, BadRequest, f"unknown runtime mode {parent!r}", code="invalid_runtime_mode")
    if child is None:
        return parent
    check(child in MODES, BadRequest, f"unknown runtime mode {child!r}", code="invalid_runtime_mode")
    if MODES.index(child) > MODES.index(parent):
        raise Forbidden(
            f"a delegated task may not run in {child}: its parent runs in {parent}",
            code="mode_not_allowed",  # the tools report it as kind mode_escalation_denied
            details={"parent_mode": parent, "runtime_mode": child},
        )
    return child


def narrowed_interaction(parent: str, child: str | None) -> str:
    """The child's interaction mode: a planning parent's child plans too."""
    check(
        child is None or child in INTERACTION_MODES,
        BadRequest,
        f"interaction_mode must be one of {', '.join(INTERACTION_MODES)}",
        code="invalid_interaction_mode",
    )
    if child is None:
        return parent
    if INTERACTION_MODES.index(child) > INTERACTION_MODES.index(parent):
        raise Forbidden(
            f"a delegated task may not run in {child} mode: its parent runs in {parent} mode",
            code="mode_not_allowed",
            details={"parent_interaction_mode": parent, "interaction_mode": child},
        )
    return child


def interaction_of(run: Run) -> str:
    """A run plans when its turn options say so (Codex's ``collaboration_mode``); every other run acts."""
    return "plan" if (run.script or {}).get("collaboration_mode") == "plan" else "default"


def check_bounds(bounds: DelegationBounds, *, depth: int, children_of_run: int, running_children: int) -> None:
    """``depth``: the new child's (the parent's depth + 1); the counts: before the new child."""
    for quota, limit, current in (
        ("delegation_depth", bounds.max_depth, depth),
        ("children_per_run", bounds.max_children_per_run, children_of_run + 1),
        ("running_children", bounds.max_running_children, running_children + 1),
    ):
        if current > limit:
            raise QuotaExceeded(
                f"{quota} is at most {limit}", details={"quota": quota, "limit": limit, "current": current - 1}
            )


def task_key(tenant: str, parent_run_id: str, client_request_id: str) -> str:
    """The idempotency key of a delegation: the same (parent run, request id) is the same child."""
    digest = hashlib.sha256(f"{tenant}|{parent_run_id}|{client_request_id}".encode()).hexdigest()[:40]
    return f"delegate:{digest}"


def result_summary(assistant_texts: Sequence[str], status: str) -> str:
    """What the parent's result transfer says: the child's last non-empty assistant text, else its status."""
    last = next((t.strip() for t in reversed(assistant_texts) if t.strip()), "")
    return last[:SUMMARY_CHARS] if last else f"the delegated task ended {status}"


def depth_of(state: ThreadView) -> int:
    """How deep a thread is in its delegation tree: 0 for a thread no task made."""
    lineage = state.lineage
    if lineage is None or lineage.relationship != "subagent" or lineage.delegation is None:
        return 0
    return int(lineage.delegation.get("depth", 1))


def children_of(run: Run) -> int:
    return sum(1 for n in run.nodes if n.owner == "app")


def node_of(state: ThreadView, child_thread_id: str) -> ExecutionNode | None:
    """The app-owned node standing for a child thread, in whichever run delegated it."""
    for run in state.runs:
        for node in run.nodes:
            if node.owner == "app" and node.child_thread_id == child_thread_id:
                return node
    return None


def parent_run(state: ThreadView, run_id: str) -> Run:
    """The run a task is delegated from: it must be the thread's active run (its turn is the one asking)."""
    run = state.run(run_id)
    if run is None or run.id != state.active_run_id or run.status not in ACTIVE:
        raise Conflict(
            f"run {run_id} is not active: a task is delegated from a run under way",
            code="parent_not_active",
            details={"run_id": run_id, "status": run.status if run else None},
        )
    return run


def task_text(task: str, role: str) -> str:
    """The child's first message: its role instruction and its task, nothing of the parent's history."""
    return f"{role.strip()}\n\n{task}" if role.strip() else task


def child_thread_id(command: Command) -> str:
    """The child's id, derived from the command: a retried delegation names the same thread."""
    return thread_id_for(f"{command.id}|delegate", command.issued_at)


@dataclass
class Plan:
    """A delegation decided on its parent: the child's creation and first message, the parent's node."""

    child_id: str
    node_id: str
    run: Run
    create: list[Payload]  # the child's thread.created + thread.delegated
    first_message: SendMessage
    input: dict[str, object]
    title: str


def plan(
    state: ThreadView,
    command: Command,
    bounds: DelegationBounds,
    running_children: int,
    providers: Catalogue,
    *,
    admitted: bool = False,
) -> Plan:
    """Everything checked on the parent: its active run, the narrowed modes, the bounds. ``admitted``: this
    command's child exists already (an earlier try made it, then lost its append to the parent): the delegation
    is a fact, so neither the run having ended since nor a bound reached since refuses its record."""
    body = command.body
    assert isinstance(body, DelegateTask) and state.thread is not None
    check(bool(body.task.strip()), BadRequest, "task must not be empty", code="empty_text")
    run = state.run(body.parent_run_id) if admitted else None
    run = run or parent_run(state, body.parent_run_id)
    runtime_mode = narrowed_mode(state.thread.runtime_mode, body.runtime_mode)
    interaction = narrowed_interaction(interaction_of(run), body.interaction_mode)
    depth = depth_of(state) + 1
    if not admitted:
        check_bounds(bounds, depth=depth, children_of_run=children_of(run), running_children=running_children)
    child_id = child_thread_id(command)
    node_id = Ctx.for_command(command).ids.next("node")
    title = body.title or body.task.strip().splitlines()[0][:80]
    root = (state.lineage.root_thread_id if state.lineage else None) or state.thread.id
    script = body.script
    if interaction == "plan" and (planning := providers.plan_options(body.provider)):
        script = {**(script or {}), **planning}
    if script is not None:  # refused before the child exists, not by its first message after
        try:
            providers.check_turn_options(body.provider, script)
        except ValueError as exc:
            raise BadRequest(str(exc), code="invalid_script") from None
    created = CreateThread(
        title=title, provider=body.provider, model=body.model, runtime_mode=runtime_mode, thread_id=child_id
    )
    # The child lives on its parent's home: a subagent works in a scope the parent's volume holds. Until
    # checkpoints are durable off the volume, nothing could bring its results back from another one.
    ctx = msgspec.structs.replace(Ctx.for_command(command, providers), home=state.thread.volume)
    events, _ = create_thread(ThreadState(), command, created, ctx)  # the child's own checks
    delegated = ThreadDelegated(
        parent_thread_id=state.thread.id,
        root_thread_id=root,
        parent_run_id=run.id,
        parent_node_id=node_id,
        depth=depth,
        mode=body.mode,
        role=body.role,
    )
    return Plan(
        child_id=child_id,
        node_id=node_id,
        run=run,
        create=[*events, delegated],
        first_message=SendMessage(
            text=task_text(body.task, body.role), provider=body.provider, model=body.model, script=script
        ),
        input={
            "task": body.task[:SUMMARY_CHARS],
            "role": body.role[:SUMMARY_CHARS],
            "provider": body.provider,
            "model": body.model,
            "runtime_mode": runtime_mode,
            "interaction_mode": interaction,
            "mode": body.mode,
            "depth": depth,
        },
        title=title,
    )


def started(plan: Plan, child_run_id: str) -> DelegationStarted:
    return DelegationStarted(
        run_id=plan.run.id,
        attempt_id=plan.run.attempt.id,
        node_id=plan.node_id,
        child_thread_id=plan.child_id,
        child_run_id=child_run_id,
        title=plan.title,
        input=plan.input,
    )


def task_run(child: ThreadView) -> Run | None:
    """A delegated thread's task: its first run (later messages to it are ordinary runs)."""
    if child.lineage is None or child.lineage.relationship != "subagent" or not child.runs:
        return None
    return child.runs[0]


def finish(parent: ThreadView, child: ThreadView, run: Run) -> list[Payload]:
    """The parent's record of the child's ended task — nothing when it is recorded already (idempotent)."""
    assert child.thread is not None and child.lineage is not None and child.lineage.delegation is not None
    transfer_id = IdFactory(f"delegation|{child.thread.id}|{run.id}", int(run.queued_at.timestamp() * 1000)).next(
        "xfer"
    )
    if parent.transfer(transfer_id) is not None:
        return []
    texts = [m.text for m in child.messages if m.role == "assistant" and m.run_id == run.id]
    status = NODE_STATUS.get(run.status, run.status)
    return [
        DelegationFinished(
            run_id=child.lineage.delegation["parent_run_id"],
            node_id=child.lineage.delegation["parent_node_id"],
            child_thread_id=child.thread.id,
            child_run_id=run.id,
            transfer_id=transfer_id,
            status=status,
            summary=result_summary(texts, run.status),
        )
    ]


def ended(child: ThreadView, run: Run) -> list[Payload]:
    """The child's own mark that its task is reported (it stops counting as a running child) — once."""
    delegation = child.lineage.delegation if child.lineage else None
    if delegation is None or "ended" in delegation:
        return []
    return [DelegationEnded(child_run_id=run.id, status=run.status)]


def cascade_targets(run: Run) -> list[str]:
    """The child threads an interrupted run's interrupt reaches: its async tasks still running."""
    return [
        n.child_thread_id
        for n in run.nodes
        if n.owner == "app" and n.child_thread_id and n.status == "running" and (n.input or {}).get("mode") == "async"
    ]
