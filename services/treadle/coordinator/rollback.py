"""Carrying out rollbacks (L10.5, L10.6) for the thread coordinator, which owns rollback intent.

A rollback command is decided (``rollback.started``), the checkpoint service restores the files, and the
outcome is appended (``rollback.completed`` or ``rollback.failed``); then the queue may move again. All of it
runs in the thread's mailbox, so no other command of the thread is decided in between. A coordinator that
dies half-way leaves the rollback ``in_progress``: the next command of that thread (a retry of the same
command included) finishes it first; the restore is idempotent by rollback id.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from treadle.checkpoints.client import CheckpointClient
from treadle.checkpoints.protocol import CheckpointError, RefName, Restore
from treadle.domain import events as ev
from treadle.domain import rollback
from treadle.domain.commands import Accepted, Command, reaction_ctx
from treadle.domain.decide import dispatch_next
from treadle.domain.entities import Rollback
from treadle.domain.thread import ThreadState
from treadle.eventlog.store import ThreadStore

log = logging.getLogger(__name__)
ACTOR = "coordinator"


def is_rollback(command: Command) -> bool:
    return isinstance(command.body, rollback.ROLLBACK_COMMANDS)


class Rollbacks:
    def __init__(self, store: ThreadStore, checkpoints: CheckpointClient) -> None:
        self._store = store
        self._checkpoints = checkpoints

    async def after(self, tenant: str, thread: str, state: ThreadState, command: Command, receipt: Accepted) -> Accepted:
        """After any decided command: carry out the rollback in progress — the one this command started, or
        one a crashed coordinator left half-way (then this command, e.g. a send, was queued behind it)."""
        pending = rollback.pending(state)
        if pending is None or rollback.waiting(state, pending):
            return receipt  # a rollback waiting for its interrupted run is carried out when that run ends
        await self.carry_out(tenant, thread, state, pending)
        if is_rollback(command):
            receipt.seq = state.seq
        return receipt

    async def carry_out(self, tenant: str, thread: str, state: ThreadState, rb: Rollback) -> None:
        """Restore the files, then append the outcome and dispatch the head of the queue."""
        assert state.thread is not None
        retire = [RefName(scope=s, ordinal=o) for s, o in rollback.retire_list(state, rb)]
        request = Restore(tenant=tenant, thread=thread, workspace=state.thread.workspace, restore_id=rb.id,
                          commit=rb.commit, retire=retire)
        ctx = reaction_ctx(f"rollback|{rb.id}", datetime.now(timezone.utc), ACTOR)
        try:
            restored = await self._checkpoints.restore(request)  # CheckpointUnavailable: left in progress, retried
        except CheckpointError as exc:
            log.warning("rollback %s of %s failed: %s", rb.id, thread, exc)
            outcome: ev.Payload = ev.RollbackFailed(rollback_id=rb.id, error=f"{exc.code}: {exc.message}")
        else:
            outcome = rollback.completed(rb, restored, await self.roll_back_provider(state, rb))
        await self._store.append(tenant, thread, state, [outcome], ids=ctx.ids, at=ctx.now,
                                 command_id=f"{rb.command_id}|outcome", actor=ACTOR, causation_id=rb.command_id)
        follow = dispatch_next(state)
        if follow:
            await self._store.append(tenant, thread, state, follow, ids=ctx.ids, at=ctx.now,
                                     command_id=f"{rb.command_id}|dispatch", actor=ACTOR, causation_id=rb.command_id)

    async def roll_back_provider(self, state: ThreadState, rb: Rollback) -> str:
        """HOOK (L10.5): where a provider-native rollback belongs. When the live session's capabilities say
        ``rollback`` and a host verb exists, ask the host to call the adapter's ``rollback(turns)`` with
        ``rollback.provider_turns_to_drop(state, rb)`` and return "rolled_back" (keeping the provider
        thread). No host verb exists yet, so every provider gets the degradation path: "divergent"."""
        return "divergent"
