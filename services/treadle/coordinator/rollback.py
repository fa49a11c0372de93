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

import msgspec

from treadle.checkpoints.protocol import CheckpointError, RefName, Restore
from treadle.core import events as ev
from treadle.core.commands import Accepted, Command
from treadle.core.ctx import Ctx, reaction_ctx
from treadle.core.ids import IdFactory
from treadle.core.rollback import decide as rollback
from treadle.core.rollback.decide import ProviderOutcome, ProviderPlan
from treadle.core.rollback.model import Rollback
from treadle.core.run import supervision as sv
from treadle.core.state import ThreadState
from treadle.core.thread.decide import dispatch_next
from treadle.core.turn_options import SCRIPTED_PROVIDERS
from treadle.eventlog.store import ThreadStore
from treadle.ports import CheckpointStore, HostDirectory
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostUnavailable

log = logging.getLogger(__name__)
ACTOR = "coordinator"
# Resuming a provider thread starts its runtime, and a runtime may restart to roll back (Claude Code): both
# take longer than the quick verbs' timeout.
PROVIDER_TIMEOUT = 60.0


def _resume_session_id(rb: Rollback) -> str:
    """The same for every try of this rollback: a retry (after an append conflict or a crash) finds the
    session its first try placed, since hosts answer a placement of a live session id with that session."""
    return IdFactory(f"rollback|{rb.id}|resume", int(rb.started_at.timestamp() * 1000)).next("ps")


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
        """Restore the files, then append the outcome and dispatch the head of the queue."""
        assert state.thread is not None
        retire = [RefName(scope=s, ordinal=o) for s, o in rollback.retire_list(state, rb)]
        request = Restore(
            tenant=tenant,
            thread=thread,
            workspace=state.thread.workspace,
            restore_id=rb.id,
            commit=rb.commit,
            retire=retire,
        )
        ctx = reaction_ctx(f"rollback|{rb.id}", datetime.now(UTC), ACTOR)
        try:
            restored = await self._checkpoints.restore(request)  # CheckpointUnavailable: left in progress, retried
        except CheckpointError as exc:
            log.warning("rollback %s of %s failed: %s", rb.id, thread, exc)
            outcome: ev.Payload = ev.RollbackFailed(rollback_id=rb.id, error=f"{exc.code}: {exc.message}")
        else:
            outcome = rollback.completed(rb, restored, await self.roll_back_provider(tenant, thread, state, rb, ctx))
        await self._store.append(
            tenant,
            thread,
            state,
            [outcome],
            ids=ctx.ids,
            at=ctx.now,
            command_id=f"{rb.command_id}|outcome",
            actor=ACTOR,
            causation_id=rb.command_id,
        )
        follow = dispatch_next(state)
        if follow:
            await self._store.append(
                tenant,
                thread,
                state,
                follow,
                ids=ctx.ids,
                at=ctx.now,
                command_id=f"{rb.command_id}|dispatch",
                actor=ACTOR,
                causation_id=rb.command_id,
            )

    async def roll_back_provider(
        self, tenant: str, thread: str, state: ThreadState, rb: Rollback, ctx: Ctx
    ) -> ProviderOutcome:
        """L10.5: what becomes of the provider conversation once the files are restored."""
        if rb.provider_session_id is not None:  # asked before a crash: only that session knows what it did
            return await self._ask_again(state, rb)
        plan = rollback.provider_plan(state, rb)
        if plan is None:
            pths = [p for p in state.provider_threads if p.status == "active"]
            saw = rb.kind == "node" or any(rollback.saw_dropped_runs(state, rb, p) for p in pths)
            return ProviderOutcome(context="divergent" if saw else "kept")
        pth = state.provider_thread_of(plan.provider_thread_id)
        if plan.turns == 0:
            saw = pth is not None and rollback.saw_dropped_runs(state, rb, pth)
            return ProviderOutcome(context="divergent" if saw else "kept", provider_thread_id=plan.provider_thread_id)
        if not plan.capabilities.rollback or self._hosts is None:
            return ProviderOutcome(context="divergent")  # the provider cannot: the degradation path, as declared
        resumed_here = plan.session_id is None
        if resumed_here:
            resumed = await self._resume(tenant, thread, state, plan, rb, ctx)
            if isinstance(resumed, str):
                return self._diverged(plan, f"could not resume the provider thread to roll it back: {resumed}")
            plan = resumed
        await self._store.append(
            tenant,
            thread,
            state,
            [rollback.provider_requested(rb, plan)],
            ids=ctx.ids,
            at=ctx.now,
            command_id=f"{rb.command_id}|provider",
            actor=ACTOR,
            causation_id=rb.command_id,
        )
        assert plan.session_id is not None and plan.host_id is not None
        outcome = await self._ask(plan.host_id, plan.session_id, plan.provider_thread_id, rb.id, plan.turns)
        if outcome.context == "divergent" and resumed_here:
            await self._release(plan.host_id, plan.session_id)  # resumed only for this: no run will use it
        return outcome

    async def _ask(self, host_id: str, session_id: str, pth_id: str, rollback_id: str, turns: int) -> ProviderOutcome:
        assert self._hosts is not None
        request = hp.RollbackTurns(session_id=session_id, rollback_id=rollback_id, turns=turns)
        try:
            reply = await self._hosts.rollback(host_id, request, timeout=self._provider_timeout)
        except HostUnavailable as exc:
            return ProviderOutcome(context="divergent", provider_thread_id=pth_id, error=str(exc))
        if isinstance(reply, hp.HostFailure):
            log.info("provider rollback of %s refused: %s %s", pth_id, reply.code, reply.message)
            return ProviderOutcome(
                context="divergent", provider_thread_id=pth_id, error=f"{reply.code}: {reply.message}"
            )
        return ProviderOutcome(context="rolled_back", provider_thread_id=pth_id, turns_dropped=reply.turns_dropped)

    async def _ask_again(self, state: ThreadState, rb: Rollback) -> ProviderOutcome:
        """A coordinator died after asking: the same session answers the same rollback id with its first
        answer (or does it now, if the request never arrived); a session gone since leaves it unknown."""
        session = state.session(rb.provider_session_id or "")
        pth_id = rb.provider_thread_id or ""
        if session is None or session.status != "live" or self._hosts is None:
            return ProviderOutcome(
                context="divergent",
                provider_thread_id=pth_id,
                error="the provider session asked to roll back is gone; whether it did is unknown",
            )
        return await self._ask(session.host_id, session.id, pth_id, rb.id, rb.provider_turns)

    async def _resume(
        self, tenant: str, thread: str, state: ThreadState, plan: ProviderPlan, rb: Rollback, ctx: Ctx
    ) -> ProviderPlan | str:
        """No session holds the provider thread: resume it on a host (as the next run would) and keep that
        session live for the next run. Returns the plan with its session, or why it could not."""
        assert self._hosts is not None and state.thread is not None
        model = next(
            (
                r.model
                for r in reversed(state.runs)
                if any(a.provider_thread_id == plan.provider_thread_id for a in r.attempts)
            ),
            None,
        )
        request = hp.PlaceSession(
            tenant=tenant,
            thread=thread,
            provider=plan.provider,
            session_id=_resume_session_id(rb),
            provider_thread_id=plan.provider_thread_id,
            native_ref=plan.native_ref,
            workspace=state.thread.workspace,
            runtime_mode=state.thread.runtime_mode,
            model=model,
            capabilities=plan.capabilities if plan.provider in SCRIPTED_PROVIDERS else None,
        )
        try:
            placed = await self._hosts.place(request, timeout=self._provider_timeout)
        except HostUnavailable as exc:
            return str(exc)
        if isinstance(placed, hp.HostFailure):
            return f"{placed.code}: {placed.message}"
        if not placed.resumed or placed.native_ref != plan.native_ref:
            await self._release(placed.host_id, placed.session_id)
            return f"the host opened {placed.native_ref!r} instead of resuming {plan.native_ref!r}"
        await self._store.append(
            tenant,
            thread,
            state,
            [sv.attached(placed)],
            ids=ctx.ids,
            at=ctx.now,
            command_id=f"{rb.command_id}|resume",
            actor=ACTOR,
            causation_id=rb.command_id,
        )
        return msgspec.structs.replace(
            plan, session_id=placed.session_id, host_id=placed.host_id, capabilities=placed.capabilities
        )

    async def _release(self, host_id: str, session_id: str) -> None:
        """Best effort: the host's idle reaper is the backstop."""
        assert self._hosts is not None
        try:
            await self._hosts.verb(host_id, "session.stop", hp.StopTurn(session_id=session_id, attempt_id=""))
        except HostUnavailable as exc:
            log.info("could not release session %s: %s", session_id, exc)

    @staticmethod
    def _diverged(plan: ProviderPlan, error: str) -> ProviderOutcome:
        log.info("provider rollback of %s not done: %s", plan.provider_thread_id, error)
        return ProviderOutcome(context="divergent", provider_thread_id=plan.provider_thread_id, error=error)
