"""Rollbacks (requirements L10.5, L10.6): the decisions, pure (their fold is rollback/evolve.py).

A rollback is three facts: ``rollback.started`` (accepted; what will be restored, which runs and
checkpoints it makes obsolete; new runs wait behind it), then, once the checkpoint service has restored
the files, ``rollback.completed`` (what changed, where the undo point is, what became of the provider
conversation) or ``rollback.failed``. Only ``completed`` marks runs ``rolled_back`` and checkpoints stale.

Provider conversation (L10.5): the provider thread the thread's runs went on (:func:`provider_plan`) is asked,
when its session declared the ``rollback`` capability, to drop the turns of the rolled-back runs natively
(``rollback.provider_requested``, then ``rollback.completed`` with ``provider_context=rolled_back``): it is kept,
its coverage loses the dropped runs, and the next run resumes it with no handoff. A provider without the
capability, a node rollback, or a native rollback that failed (``provider_error``) takes the degradation path:
the provider thread is marked ``divergent`` and the live session is let go, so the next run opens a fresh
provider thread with a summary of the kept runs. A provider thread that saw none of the rolled-back runs is
``kept`` as it is.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from treadle.core.checkpoints.model import Checkpoint, FileChange
from treadle.core.checkpoints.results import Restored
from treadle.core.commands import Accepted, Command
from treadle.core.ctx import Ctx
from treadle.core.envelope import Payload
from treadle.core.errors import BadRequest, Conflict, NotFound, check
from treadle.core.ids import has_prefix
from treadle.core.providers.model import ProviderCapabilities, ProviderThread
from treadle.core.rollback.commands import RollbackNode, RollbackThread
from treadle.core.rollback.events import RollbackCompleted, RollbackProviderRequested, RollbackStarted
from treadle.core.rollback.model import Rollback
from treadle.core.run.events import InterruptRequested
from treadle.core.view import ThreadView

ROLLBACK_COMMANDS = (RollbackThread, RollbackNode)
Decision = tuple[list[Payload], Accepted]


def pending(state: ThreadView) -> Rollback | None:
    """The rollback in progress, if any: while it is, no run may start."""
    for r in reversed(state.rollbacks):
        if r.status == "in_progress":
            return r
    return None


def for_command(state: ThreadView, command_id: str) -> Rollback | None:
    for r in reversed(state.rollbacks):
        if r.command_id == command_id:
            return r
    return None


def decide(state: ThreadView, command: Command, ctx: Ctx) -> Decision:
    """A rollback command: ``rollback.started``, or the receipt of the same command seen before."""
    thread = state.thread
    if thread is None:
        raise NotFound(f"thread {command.thread} not found", code="thread_not_found")
    seen = for_command(state, command.id)
    if seen is not None:
        return [], Accepted(seq=state.seq, thread_id=thread.id, duplicate=True, rollback_id=seen.id)
    other = pending(state)
    if other is not None:
        raise Conflict(
            f"rollback {other.id} is still in progress", code="rollback_in_progress", details={"rollback_id": other.id}
        )
    body = command.body
    if isinstance(body, RollbackThread):
        started = _thread_rollback(state, body, ctx)
    elif isinstance(body, RollbackNode):
        started = _node_rollback(state, body, ctx)
    else:
        raise BadRequest(f"not a rollback: {type(body).__name__}")
    events: list[Payload] = [started]
    active = state.active_run
    if started.after_run_id and active is not None and active.attempt.interrupt is None:
        events.append(
            InterruptRequested(run_id=active.id, attempt_id=active.attempt.id, reason="rollback", by=command.user)
        )
    return events, Accepted(seq=0, thread_id=thread.id, rollback_id=started.rollback_id)


def roll_back_active(state: ThreadView, user: str, ctx: Ctx) -> list[Payload]:
    """``rollback_active`` (a LangGraph-style multitask strategy): interrupt the active run, then restore the
    files from before it and mark it ``rolled_back``; the message that asked starts right after."""
    active = state.active_run
    assert active is not None
    other = pending(state)
    if other is not None:
        raise Conflict(
            f"rollback {other.id} is still in progress", code="rollback_in_progress", details={"rollback_id": other.id}
        )
    started = _thread_rollback(state, RollbackThread(to_run_ordinal=active.ordinal - 1, interrupt_active=True), ctx)
    events: list[Payload] = [started]
    if active.attempt.interrupt is None:
        events.append(InterruptRequested(run_id=active.id, attempt_id=active.attempt.id, reason="rollback", by=user))
    return events


def waiting(state: ThreadView, rollback: Rollback) -> bool:
    """A rollback that interrupted the active run waits for it to end: its provider may still be writing."""
    run = state.run(rollback.after_run_id) if rollback.after_run_id else None
    return run is not None and not run.terminal


def _refuse_while_active(state: ThreadView, interrupt_active: bool) -> str | None:
    """The run the rollback must interrupt and wait for (``interrupt_active``), or a refusal."""
    active = state.active_run_id or (state.queue[0] if state.queue else None)
    if active is None:
        return None
    if interrupt_active and state.active_run_id is not None:
        return state.active_run_id  # queued runs stay queued and start after the rollback
    raise Conflict(
        "a run is active or queued; roll back once it has ended (or ask to interrupt it first)",
        code="run_active",
        details={"active_run_id": active},
    )


def _thread_rollback(state: ThreadView, body: RollbackThread, ctx: Ctx) -> RollbackStarted:
    """L10.5: back to the files of run ``to_run_ordinal`` (0: before the first run)."""
    last = state.runs[-1].ordinal if state.runs else 0
    check(0 <= body.to_run_ordinal <= last, BadRequest, f"to_run_ordinal must be 0..{last}", code="invalid_ordinal")
    after = _refuse_while_active(state, body.interrupt_active)
    target = state.checkpoint(body.to_run_ordinal)
    if target is None or target.commit is None:
        raise Conflict(
            f"run {body.to_run_ordinal} has no usable checkpoint to roll back to",
            code="checkpoint_unavailable",
            details={"to_run_ordinal": body.to_run_ordinal},
        )
    later_runs = [
        r.id for r in state.runs if r.ordinal > body.to_run_ordinal and r.status not in ("rolled_back", "queued")
    ]
    later = set(later_runs)
    stale = [
        c.id
        for c in state.checkpoints
        if not c.stale
        and c.id != target.id
        and ((c.scope == "root" and c.ordinal > body.to_run_ordinal) or (c.scope != "root" and c.run_id in later))
    ]
    return RollbackStarted(
        rollback_id=ctx.ids.next("rbk"),
        kind="thread",
        to_run_ordinal=body.to_run_ordinal,
        checkpoint_id=target.id,
        commit=target.commit,
        rolled_back_run_ids=later_runs,
        stale_checkpoint_ids=stale,
        touches_parent_workspace=True,
        after_run_id=after,
    )


def _node_rollback(state: ThreadView, body: RollbackNode, ctx: Ctx) -> RollbackStarted:
    """L10.6: restore a child node's checkpoint. A child shares its parent's workspace here, so restoring it
    always touches the parent's files: the flag says so explicitly, and the parent's later checkpoints go stale."""
    check(has_prefix(body.node_id, "node"), BadRequest, "node_id must be a node id", code="invalid_id")
    check(
        has_prefix(body.checkpoint_id, "ckpt"), BadRequest, "checkpoint_id must be a checkpoint id", code="invalid_id"
    )
    run = next((r for r in reversed(state.runs) if r.node(body.node_id) is not None), None)
    if run is None:
        raise NotFound(f"node {body.node_id} not found", code="node_not_found")
    target = next((c for c in state.checkpoints if c.id == body.checkpoint_id), None)
    if target is None or target.node_id != body.node_id:
        raise NotFound(
            f"checkpoint {body.checkpoint_id} is not a checkpoint of node {body.node_id}", code="checkpoint_not_found"
        )
    if target.stale or target.commit is None:
        raise Conflict(f"checkpoint {body.checkpoint_id} is stale or has no commit", code="checkpoint_unavailable")
    _refuse_while_active(state, False)
    # Descendants: the node's later checkpoints and its sub-scopes, and every checkpoint taken after it
    # on the parent's side (the root checkpoint of its run and of later runs) — their files are gone now.
    stale = [c.id for c in state.checkpoints if not c.stale and c.id != target.id and _after(state, c, target)]
    later_runs = [r.id for r in state.runs if r.ordinal > run.ordinal and r.status != "rolled_back"]
    return RollbackStarted(
        rollback_id=ctx.ids.next("rbk"),
        kind="node",
        node_id=body.node_id,
        checkpoint_id=target.id,
        commit=target.commit,
        rolled_back_run_ids=later_runs,
        stale_checkpoint_ids=stale,
        touches_parent_workspace=True,
    )


def _after(state: ThreadView, c: Checkpoint, target: Checkpoint) -> bool:
    """Was ``c`` captured after ``target``? Checkpoints are appended in the order they were taken."""
    return state.checkpoints.index(c) > state.checkpoints.index(target)


class ProviderPlan(msgspec.Struct, kw_only=True):
    """What a provider-native rollback needs: the provider thread, how many of its last turns belong to the
    rolled-back runs, and what its session declared (and which session holds it now, if any is live)."""

    provider_thread_id: str
    provider: str
    native_ref: str
    turns: int
    capabilities: ProviderCapabilities
    session_id: str | None = None  # the live session attached to it; None: it must be resumed on a host first
    host_id: str | None = None


def provider_plan(state: ThreadView, rollback: Rollback) -> ProviderPlan | None:
    """The provider thread a thread rollback must bring back in line with the files: the one the latest run
    that reached a provider ran on, while it is active. None: nothing to roll back natively (a node rollback,
    no provider thread yet), and the caller keeps today's degradation path."""
    if rollback.kind != "thread" or rollback.to_run_ordinal is None:
        return None
    pth = _current_provider_thread(state)
    if pth is None:
        return None
    last = state.session(pth.session_id or "")
    live = state.live_session
    holder = live if live is not None and state.session_thread(live.id) is pth else None
    return ProviderPlan(
        provider_thread_id=pth.id,
        provider=pth.provider,
        native_ref=pth.native_ref,
        turns=provider_turns_to_drop(state, rollback, pth.id),
        capabilities=last.capabilities if last is not None else ProviderCapabilities(),
        session_id=holder.id if holder else None,
        host_id=holder.host_id if holder else None,
    )


