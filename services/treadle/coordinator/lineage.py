"""Coordinator commands that span two threads (L6 fork, L7 merge-back). Each is decided on the thread it is
sent to, and reads or writes the other one idempotently, so a retried command redoes nothing twice."""

from __future__ import annotations

from treadle.checkpoints.materialize import Materialize
from treadle.checkpoints.protocol import CheckpointError
from treadle.core import events as ev
from treadle.core.commands import Accepted, Command
from treadle.core.ctx import Ctx, reaction_ctx
from treadle.core.lineage import context_sends, forks
from treadle.core.state import ThreadState
from treadle.eventlog.errors import Conflict as AppendConflict
from treadle.eventlog.store import ThreadStore
from treadle.ports import CheckpointStore
from treadle.providers.registry import CATALOGUE


class LineageCommands:
    def __init__(self, store: ThreadStore, checkpoints: CheckpointStore) -> None:
        self._store, self._checkpoints = store, checkpoints

    async def fork(
        self, state: ThreadState, command: Command, fence: tuple[str, int] | None = None
    ) -> tuple[list[ev.Payload], Accepted]:
        """L6.1/L6.5: decided by ``treadle.core.lineage.forks``; this carries out its effects (the child's workspace
        materialised from the source point's checkpoint, then the child's ``thread.created`` +
        ``thread.forked``, fenced on the tenant's thread creations when counted) and returns the source's
        record of its child."""
        fork = forks.prepare(state, command)
        if fork.receipt.duplicate:
            return [], fork.receipt
        child = await self._store.refresh(command.tenant, fork.plan.child_id)
        for effect in forks.decide(state, command, fork, child, fence).effects:
            if isinstance(effect, forks.MaterializeWorkspace):
                assert state.thread is not None
                # The fork lives on its source's home (forks.fork): materialised there from the source's checkpoint.
                await self._materialize(effect, state.thread.volume)
            else:
                child = await self._create_child(effect, child)
        return forks.settle(fork, child), fork.receipt

    async def _materialize(self, effect: forks.MaterializeWorkspace, volume: str) -> None:
        try:
            await self._checkpoints.materialize(
                Materialize(
                    tenant=effect.tenant,
                    source_thread=effect.source_thread,
                    source_workspace=effect.source_workspace,
                    commit=effect.commit,
                    thread=effect.thread,
                    workspace=effect.workspace,
                ),
                volume=volume,
            )
        except CheckpointError as exc:
            raise forks.workspace_unavailable(exc.code, exc.message) from None

    async def _create_child(self, effect: forks.CreateChild, child: ThreadState) -> ThreadState:
        """The child thread as it is once created (by this try, or by another one that landed first)."""
        ctx = reaction_ctx(effect.seed, effect.at, effect.actor)
        try:
            await self._store.append(
                effect.tenant,
                effect.thread,
                child,
                effect.events,
                ids=ctx.ids,
                at=ctx.now,
                command_id=effect.command_id,
                actor=ctx.actor,
                fence=effect.fence,
            )
        except AppendConflict:
            child = await self._store.refresh(effect.tenant, effect.thread)
            if child.thread is None:
                raise  # another thread of the tenant landed first: counted again, decided again
        return child

    async def send(self, state: ThreadState, command: Command) -> tuple[list[ev.Payload], Accepted]:
        """A message asking for a clean context (L5.4) or a merge-back (L7.1): decided by
        ``treadle.core.lineage.context_sends`` once the fork it merges back from is read."""
        command, merge_back_from = context_sends.check(command)
        fork_state = None
        if merge_back_from is not None:
            fork_state = await self._store.refresh(command.tenant, merge_back_from)
        return context_sends.decide(state, command, fork_state, Ctx.for_command(command, CATALOGUE))
