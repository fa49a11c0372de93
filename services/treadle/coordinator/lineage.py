"""Coordinator commands that span two threads (L6 fork, L7 merge-back). Each is decided on the thread it is
sent to, and reads or writes the other one idempotently, so a retried command redoes nothing twice."""

from __future__ import annotations

import msgspec

from treadle.checkpoints.materialize import Materialize
from treadle.checkpoints.protocol import CheckpointError
from treadle.core import events as ev
from treadle.core.commands import Accepted, Command
from treadle.core.ctx import Ctx, reaction_ctx, thread_id_for
from treadle.core.decide import decide
from treadle.core.errors import Conflict, NotFound
from treadle.core.lineage import decide as lineage
from treadle.core.lineage.commands import ForkThread
from treadle.core.state import ThreadState
from treadle.core.thread.commands import SendMessage
from treadle.eventlog.errors import Conflict as AppendConflict
from treadle.eventlog.store import ThreadStore
from treadle.ports import CheckpointStore


def fork_thread_id(command: Command) -> str:
    """The fork's id, derived from the command: a retried fork names the same thread."""
    return thread_id_for(f"{command.id}|fork", command.issued_at)


def wants_context(command: Command) -> bool:
    body = command.body
    return isinstance(body, SendMessage) and (body.clean_context or body.merge_back_from is not None)


class LineageCommands:
    def __init__(self, store: ThreadStore, checkpoints: CheckpointStore) -> None:
        self._store, self._checkpoints = store, checkpoints

    async def fork(
        self, state: ThreadState, command: Command, fence: tuple[str, int] | None = None
    ) -> tuple[list[ev.Payload], Accepted]:
        """L6.1/L6.5: the child thread (workspace materialised from the source point's checkpoint, then its
        ``thread.created`` + ``thread.forked``, fenced on the tenant's thread creations when counted), then the
        source's record of its child."""
        body = command.body
        assert isinstance(body, ForkThread) and state.thread is not None
        body = msgspec.structs.replace(body, thread_id=body.thread_id or fork_thread_id(command))
        plan = lineage.fork(state, command, body, Ctx.for_command(command))
        receipt = Accepted(seq=state.seq, thread_id=plan.child_id, disposition="forked")
        if state.lineage is not None and any(c["thread_id"] == plan.child_id for c in state.lineage.children):
            receipt.duplicate = True
            return [], receipt
        tenant = command.tenant
        child = await self._store.refresh(tenant, plan.child_id)
        if child.thread is None:
            created = plan.child_events[0]
            try:
                await self._checkpoints.materialize(
                    Materialize(
                        tenant=tenant,
                        source_thread=state.thread.id,
                        source_workspace=state.thread.workspace,
                        commit=plan.point["commit"],
                        thread=plan.child_id,
                        workspace=created.workspace,
                    )
                )
            except CheckpointError as exc:
                raise Conflict(
                    f"the fork's workspace could not be made from the checkpoint: {exc.message}",
                    code="workspace_unavailable",
                    details={"reason": exc.code},
                ) from None
            # Envelope ids of their own: the source's events of this command get theirs from the command's
            # factory, and equal ids would be dropped by the broker's de-duplication.
            ctx = reaction_ctx(f"{command.id}|fork-child", command.issued_at, f"user:{command.user}")
            try:
                await self._store.append(
                    tenant,
                    plan.child_id,
                    child,
                    plan.child_events,
                    ids=ctx.ids,
                    at=ctx.now,
                    command_id=command.id,
                    actor=ctx.actor,
                    fence=fence,
                )
            except AppendConflict:
                child = await self._store.refresh(tenant, plan.child_id)
                if child.thread is None:
                    raise  # another thread of the tenant landed first: counted again, decided again
        if child.thread is None or child.thread.command_id != command.id:
            raise Conflict(f"thread {plan.child_id} exists already", code="thread_exists")
        return plan.parent_events, receipt

    async def send(self, state: ThreadState, command: Command) -> tuple[list[ev.Payload], Accepted]:
        """A message asking for a clean context (L5.4) or a merge-back (L7.1): always a run of its own (never a
        steer), with the context request decided in the same batch as its ``run.queued``."""
        body = command.body
        assert isinstance(body, SendMessage)
        if body.mode == "auto":
            body = msgspec.structs.replace(body, mode="queue_after_active")
        if body.mode not in ("queue_after_active", "start_immediately", "reject"):
            raise Conflict(
                f"mode {body.mode} cannot carry clean_context or merge_back_from; it needs a run of its own",
                code="invalid_mode",
            )
        fork_state = None
        if body.merge_back_from is not None:
            if not lineage.is_thread_id(body.merge_back_from):
                raise NotFound(f"thread {body.merge_back_from!r} not found", code="thread_not_found")
            fork_state = await self._store.refresh(command.tenant, body.merge_back_from)
        ctx = Ctx.for_command(command)
        events, receipt = decide(state, msgspec.structs.replace(command, body=body), ctx)
        if receipt.duplicate or not events:
            return events, receipt
        queued = next(e for e in events if isinstance(e, ev.RunQueued))
        queued.context = lineage.context_request(
            state,
            clean_context=body.clean_context,
            merge_back_from=body.merge_back_from,
            fork_state=fork_state,
            ctx=ctx,
        )
        return events, receipt