def _current_provider_thread(state: ThreadView) -> ProviderThread | None:
    """The provider thread of the latest attempt that reached a provider: the conversation the thread is in.
    Not active (unusable, divergent already): there is nothing to bring in line natively."""
    for run in reversed(state.runs):
        for att in reversed(run.attempts):
            if att.provider_thread_id is not None:
                pth = state.provider_thread_of(att.provider_thread_id)
                return pth if pth is not None and pth.status == "active" else None
    return None


def provider_turns_to_drop(state: ThreadView, rollback: Rollback, provider_thread_id: str | None = None) -> int:
    """How many turns the provider thread must drop: one per attempt of a rolled-back run that reached it (an
    interrupted attempt and a steering restart each left a turn there). An attempt lost with its runtime is
    not counted: the provider recorded no end of that turn and resumes without it (L9.3)."""
    pth_id = provider_thread_id or (p.id if (p := _current_provider_thread(state)) else None)
    if pth_id is None:
        return 0
    dropped = set(rollback.rolled_back_run_ids)
    return sum(
        1
        for r in state.runs
        if r.id in dropped
        for a in r.attempts
        if a.provider_thread_id == pth_id and a.turn_id is not None and a.status not in ("lost", "pending")
    )


def saw_dropped_runs(state: ThreadView, rollback: Rollback, pth: ProviderThread) -> bool:
    """Does the provider thread remember a rolled-back run: it covered one (ran it, or got it in a handoff),
    or an attempt of one reached it?"""
    dropped = set(rollback.rolled_back_run_ids)
    ordinals = {r.ordinal for r in state.runs if r.id in dropped}
    reached = any(
        a.provider_thread_id == pth.id and a.turn_id is not None
        for r in state.runs
        if r.id in dropped
        for a in r.attempts
    )
    return reached or bool(ordinals & set(pth.covered_ordinals))


