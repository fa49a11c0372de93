"""Carrying out rollbacks (L10.5, L10.6) for the thread coordinator, which owns rollback intent.

A rollback command is decided (``rollback.started``), the checkpoint service restores the files, and the
outcome is appended (``rollback.completed`` or ``rollback.failed``); then the queue may move again. All of it
runs in the thread's mailbox, so no other command of the thread is decided in between. A coordinator that
dies half-way leaves the rollback ``in_progress``: the next command of that thread (a retry of the same
command included) finishes it first; the restore is idempotent by rollback id.

Between the restore and the outcome, the provider conversation is brought in line with the files (L10.5):
when the provider thread's session declared ``rollback``, its host is asked (verb ``thread.rollback``) to
drop the rolled-back runs' turns — after resuming the provider thread on a host when no session holds it
(released idle, or its host restarted) — and the provider thread is kept. ``rollback.provider_requested``
is appended before the host is asked, so a retry asks that same session again (hosts answer a rollback id
once) and never a second one, which could not know whether the turns were dropped. Whatever fails there
takes the degradation path (``divergent``) with the provider's message in ``provider_error``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from treadle.checkpoints.protocol import CheckpointError, RefName, Restore
from treadle.core import events as ev
from treadle.core.commands import Accepted, Command
from treadle.core.ctx import Ctx, reaction_ctx
from treadle.core.rollback import decide as rollback
from treadle.core.rollback import steps
from treadle.core.rollback.decide import ProviderOutcome
from treadle.core.rollback.model import Rollback
from treadle.core.state import ThreadState
from treadle.core.thread.decide import dispatch_next
from treadle.eventlog.store import ThreadStore
from treadle.ports import CheckpointStore, HostDirectory
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostUnavailable
from treadle.providers.registry import CATALOGUE

log = logging.getLogger(__name__)
ACTOR = "coordinator"
# Resuming a provider thread starts its runtime, and a runtime may restart to roll back (Claude Code): both
# take longer than the quick verbs' timeout.
PROVIDER_TIMEOUT = 60.0


def is_rollback(command: Command) -> bool:
    return isinstance(command.body, rollback.ROLLBACK_COMMANDS)


class Rollbacks:
    def __init__(
        self,
        store: ThreadStore,
        checkpoints: CheckpointStore,
        hosts: HostDirectory | None = None,
        provider_timeout: float = PROVIDER_TIMEOUT,
    ) -> None:
        self._store = store
        self._checkpoints = checkpoints
        self._hosts = hosts  # None: no provider-native rollback (every provider thread diverges)
        self._provider_timeout = provider_timeout

    async def after(
        self, tenant: str, thread: str, state: ThreadState, command: Command, receipt: Accepted
    ) -> Accepted:
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
        """Restore the files, then append the outcome and dispatch the head of the queue (the steps are
        decided by ``treadle.core.rollback.steps``; this performs their effects)."""
        files = steps.restore_files(state, tenant, thread, rb)
        request = Restore(
            tenant=files.tenant,
            thread=files.thread,
            workspace=files.workspace,
            restore_id=files.restore_id,
            commit=files.commit,
            retire=[RefName(scope=s, ordinal=o) for s, o in files.retire],
        )
        ctx = reaction_ctx(f"rollback|{rb.id}", datetime.now(UTC), ACTOR)
        try:
            restored = await self._checkpoints.restore(request, volume=home(state))  # unavailable: retried later
        except CheckpointError as exc:
            log.warning("rollback %s of %s failed: %s", rb.id, thread, exc)
            outcome: ev.Payload = steps.restore_failed(rb, exc.code, exc.message)
        else:
            outcome = steps.outcome(rb, restored, await self.roll_back_provider(tenant, thread, state, rb, ctx))
        await self._append(tenant, thread, state, [outcome], ctx, rb, "outcome")
        follow = dispatch_next(state)
        if follow:
            await self._append(tenant, thread, state, follow, ctx, rb, "dispatch")

    async def roll_back_provider(
        self, tenant: str, thread: str, state: ThreadState, rb: Rollback, ctx: Ctx
    ) -> ProviderOutcome:
        """L10.5: what becomes of the provider conversation once the files are restored."""
        step = steps.provider_step(state, tenant, thread, rb, CATALOGUE, hosts=self._hosts is not None)
        resumed_here = step.resume is not None
        if step.resume is not None:
            placed, error = await self._resume(step.resume, home(state))
            resumed = steps.resumed(step, rb, placed, error)
            if resumed.release is not None:
                await self._release(resumed.release)
            if resumed.step is None:
                assert resumed.outcome is not None
                log.info(
                    "provider rollback of %s not done: %s", resumed.outcome.provider_thread_id, resumed.outcome.error
                )
                return resumed.outcome
            await self._append(tenant, thread, state, resumed.events, ctx, rb, "resume")
            step = resumed.step
        if step.outcome is not None:
            return step.outcome
        if step.requested:
            await self._append(tenant, thread, state, step.requested, ctx, rb, "provider")
        assert step.drop is not None
        outcome, release = steps.dropped(step.drop, await self._drop(step.drop), resumed_here=resumed_here)
        for effect in release:
            await self._release(effect)  # resumed only for this: no run will use it
        return outcome

    async def _append(
        self, tenant: str, thread: str, state: ThreadState, events: list[Any], ctx: Ctx, rb: Rollback, step: str
    ) -> None:
        await self._store.append(
            tenant,
            thread,
            state,
            events,
            ids=ctx.ids,
            at=ctx.now,
            command_id=f"{rb.command_id}|{step}",
            actor=ACTOR,
            causation_id=rb.command_id,
        )

    async def _drop(self, drop: steps.DropTurns) -> steps.Dropped:
        assert self._hosts is not None
        request = hp.RollbackTurns(session_id=drop.session_id, rollback_id=drop.rollback_id, turns=drop.turns)
        try:
            reply = await self._hosts.rollback(drop.host_id, request, timeout=self._provider_timeout)
        except HostUnavailable as exc:
            return steps.Dropped(error=str(exc))
        if isinstance(reply, hp.HostFailure):
            log.info("provider rollback of %s refused: %s %s", drop.provider_thread_id, reply.code, reply.message)
            return steps.Dropped(error=f"{reply.code}: {reply.message}")
        return steps.Dropped(turns_dropped=reply.turns_dropped)

    async def _resume(self, resume: steps.ResumeProvider, volume: str) -> tuple[hp.SessionPlaced | None, str | None]:
        """No session holds the provider thread: resume it on a host (as the next run would) and keep that
        session live for the next run. Returns the placement, or why there is none."""
        assert self._hosts is not None
        request = hp.PlaceSession(
            tenant=resume.tenant,
            thread=resume.thread,
            provider=resume.provider,
            session_id=resume.session_id,
            provider_thread_id=resume.provider_thread_id,
            native_ref=resume.native_ref,
            workspace=resume.workspace,
            runtime_mode=resume.runtime_mode,
            model=resume.model,
            capabilities=resume.capabilities,
        )
        try:
            placed = await self._hosts.place(request, timeout=self._provider_timeout, volume=volume)
        except HostUnavailable as exc:
            return None, str(exc)
        if isinstance(placed, hp.HostFailure):
            return None, f"{placed.code}: {placed.message}"
        return placed, None

    async def _release(self, release: steps.ReleaseSession) -> None:
        """Best effort: the host's idle reaper is the backstop."""
        assert self._hosts is not None
        try:
            await self._hosts.verb(
                release.host_id, "session.stop", hp.StopTurn(session_id=release.session_id, attempt_id="")
            )
        except HostUnavailable as exc:
            log.info("could not release session %s: %s", release.session_id, exc)


def home(state: ThreadState) -> str:
    """The volume the thread's workspace and sessions are on."""
    assert state.thread is not None
    return state.thread.volume
