"""L6.1/L6.5: forking a thread as pure steps around its effects.

A fork is sent to its source thread and makes a second one. ``prepare`` decides the fork on the source alone
(its stable source point, the child's events, the source's record of its child), or finds it recorded
already. The worker then reads the child thread (a retried fork may have made it) and ``decide`` says what
must happen: the child's workspace materialised from the source point's checkpoint
(``MaterializeWorkspace``), then the child's ``thread.created`` + ``thread.forked`` appended to the child's
log, fenced on the tenant's thread creations when counted (``CreateChild``). Once they are done (or were done
by an earlier try of the same command), ``settle`` returns the source's events — or ``thread_exists`` when
another command owns that thread id."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from treadle.core import events as ev
from treadle.core.commands import Accepted, Command, ForkThread
from treadle.core.ctx import Ctx, thread_id_for
from treadle.core.errors import Conflict
from treadle.core.lineage import decide as lineage
from treadle.core.view import ThreadView


def fork_thread_id(command: Command) -> str:
    """The fork's id, derived from the command: a retried fork names the same thread."""
    return thread_id_for(f"{command.id}|fork", command.issued_at)


class MaterializeWorkspace(msgspec.Struct, frozen=True, kw_only=True):
    """Effect: give the fork ``thread`` its own ``workspace`` with the files of ``commit`` of the source's."""

    tenant: str
    source_thread: str
    source_workspace: str
    commit: str
    thread: str
    workspace: str


class CreateChild(msgspec.Struct, frozen=True, kw_only=True):
    """Effect: append ``events`` to the child thread's (empty) log, fenced on ``fence`` when given. Its envelope
    ids come from ``seed`` (not from the command's factory: equal ids would be dropped by the broker's
    de-duplication)."""

    tenant: str
    thread: str
    events: list[ev.Payload]
    command_id: str
    seed: str
    at: datetime
    actor: str
    fence: tuple[str, int] | None = None


Effect = MaterializeWorkspace | CreateChild


@dataclass
class Fork:
    """The fork decided on its source: ``receipt.duplicate`` when the source records this child already."""

    plan: lineage.ForkPlan
    receipt: Accepted
    command_id: str


@dataclass
class Decision:
    effects: list[Effect] = field(default_factory=list)


def prepare(state: ThreadView, command: Command) -> Fork:
    """L6.1/L6.3: the fork on its source thread; raises ``unstable_source``/``source_not_found``."""
    body = command.body
    assert isinstance(body, ForkThread) and state.thread is not None
    body = msgspec.structs.replace(body, thread_id=body.thread_id or fork_thread_id(command))
    plan = lineage.fork(state, command, body, Ctx.for_command(command))
    receipt = Accepted(seq=state.seq, thread_id=plan.child_id, disposition="forked")
    if state.lineage is not None and any(c["thread_id"] == plan.child_id for c in state.lineage.children):
        receipt.duplicate = True
    return Fork(plan=plan, receipt=receipt, command_id=command.id)


def decide(
    state: ThreadView, command: Command, fork: Fork, child: ThreadView, fence: tuple[str, int] | None = None
) -> Decision:
    """L6.5: what must happen before the source records its child, given the child thread as it is now (no
    effect when an earlier try made it; ``settle`` checks it is this command's)."""
    assert state.thread is not None
    if child.thread is not None:
        return Decision()
    created = fork.plan.child_events[0]
    assert isinstance(created, ev.ThreadCreated)
    return Decision(
        effects=[
            MaterializeWorkspace(
                tenant=command.tenant,
                source_thread=state.thread.id,
                source_workspace=state.thread.workspace,
                commit=fork.plan.point["commit"],
                thread=fork.plan.child_id,
                workspace=created.workspace,
            ),
            CreateChild(
                tenant=command.tenant,
                thread=fork.plan.child_id,
                events=list(fork.plan.child_events),
                command_id=command.id,
                seed=f"{command.id}|fork-child",
                at=command.issued_at,
                actor=f"user:{command.user}",
                fence=fence,
            ),
        ]
    )


def workspace_unavailable(reason: str, message: str) -> Conflict:
    """The refusal when ``MaterializeWorkspace`` failed (``reason``: the checkpoint service's failure code)."""
    return Conflict(
        f"the fork's workspace could not be made from the checkpoint: {message}",
        code="workspace_unavailable",
        details={"reason": reason},
    )


def settle(fork: Fork, child: ThreadView) -> list[ev.Payload]:
    """The source's events once the child exists; ``thread_exists`` when it is not this command's thread."""
    if child.thread is None or child.thread.command_id != fork.command_id:
        raise Conflict(f"thread {fork.plan.child_id} exists already", code="thread_exists")
    return list(fork.plan.parent_events)
