"""The run supervisor's decisions, as pure functions over the thread state.

The supervisor service does the I/O (checkpoint captures, provider hosts) and calls these to turn
what happened into thread events.
"""

from __future__ import annotations

from . import events as ev
from . import provider_events as pe
from .commands import Ctx
from .entities import FileChange, Run
from .thread import ThreadState

MAX_RECOVERY_ATTEMPTS = 3
_RUN_ENDED = {"completed": ev.RunCompleted, "failed": ev.RunFailed, "interrupted": ev.RunInterrupted,
              "cancelled": ev.RunCancelled}


def pending_attempt(state: ThreadState) -> Run | None:
    """The active run when its current attempt still has to be handed to a provider."""
    run = state.active_run
    if run is None or run.terminal or run.attempt.status != "pending":
        return None
    return run


def baseline_ordinal(state: ThreadState, run: Run) -> int | None:
    """L10.1: before root run N starts, the checkpoint of ordinal N-1 must exist."""
    ordinal = run.ordinal - 1
    found = state.checkpoint(ordinal)
    return None if found is not None and found.commit is not None else ordinal  # an error/missing summary: again


def checkpoint_captured(ctx: Ctx, *, ordinal: int, run_id: str | None, kind: str, status: str,
                        captured) -> ev.CheckpointCaptured:
    """A capture result (ref, commit, tree, unchanged, files), or L10.4's error summary when the capture could
    not be made (``captured`` None)."""
    if captured is None:
        return ev.CheckpointCaptured(checkpoint_id=ctx.ids.next("ckpt"), run_id=run_id, ordinal=ordinal, kind=kind,
                                     status="error")
    return ev.CheckpointCaptured(
        checkpoint_id=ctx.ids.next("ckpt"),
        run_id=run_id,
        scope=captured.scope,
        ordinal=ordinal,
        kind=kind,
        status=status,
        ref=captured.ref,
        commit=captured.commit,
        tree=captured.tree,
        unchanged=captured.unchanged,
        files=[FileChange(path=f.path, change=f.change, added=f.added, removed=f.removed) for f in captured.files],
        skipped=[f"{s.path} ({s.reason})" for s in getattr(captured, "skipped", [])],
        files_total=captured.files_total if captured.files_total > len(captured.files) else None,
    )


def attached(placed) -> ev.ProviderAttached:
    """A placed session (the host's answer) as the thread's fact."""
    return ev.ProviderAttached(
        session_id=placed.session_id,
        provider=placed.provider,
        host_id=placed.host_id,
        boot_id=placed.boot_id,
        provider_thread_id=placed.provider_thread_id,
        native_ref=placed.native_ref,
        resumed=placed.resumed,
        capabilities=placed.capabilities,
    )


class Reaction:
    """What a provider event means for the thread: events to append, and whether the run must finalize."""

    __slots__ = ("events", "finalize", "wait")

    def __init__(self, events: list[ev.Payload] | None = None, finalize: pe.TurnCompleted | None = None,
                 wait: bool = False) -> None:
        self.events = events or []
        self.finalize = finalize
        self.wait = wait  # an earlier event of the same play has not been folded yet: try this one later


IGNORE = Reaction()
WAIT = Reaction(wait=True)


def react(state: ThreadState, event: pe.ProviderEvent, ctx: Ctx) -> Reaction:
    """Map one provider event onto the thread. Events of an attempt that is no longer current, or from a
    session the attempt no longer runs on, are stale (a lost session's last words) and are ignored."""
    body = event.body
    if isinstance(body, pe.SessionStopped):
        return Reaction(session_stopped(state, event.session_id, body.reason, ctx))
    run = state.run(event.run_id or "")
    if run is None or run.terminal or run.attempt.id != event.attempt_id:
        return IGNORE
    att = run.attempt
    if att.status in ("lost", "interrupted", "failed", "cancelled", "completed"):
        return IGNORE
    if isinstance(body, pe.TurnStarted):
        # Only from the session the attempt was handed to: a dead session's late start must not claim it.
        live = state.live_session
        if att.status != "pending" or live is None or live.id != event.session_id:
            return IGNORE
        if event.index > 1:
            return WAIT
        return Reaction([ev.RunStarted(run_id=run.id, attempt_id=att.id, session_id=event.session_id,
                                       turn_id=ctx.ids.next("turn"), native_turn_ref=body.native_turn_ref)])
    if att.session_id != event.session_id:
        return IGNORE  # from a session this attempt no longer runs on (it was handed over again)
    if event.index:
        # After a crash a consumer gets new messages before the unacknowledged ones come back: fold a play's
        # events strictly in their order, or a turn could end before its last text arrived.
        if event.index <= att.provider_index:
            return IGNORE
        if event.index > att.provider_index + 1:
            return WAIT
    if isinstance(body, pe.TextDelta):
        return Reaction([ev.MessageDelta(message_id=body.message_id, run_id=run.id, attempt_id=att.id,
                                         node_id=body.node_id, text=body.text)])
    if isinstance(body, pe.TextCompleted):
        return Reaction([ev.MessageCompleted(message_id=body.message_id, run_id=run.id, attempt_id=att.id,
                                             node_id=body.node_id, text=body.text)])
    if isinstance(body, pe.ToolStarted):
        return Reaction([ev.NodeStarted(node_id=body.node_id, run_id=run.id, attempt_id=att.id,
                                        parent_id=body.parent_id or att.root_node_id, kind=body.kind,
                                        title=body.title, input=body.input)])
    if isinstance(body, pe.ToolCompleted):
        return Reaction([ev.NodeCompleted(node_id=body.node_id, run_id=run.id, status=body.status, output=body.output)])
    if isinstance(body, pe.RequestOpened):
        return Reaction([ev.RequestOpened(request_id=body.request_id, run_id=run.id, node_id=body.node_id,
                                          attempt_id=att.id, kind=body.kind, prompt=body.prompt, detail=body.detail,
                                          native_ref=body.native_ref)])
    if isinstance(body, pe.PlanUpdated):
        return Reaction([ev.PlanUpdated(plan_id=body.plan_id, run_id=run.id, node_id=body.node_id, kind=body.kind,
                                        text=body.text, items=body.items)])
    if isinstance(body, pe.Warning):
        return Reaction([ev.RunWarning(run_id=run.id, message=body.message)])
    if isinstance(body, pe.TurnCompleted):
        return Reaction(finalize=body)
    return IGNORE