def provider_requested(rollback: Rollback, plan: ProviderPlan) -> RollbackProviderRequested:
    assert plan.session_id is not None and plan.host_id is not None
    return RollbackProviderRequested(
        rollback_id=rollback.id,
        provider_thread_id=plan.provider_thread_id,
        session_id=plan.session_id,
        host_id=plan.host_id,
        turns=plan.turns,
    )


class ProviderOutcome(msgspec.Struct, kw_only=True):
    """What became of the provider conversation (``RollbackCompleted.provider_context`` and its details)."""

    context: Literal["kept", "divergent", "rolled_back"] = "divergent"
    provider_thread_id: str | None = None
    turns_dropped: int = 0
    error: str | None = None


def completed(rollback: Rollback, restored: Restored, provider: ProviderOutcome) -> RollbackCompleted:
    return RollbackCompleted(
        rollback_id=rollback.id, undo_ref=restored.undo_ref, undo_commit=restored.undo_commit,
        files=[FileChange(path=f.path, change=f.change, added=f.added, removed=f.removed) for f in restored.files],
        provider_context=provider.context, skipped=[f"{s.path} ({s.reason})" for s in restored.skipped],
        provider_thread_id=provider.provider_thread_id, provider_turns_dropped=provider.turns_dropped,
        provider_error=provider.error,
    )  # fmt: skip


def retire_list(state: ThreadView, rollback: Rollback) -> list[tuple[str, int]]:
    """The (scope, ordinal) of the checkpoints the rollback makes stale: their refs move aside in git."""
    ids = set(rollback.stale_checkpoint_ids)
    return [(c.scope, c.ordinal) for c in state.checkpoints if c.id in ids]
