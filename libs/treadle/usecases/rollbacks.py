"""Rollbacks (L10.5, L10.6): thread commands (the coordinator owns rollback intent) whose outcome is read back
from the thread's log, so the answer is the audited record, not a guess."""

from __future__ import annotations

import msgspec

from treadle.api.rollbacks import NodeRollbackRequest, RollbackRequest
from treadle.core.errors import Conflict, DomainError
from treadle.core.rollback.commands import RollbackNode, RollbackThread
from treadle.usecases.ids import checked, owner
from treadle.usecases.ports import Caller, CommandBus, ThreadReads
from treadle.views.checkpoints import RollbackView, rollback_view


class NotReadableYet(DomainError):
    """Accepted, but its record is not in the log's fold yet: retry (answered 503 with Retry-After)."""

    code = "unavailable"
    status = 503


async def outcome(who: Caller, reads: ThreadReads, thread: str, rollback_id: str | None) -> RollbackView:
    """The rollback as recorded in the log (the projection may lag a few milliseconds behind it)."""
    state = await reads.logged(who.tenant, thread)
    record = next((r for r in reversed(state.rollbacks) if r.id == rollback_id), None) if state else None
    if state is None or record is None:
        raise NotReadableYet("the rollback was accepted but its record is not readable yet; retry")
    if record.status == "failed":
        raise Conflict(
            record.error or "the restore failed",
            code="rollback_failed",
            details={"rollback": msgspec.to_builtins(record)},
        )
    return rollback_view(record, thread, state.seq)


async def thread(
    who: Caller, commands: CommandBus, reads: ThreadReads, thread_id: str, request: RollbackRequest, key: str | None
) -> RollbackView:
    """Roll the thread back to run N's files; later runs become rolled_back."""
    thread_id = checked(thread_id, "thr")
    body = RollbackThread(to_run_ordinal=request.to_run_ordinal, interrupt_active=request.interrupt_active)
    accepted = await commands.send(
        tenant=who.tenant, user=who.user, verb="rollback", thread=thread_id, body=body, idempotency_key=key
    )
    return await outcome(who, reads, thread_id, accepted.rollback_id)


async def node(
    who: Caller, commands: CommandBus, reads: ThreadReads, node_id: str, request: NodeRollbackRequest, key: str | None
) -> RollbackView:
    """Restore a child node's checkpoint."""
    node_id = checked(node_id, "node")
    checked(request.checkpoint_id, "ckpt")
    if request.thread_id:
        thread_id = checked(request.thread_id, "thr")
    else:
        thread_id = await owner(reads, who.tenant, node_id, "node", "node_not_found")
    body = RollbackNode(node_id=node_id, checkpoint_id=request.checkpoint_id)
    accepted = await commands.send(
        tenant=who.tenant, user=who.user, verb="node-rollback", thread=thread_id, body=body, idempotency_key=key
    )
    return await outcome(who, reads, thread_id, accepted.rollback_id)
