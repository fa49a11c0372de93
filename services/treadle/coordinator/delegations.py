"""Delegated tasks (issue 21), decided by ``treadle.core.delegation`` and carried out here across two threads.

``delegate`` runs as the decider of a ``DelegateTask`` sent to the parent: the child thread (created, with
lineage ``subagent``) and its first run are appended to the child's log first, each idempotently, then the
parent's app-owned node is the command's own event — so a retried command finds what an earlier try made.
``on_run_ended`` is driven by the run-ended events of the durable consumer, never by a waiting tool call: a
child's ended task finalises the parent's node with its result transfer (once: the parent's record is read
first and the append is fenced), then marks the child reported; an interrupted parent interrupts its async
tasks when the tenant's setting says so. A worker killed anywhere in between is redelivered the event."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import msgspec

from treadle.core import delegation
from treadle.core.commands import Accepted, Command, Reply
from treadle.core.ctx import reaction_ctx
from treadle.core.errors import Conflict
from treadle.core.events import Payload
from treadle.core.lineage.commands import DelegateTask
from treadle.core.policy import TenantPolicy, check_mode
from treadle.core.run.commands import InterruptRun
from treadle.core.run.events import RunEnded, RunInterrupted
from treadle.core.run.model import Run
from treadle.core.state import ThreadState
from treadle.core.thread.decide import send_message
from treadle.core.thread.events import ThreadCreated
from treadle.eventlog.errors import Conflict as AppendConflict
from treadle.eventlog.store import ThreadStore
from treadle.ports import CheckpointStore
from treadle.providers.registry import CATALOGUE
from treadle.runtime.settings import CoordinatorSettings

from .admission import Admission

log = logging.getLogger(__name__)
MAX_TRIES = 8
ACTOR = "coordinator"


class Delegations:
    def __init__(
        self,
        store: ThreadStore,
        checkpoints: CheckpointStore,
        admission: Admission,
        own: CoordinatorSettings,
        decide: Callable[[Command], Awaitable[Reply]],
    ) -> None:
        self._store, self._checkpoints, self._admission = store, checkpoints, admission
        self._own, self._decide = own, decide

    def bounds(self, policy: TenantPolicy) -> delegation.DelegationBounds:
        return delegation.DelegationBounds(
            max_depth=policy.max_delegation_depth or self._own.delegation_max_depth,
            max_children_per_run=policy.max_children_per_run or self._own.delegation_max_children_per_run,
            max_running_children=policy.max_running_children or self._own.delegation_max_running_children,
        )

    async def running_children(self, tenant: str) -> int:
        """The tenant's delegated tasks not yet reported to their parents, as the log has them."""
        made, ended = await asyncio.gather(
            self._admission.threads_with(tenant, "thread.delegated"),
            self._admission.threads_with(tenant, "delegation.ended"),
        )
        return max(0, made - ended)

    async def delegate(
        self, state: ThreadState, command: Command, fence: tuple[str, int] | None
    ) -> tuple[list[Payload], Accepted]:
        body = command.body
        assert isinstance(body, DelegateTask) and state.thread is not None
        child_id = delegation.child_thread_id(command)
        node = delegation.node_of(state, child_id)
        if node is not None:  # a retry of a delegation recorded already
            run_id = (node.input or {}).get("child_run_id")
            return [], Accepted(
                seq=state.seq, thread_id=child_id, run_id=run_id, disposition="delegated", duplicate=True
            )
        child = await self._store.refresh(command.tenant, child_id)
        if child.thread is not None and child.thread.command_id != command.id:
            raise Conflict(f"thread {child_id} exists already", code="thread_exists")
        admitted = child.thread is not None  # by an earlier try of this command, whose parent append lost a race
        policy = await self._admission.policy(command.tenant, command.policy_revision)
        running = 0 if admitted else await self.running_children(command.tenant)
        plan = delegation.plan(state, command, self.bounds(policy), running, CATALOGUE, admitted=admitted)
        check_mode(policy, str(plan.input["runtime_mode"]), "a delegated task")
        if child.thread is None:
            created = plan.create[0]
            assert isinstance(created, ThreadCreated)
            # On the parent's home (delegation.plan): until checkpoints are durable off the volume, the child's
            # results could not be brought back from another one.
            await self._checkpoints.prepare(command.tenant, child_id, created.workspace, volume=created.volume)
            ctx = reaction_ctx(f"{command.id}|delegate-child", command.issued_at, f"user:{command.user}")
            await self._store.append(
                command.tenant, child_id, child, plan.create, ids=ctx.ids, at=ctx.now, command_id=command.id,
                actor=ctx.actor, fence=fence,
            )  # fmt: skip
            child = await self._store.refresh(command.tenant, child_id)
        if child.runs:
            child_run_id = child.runs[0].id
        else:
            ctx = reaction_ctx(f"{command.id}|delegate-task", command.issued_at, f"user:{command.user}", CATALOGUE)
            task = msgspec.structs.replace(command, thread=child_id, body=plan.first_message)
            events, sent = send_message(child, task, plan.first_message, ctx)
            await self._store.append(
                command.tenant, child_id, child, events, ids=ctx.ids, at=ctx.now, command_id=command.id,
                actor=ctx.actor,
            )  # fmt: skip
            child_run_id = sent.run_id or ""
        receipt = Accepted(seq=0, thread_id=child_id, run_id=child_run_id, disposition="delegated")
        return [delegation.started(plan, child_run_id)], receipt

    async def on_run_ended(self, tenant: str, state: ThreadState, ended: RunEnded) -> None:
        """``ended``: the run-ended event delivered (the task's end, or an interrupted parent run)."""
        task = delegation.task_run(state)
        if task is not None and task.terminal and "ended" not in (state.lineage.delegation or {}):  # type: ignore[union-attr]  # task_run: a subagent lineage
            await self._finish(tenant, state, task)
        run = state.run(ended.run_id)
        if isinstance(ended, RunInterrupted) and run is not None and delegation.cascade_targets(run):
            await self._cascade(tenant, run)

    async def _finish(self, tenant: str, child: ThreadState, task: Run) -> None:
        assert child.thread is not None and child.lineage is not None and child.lineage.parent_thread_id
        at = task.ended_at or datetime.now(UTC)  # the envelope ids of a redelivered reaction are the same ones
        parent_id = child.lineage.parent_thread_id
        child_id = child.thread.id  # a refreshed child is the same thread: its id does not change
        for _ in range(MAX_TRIES):
            parent = await self._store.refresh(tenant, parent_id)
            events = delegation.finish(parent, child, task) if parent.thread is not None else []
            if not events:
                break
            ctx = reaction_ctx(f"delegation-finished|{child.thread.id}|{task.id}", at, ACTOR)
            try:
                await self._store.append(
                    tenant, parent_id, parent, events, ids=ctx.ids, at=ctx.now, command_id=f"finish-{task.id}",
                    actor=ctx.actor,
                )  # fmt: skip
                break
            except AppendConflict:
                continue  # the parent moved on (its run streams): read it again, maybe recorded by another try
        else:
            raise AppendConflict(None, f"the result of {child_id} could not be recorded on {parent_id}")
        for _ in range(MAX_TRIES):
            events = delegation.ended(child, task)
            if not events:
                return
            ctx = reaction_ctx(f"delegation-ended|{child.thread.id}|{task.id}", at, ACTOR)
            try:
                await self._store.append(
                    tenant, child.thread.id, child, events, ids=ctx.ids, at=ctx.now, command_id=f"ended-{task.id}",
                    actor=ctx.actor,
                )  # fmt: skip
                return
            except AppendConflict:
                child = await self._store.refresh(tenant, child_id)
        raise AppendConflict(None, f"{child_id} could not be marked reported")

    async def _cascade(self, tenant: str, run: Run) -> None:
        """An interrupted run's async tasks are interrupted too when the tenant's setting says so (the policy's
        ``cascade_interrupts``, else ``TREADLE_COORDINATOR_DELEGATION_CASCADE_INTERRUPTS``)."""
        policy = await self._admission.policy(tenant)
        on = policy.cascade_interrupts
        if not (self._own.delegation_cascade_interrupts if on is None else on):
            return
        for child_id in delegation.cascade_targets(run):
            child = await self._store.refresh(tenant, child_id)
            task = delegation.task_run(child)
            if task is None or task.terminal:
                continue
            command = Command(
                id=f"cascade-{run.id}-{child_id}",
                tenant=tenant,
                user=ACTOR,
                thread=child_id,
                issued_at=run.ended_at or datetime.now(UTC),
                body=InterruptRun(run_id=task.id),
            )
            reply = await self._decide(command)
            log.info("interrupt of %s cascaded to %s: %s", run.id, child_id, reply)
