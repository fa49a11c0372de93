"""Carrying out a rollback (L10.5, L10.6) as pure steps around its effects; the coordinator performs them
(treadle.coordinator.rollback).

The files are restored first (``RestoreFiles``). Then the provider conversation is brought in line with them:
``provider_step`` decides it without the provider (kept, or divergent: the degradation path), or names the
effects — resume the provider thread on a host when no session holds it (``ResumeProvider``, settled by
``resumed``), record ``rollback.provider_requested``, then ask the session to drop the rolled-back runs' turns
(``DropTurns``, settled by ``dropped``). A session resumed only for this is released when the rollback did not
happen there (``ReleaseSession``). ``outcome`` gives the rollback's last event."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from treadle.core import events as ev
from treadle.core.checkpoints.results import Restored
from treadle.core.ids import IdFactory
from treadle.core.providers.catalogue import Catalogue
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.rollback import decide as rollback
from treadle.core.rollback.decide import ProviderOutcome, ProviderPlan
from treadle.core.rollback.model import Rollback
from treadle.core.run import supervision as sv
from treadle.core.view import ThreadView


class RestoreFiles(msgspec.Struct, frozen=True, kw_only=True):
    """Effect: restore ``workspace`` to ``commit`` (idempotent by ``restore_id``), retiring the later refs."""

    tenant: str
    thread: str
    workspace: str
    restore_id: str
    commit: str
    retire: list[tuple[str, int]]  # (scope, ordinal)


class ResumeProvider(msgspec.Struct, frozen=True, kw_only=True):
    """Effect: place a session resuming ``native_ref`` on a host (as the next run would), kept for that run."""

    tenant: str
    thread: str
    provider: str
    session_id: str
    provider_thread_id: str
    native_ref: str
    workspace: str
    runtime_mode: str
    model: str | None = None
    capabilities: ProviderCapabilities | None = None  # scripted providers only: the profile to play


class DropTurns(msgspec.Struct, frozen=True, kw_only=True):
    """Effect: ask session ``session_id`` on ``host_id`` to drop its last ``turns`` turns (verb
    ``thread.rollback``; hosts answer a rollback id once)."""

    host_id: str
    session_id: str
    provider_thread_id: str
    rollback_id: str
    turns: int


class ReleaseSession(msgspec.Struct, frozen=True, kw_only=True):
    """Effect, best effort: stop a session no run will use (the host's idle reaper is the backstop)."""

    host_id: str
    session_id: str


class Dropped(msgspec.Struct, frozen=True, kw_only=True):
    """What the host said to ``DropTurns``: ``turns_dropped``, or ``error`` (unreachable, or refused)."""

    turns_dropped: int = 0
    error: str | None = None


@dataclass
class ProviderStep:
    """Either ``outcome`` (decided without the provider), or the effects to carry out in order: ``resume``
    (then ``resumed``), the ``requested`` record, then ``drop`` (then ``dropped``)."""

    outcome: ProviderOutcome | None = None
    plan: ProviderPlan | None = None
    resume: ResumeProvider | None = None
    requested: list[ev.Payload] = field(default_factory=list)
    drop: DropTurns | None = None


@dataclass
class Resumed:
    """What a ``ResumeProvider`` settles into: the step to go on with, or the outcome (and a session to
    release when the host opened something else than the provider thread)."""

    step: ProviderStep | None = None
    events: list[ev.Payload] = field(default_factory=list)  # the resumed session attached to the thread
    outcome: ProviderOutcome | None = None
    release: ReleaseSession | None = None


def resume_session_id(rb: Rollback) -> str:
    """The same for every try of this rollback: a retry (after an append conflict or a crash) finds the
    session its first try placed, since hosts answer a placement of a live session id with that session."""
    return IdFactory(f"rollback|{rb.id}|resume", int(rb.started_at.timestamp() * 1000)).next("ps")


def restore_files(state: ThreadView, tenant: str, thread: str, rb: Rollback) -> RestoreFiles:
    assert state.thread is not None
    return RestoreFiles(
        tenant=tenant,
        thread=thread,
        workspace=state.thread.workspace,
        restore_id=rb.id,
        commit=rb.commit,
        retire=list(rollback.retire_list(state, rb)),
    )


def restore_failed(rb: Rollback, code: str, message: str) -> ev.RollbackFailed:
    return ev.RollbackFailed(rollback_id=rb.id, error=f"{code}: {message}")


def _drop(plan: ProviderPlan, rb: Rollback) -> DropTurns:
    assert plan.session_id is not None and plan.host_id is not None
    return DropTurns(
        host_id=plan.host_id,
        session_id=plan.session_id,
        provider_thread_id=plan.provider_thread_id,
        rollback_id=rb.id,
        turns=plan.turns,
    )


def _ask(plan: ProviderPlan, rb: Rollback) -> ProviderStep:
    """Record the request first, so a retry asks that same session again and never a second one."""
    return ProviderStep(plan=plan, requested=[rollback.provider_requested(rb, plan)], drop=_drop(plan, rb))


def diverged(plan: ProviderPlan, error: str) -> ProviderOutcome:
    return ProviderOutcome(context="divergent", provider_thread_id=plan.provider_thread_id, error=error)


def provider_step(
    state: ThreadView, tenant: str, thread: str, rb: Rollback, providers: Catalogue, *, hosts: bool = True
) -> ProviderStep:
    """L10.5: what becomes of the provider conversation once the files are restored, or what must be asked
    to know. ``hosts``: whether provider hosts can be asked at all (else every provider thread diverges)."""
    if rb.provider_session_id is not None:
        # asked before a crash: only that session knows what it did; it answers the same rollback id with its
        # first answer (or does it now, if the request never arrived); a session gone since leaves it unknown
        session = state.session(rb.provider_session_id)
        pth_id = rb.provider_thread_id or ""
        if session is None or session.status != "live" or not hosts:
            return ProviderStep(
                outcome=ProviderOutcome(
                    context="divergent",
                    provider_thread_id=pth_id,
                    error="the provider session asked to roll back is gone; whether it did is unknown",
                )
            )
        drop = DropTurns(
            host_id=session.host_id,
            session_id=session.id,
            provider_thread_id=pth_id,
            rollback_id=rb.id,
            turns=rb.provider_turns,
        )
        return ProviderStep(drop=drop)
    plan = rollback.provider_plan(state, rb)
    if plan is None:
        pths = [p for p in state.provider_threads if p.status == "active"]
        saw = rb.kind == "node" or any(rollback.saw_dropped_runs(state, rb, p) for p in pths)
        return ProviderStep(outcome=ProviderOutcome(context="divergent" if saw else "kept"))
    pth = state.provider_thread_of(plan.provider_thread_id)
    if plan.turns == 0:
        saw = pth is not None and rollback.saw_dropped_runs(state, rb, pth)
        return ProviderStep(
            outcome=ProviderOutcome(context="divergent" if saw else "kept", provider_thread_id=plan.provider_thread_id)
        )
    if not plan.capabilities.rollback or not hosts:
        return ProviderStep(outcome=ProviderOutcome(context="divergent"))  # the provider cannot, as declared
    if plan.session_id is not None:
        return _ask(plan, rb)
    assert state.thread is not None
    model = next(
        (
            r.model
            for r in reversed(state.runs)
            if any(a.provider_thread_id == plan.provider_thread_id for a in r.attempts)
        ),
        None,
    )
    resume = ResumeProvider(
        tenant=tenant,
        thread=thread,
        provider=plan.provider,
        session_id=resume_session_id(rb),
        provider_thread_id=plan.provider_thread_id,
        native_ref=plan.native_ref,
        workspace=state.thread.workspace,
        runtime_mode=state.thread.runtime_mode,
        model=model,
        capabilities=plan.capabilities if providers.plays_scripts(plan.provider) else None,
    )
    return ProviderStep(plan=plan, resume=resume)


def resumed(step: ProviderStep, rb: Rollback, placed: sv.Placed | None = None, error: str | None = None) -> Resumed:
    """``placed``: the host's placement (its ``session_id``, ``host_id``, ``resumed``, ``native_ref``,
    ``capabilities``…), or ``error``: why no host placed it."""
    plan = step.plan
    assert plan is not None
    if placed is None:
        why = f"could not resume the provider thread to roll it back: {error}"
        return Resumed(outcome=diverged(plan, why))
    if not placed.resumed or placed.native_ref != plan.native_ref:
        why = f"the host opened {placed.native_ref!r} instead of resuming {plan.native_ref!r}"
        return Resumed(
            outcome=diverged(plan, f"could not resume the provider thread to roll it back: {why}"),
            release=ReleaseSession(host_id=placed.host_id, session_id=placed.session_id),
        )
    plan = msgspec.structs.replace(
        plan, session_id=placed.session_id, host_id=placed.host_id, capabilities=placed.capabilities
    )
    return Resumed(step=_ask(plan, rb), events=[sv.attached(placed)])


def dropped(
    drop: DropTurns, answer: Dropped, *, resumed_here: bool = False
) -> tuple[ProviderOutcome, list[ReleaseSession]]:
    """The outcome of a ``DropTurns``, and the effects it leaves (the session resumed only for this, when the
    rollback did not happen there: no run will use it)."""
    if answer.error is not None:
        outcome = ProviderOutcome(context="divergent", provider_thread_id=drop.provider_thread_id, error=answer.error)
        release = [ReleaseSession(host_id=drop.host_id, session_id=drop.session_id)] if resumed_here else []
        return outcome, release
    outcome = ProviderOutcome(
        context="rolled_back", provider_thread_id=drop.provider_thread_id, turns_dropped=answer.turns_dropped
    )
    return outcome, []


def outcome(rb: Rollback, restored: Restored, provider: ProviderOutcome) -> ev.RollbackCompleted:
    """The rollback's last event once the files are restored (``restored``: the checkpoint service's answer)."""
    return rollback.completed(rb, restored, provider)