def finalize(state: ThreadState, run: Run, turn: pe.TurnCompleted, capture: ev.CheckpointCaptured) -> list[ev.Payload]:
    """L2.3, the finalization barrier, in order: close open assistant messages, close child nodes and
    requests the provider left open, then the run's terminal status with its checkpoint (L2.4: only the
    root turn ends a run). Usually that is the single terminal event; leftovers make it one atomic batch,
    so nothing can observe a terminal run with open parts."""
    att = run.attempt
    status = turn.status if turn.status in _RUN_ENDED else "failed"
    events: list[ev.Payload] = []
    for m in state.messages:
        if m.run_id == run.id and m.attempt_id == att.id and m.status == "streaming":
            events.append(ev.MessageCompleted(message_id=m.id, run_id=run.id, attempt_id=att.id, node_id=m.node_id or "",
                                              text=m.text, status="incomplete"))
    for node in run.nodes:
        if node.attempt_id == att.id and not node.counts_for_run and node.status in ("pending", "running", "waiting"):
            events.append(ev.NodeCompleted(node_id=node.id, run_id=run.id, status="cancelled"))
    for req in state.requests:
        if req.run_id == run.id and req.status == "pending":
            events.append(ev.RequestResolved(request_id=req.id, run_id=run.id, status="cancelled"))
    events.append(_RUN_ENDED[status](run_id=run.id, attempt_id=att.id, checkpoint=capture, error=turn.error))
    return events


def session_stopped(state: ThreadState, session_id: str, reason: str, ctx: Ctx) -> list[ev.Payload]:
    """L9.3: the session is stopped with its reason; the provider thread and its native ref are kept. A run
    that was mid-turn on it gets a recovery attempt (or fails once recovery has been tried enough)."""
    session = state.session(session_id)
    if session is None or session.status != "live":
        return []
    events: list[ev.Payload] = [ev.ProviderStopped(session_id=session_id, reason=reason)]
    run = state.active_run
    if run is None or run.terminal:
        return events
    att = run.attempt
    if att.status not in ("running", "pending") or (att.session_id not in (None, session_id)):
        return events
    if att.status == "pending":
        return events  # not yet handed over: the supervisor places it on a new session
    for req in state.requests:
        if req.run_id == run.id and req.status == "pending":
            events.append(ev.RequestResolved(request_id=req.id, run_id=run.id, status="not_resumable"))
    events.append(ev.AttemptEnded(run_id=run.id, attempt_id=att.id, status="lost", reason=reason))
    for m in state.messages:
        if m.attempt_id == att.id and m.status == "streaming":
            events.append(ev.MessageCompleted(message_id=m.id, run_id=run.id, attempt_id=att.id, node_id=m.node_id or "",
                                              text=m.text, status="incomplete"))
    if len(run.attempts) >= MAX_RECOVERY_ATTEMPTS:
        # L10.4: a provider that may still be writing makes the files unsafe to capture: a missing summary.
        missing = ev.CheckpointCaptured(checkpoint_id=ctx.ids.next("ckpt"), run_id=run.id, ordinal=run.ordinal,
                                        status="missing")
        events.append(ev.RunFailed(run_id=run.id, attempt_id=att.id, checkpoint=missing,
                                   error=f"provider lost {len(run.attempts)} times: {reason}"))
    else:
        events.append(ev.AttemptStarted(run_id=run.id, attempt_id=ctx.ids.next("att"), root_node_id=ctx.ids.next("node"),
                                        reason="provider_recovery"))
    return events
