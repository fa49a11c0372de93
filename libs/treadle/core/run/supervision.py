"""The run supervisor's decisions, as pure functions over the thread state.

The supervisor service does the I/O (checkpoint captures, provider hosts) and calls these to turn
what happened into thread events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import msgspec

from treadle.core import provider_events as pe
from treadle.core.checkpoints.events import CheckpointCaptured
from treadle.core.checkpoints.model import FileChange
from treadle.core.checkpoints.results import Captured
from treadle.core.ctx import Ctx
from treadle.core.disk import DISK_QUOTA
from treadle.core.envelope import PAYLOADS, Payload
from treadle.core.plans.events import PlanUpdated
from treadle.core.providers.events import ProviderAttached, ProviderStopped
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.requests.events import RequestOpened, RequestResolved
from treadle.core.rollback import decide as rollback
from treadle.core.run.events import (
    AttemptEnded,
    AttemptStarted,
    InterruptRequested,
    NodeCompleted,
    NodeStarted,
    RunEnded,
    RunFailed,
    RunQueued,
    RunStarted,
    RunWarning,
    SteerJoined,
)
from treadle.core.run.model import Run
from treadle.core.run.steering import undelivered_steers
from treadle.core.thread.events import MessageCompleted, MessageDelta
from treadle.core.thread.model import Message
from treadle.core.trimming import MAX_EVENT_BYTES, within
from treadle.core.view import ThreadView

MAX_RECOVERY_ATTEMPTS = 3
# The event that ends a run in each status, by its trait (``ends_run``).
_encode = msgspec.json.Encoder().encode
_RUN_ENDED: dict[str, type[RunEnded]] = {
    cls.TRAITS.ends_run: cls for cls in PAYLOADS.values() if cls.TRAITS.ends_run and issubclass(cls, RunEnded)
}


class Placed(Protocol):
    """A session placed by a provider host (``treadle.providers.protocol.SessionPlaced``), as the core reads it."""

    @property
    def session_id(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def host_id(self) -> str: ...
    @property
    def boot_id(self) -> str: ...
    @property
    def provider_thread_id(self) -> str: ...
    @property
    def native_ref(self) -> str: ...
    @property
    def resumed(self) -> bool: ...
    @property
    def capabilities(self) -> ProviderCapabilities: ...


class Steer:
    """Deliver a steering message natively into the running turn (L3.2)."""

    def __init__(self, run: Run, message: Message) -> None:
        self.run, self.message = run, message


class Interrupt:
    """Send the requested interrupt: ``native`` or by stopping the session (L8.3)."""

    def __init__(self, run: Run, path: str) -> None:
        self.run, self.path = run, path


def owed(state: ThreadView, ctx: Ctx) -> tuple[list[Payload], list[Steer | Interrupt]]:
    """What the running attempt is still owed: steers to deliver, an interrupt to send (and the events that
    decide them, e.g. a restart-steer turning into an interrupt request). Empty once the state shows it done."""
    run = state.active_run
    session = state.live_session
    if run is None or run.terminal or run.attempt.status != "running" or session is None:
        return [], []
    att, caps = run.attempt, session.capabilities
    if caps is None or att.session_id != session.id:
        return [], []
    events: list[Payload] = []
    actions: list[Steer | Interrupt] = []
    if att.interrupt is None:
        steers = undelivered_steers(state, run)
        native = [m for m in steers if m.steering == "native"] if caps.active_steering else []
        actions += [Steer(run, m) for m in native]
        if len(native) < len(steers) and caps.interrupt:
            events.append(InterruptRequested(run_id=run.id, attempt_id=att.id, reason="steering"))
            actions.append(Interrupt(run, "native"))
        # A provider that can neither steer nor interrupt gets its steers as the next run (``finalize``).
    elif att.interrupt == "requested":
        actions.append(Interrupt(run, "native" if caps.interrupt else "stop_session"))
    return events, actions


def pending_attempt(state: ThreadView) -> Run | None:
    """The active run when its current attempt still has to be handed to a provider."""
    run = state.active_run
    if run is None or run.terminal or run.attempt.status != "pending":
        return None
    return run


def baseline_ordinal(state: ThreadView, run: Run) -> int | None:
    """L10.1: before root run N starts, the checkpoint of ordinal N-1 must exist."""
    ordinal = run.ordinal - 1
    found = state.checkpoint(ordinal)
    return None if found is not None and found.commit is not None else ordinal  # an error/missing summary: again


def checkpoint_captured(
    ctx: Ctx, *, ordinal: int, run_id: str | None, kind: str, status: str, captured: Captured | None
) -> CheckpointCaptured:
    """A capture result (ref, commit, tree, unchanged, files), or L10.4's error summary when the capture could
    not be made (``captured`` None)."""
    if captured is None:
        return CheckpointCaptured(
            checkpoint_id=ctx.ids.next("ckpt"), run_id=run_id, ordinal=ordinal, kind=kind, status="error"
        )
    return CheckpointCaptured(
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


def attached(placed: Placed) -> ProviderAttached:
    """A placed session (the host's answer) as the thread's fact."""
    return ProviderAttached(
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

    __slots__ = ("events", "finalize", "run_id", "wait")

    def __init__(
        self,
        events: list[Payload] | None = None,
        finalize: pe.TurnCompleted | None = None,
        wait: bool = False,
        run_id: str | None = None,
    ) -> None:
        self.events = events or []
        self.finalize = finalize  # the root turn ended: run the barrier for ``run_id`` (after ``events``)
        self.run_id = run_id
        self.wait = wait  # an earlier event of the same play has not been folded yet: try this one later


IGNORE = Reaction()
WAIT = Reaction(wait=True)


def react(state: ThreadView, event: pe.ProviderEvent, ctx: Ctx) -> Reaction:
    """Map one provider event onto the thread. Events of an attempt that is no longer current, or from a
    session the attempt no longer runs on, are stale (a lost session's last words) and are ignored."""
    body = event.body
    if isinstance(body, pe.SessionStopped):
        return session_stopped(state, event.session_id, body.reason, ctx, body.detail)
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
        return Reaction(
            [
                RunStarted(
                    run_id=run.id,
                    attempt_id=att.id,
                    session_id=event.session_id,
                    turn_id=ctx.ids.next("turn"),
                    native_turn_ref=body.native_turn_ref,
                )
            ]
        )
    if att.session_id != event.session_id:
        live = state.live_session
        if att.status == "pending" and live is not None and live.id == event.session_id:
            if event.index > 1:
                # L9.3: the play's start is not folded yet (a crashed supervisor's unacknowledged start comes back
                # after the play's later events): ignoring these would lose them and leave the run waiting forever
                return WAIT
            if isinstance(body, pe.TurnCompleted):
                return never_started(state, run, body, ctx)
        return IGNORE  # from a session this attempt no longer runs on (it was handed over again)
    if event.index:
        # After a crash a consumer gets new messages before the unacknowledged ones come back: fold a play's
        # events strictly in their order, or a turn could end before its last text arrived.
        if event.index <= att.provider_index:
            return IGNORE
        if event.index > att.provider_index + 1:
            return WAIT
    if isinstance(body, pe.TextDelta):
        return Reaction(
            [
                MessageDelta(
                    message_id=body.message_id, run_id=run.id, attempt_id=att.id, node_id=body.node_id, text=body.text
                )
            ]
        )
    if isinstance(body, pe.TextCompleted):
        return Reaction([_completion(run, body)])
    if isinstance(body, pe.SteerJoined):
        # Recorded even when it names no steer of this run (its fold then changes nothing): the play's next
        # events wait for this one to be folded.
        return Reaction([SteerJoined(run_id=run.id, attempt_id=att.id, message_id=body.message_id)])
    if isinstance(body, pe.ToolStarted):
        return Reaction(
            [
                NodeStarted(
                    node_id=body.node_id,
                    run_id=run.id,
                    attempt_id=att.id,
                    parent_id=body.parent_id or att.root_node_id,
                    kind=body.kind,
                    title=body.title,
                    input=body.input,
                    native_thread_ref=body.native_thread_ref,
                )
            ]
        )
    if isinstance(body, pe.ToolCompleted):
        return Reaction([NodeCompleted(node_id=body.node_id, run_id=run.id, status=body.status, output=body.output)])
    if isinstance(body, pe.RequestOpened):
        return Reaction(
            [
                RequestOpened(
                    request_id=body.request_id,
                    run_id=run.id,
                    node_id=body.node_id,
                    attempt_id=att.id,
                    parent_id=body.parent_id,
                    kind=body.kind,
                    prompt=body.prompt,
                    detail=body.detail,
                    native_ref=body.native_ref,
                    description=body.description,
                    command=body.command,
                    cwd=body.cwd,
                    files=body.files,
                    questions=body.questions,
                )
            ]
        )
    if isinstance(body, pe.PlanUpdated):
        return Reaction(
            [
                PlanUpdated(
                    plan_id=body.plan_id,
                    run_id=run.id,
                    node_id=body.node_id,
                    kind=body.kind,
                    text=body.text,
                    items=body.items,
                )
            ]
        )
    if isinstance(body, pe.Warning):
        return Reaction([RunWarning(run_id=run.id, message=body.message)])
    if isinstance(body, pe.TurnCompleted):
        return Reaction(finalize=body, run_id=run.id)
    return IGNORE


def recovery_spent(run: Run) -> int:
    """What the recovery budget has counted, the current attempt included: it and the earlier attempts the
    provider lost or did not start. An attempt a steer restarted (L3.3) is the user's doing and costs nothing: a
    run steered twice still has its recoveries."""
    return 1 + sum(1 for a in run.attempts if a is not run.attempt and a.status in ("lost", "failed"))


def _again(run: Run, ctx: Ctx, reason: Literal["retry", "provider_recovery"]) -> AttemptStarted:
    """A new attempt at the run's current one, with the same input."""
    att = run.attempt
    return AttemptStarted(
        run_id=run.id,
        attempt_id=ctx.ids.next("att"),
        root_node_id=ctx.ids.next("node"),
        reason=reason,
        message_ids=list(att.message_ids),
        script=att.script,
    )


def never_started(state: ThreadView, run: Run, turn: pe.TurnCompleted, ctx: Ctx) -> Reaction:
    """The attempt's turn ended as the first thing its play reported: the provider refused or failed it before it
    started. Ignored, it left the attempt pending for ever (nothing else reports on it). A failed one is tried
    again in a new attempt, as a lost one is (L9.3: nothing of it ran, so nothing is played twice), and fails
    the run once the run has had its attempts (L2.5); any other end finalizes the run as reported (an interrupt
    that came first, L8.2)."""
    att = run.attempt
    if turn.status != "failed":
        return Reaction(finalize=turn, run_id=run.id)
    if (spent := recovery_spent(run)) >= MAX_RECOVERY_ATTEMPTS:
        error = f"the provider did not start the turn ({spent} attempts): {turn.error or 'no reason'}"
        return Reaction(finalize=pe.TurnCompleted(status="failed", error=error), run_id=run.id)
    return Reaction(
        [
            AttemptEnded(run_id=run.id, attempt_id=att.id, status="failed", reason=turn.error or "not started"),
            _again(run, ctx, "retry"),
        ]
    )


def _close_messages(state: ThreadView, run: Run, completed: str | None = None) -> list[Payload]:
    """The attempt's messages still streaming, closed as incomplete (but ``completed``, which its end carries)."""
    att = run.attempt
    return [
        within(
            MessageCompleted(
                message_id=m.id,
                run_id=run.id,
                attempt_id=att.id,
                node_id=m.node_id or "",
                text=m.text,
                status="incomplete",
            ),
            MAX_EVENT_BYTES,  # the text streamed in pieces: together they can be more than one event holds
        )
        for m in state.run_messages(run.id)
        if m.attempt_id == att.id and m.status == "streaming" and m.id != completed
    ]


def _close_children(state: ThreadView, run: Run) -> list[Payload]:
    """Child nodes and requests the ended attempt left open (L2.3), closed as cancelled."""
    att = run.attempt
    events: list[Payload] = []
    for node in run.nodes:
        open_ = node.status in ("pending", "running", "waiting") and node.owner == "provider"  # not a delegated task
        if node.attempt_id == att.id and not node.counts_for_run and open_:
            events.append(NodeCompleted(node_id=node.id, run_id=run.id, status="cancelled"))
    for req in state.requests:
        if req.run_id == run.id and req.status == "pending":
            events.append(RequestResolved(request_id=req.id, run_id=run.id, status="cancelled"))
    return events


def turn_status(state: ThreadView, run: Run, turn: pe.TurnCompleted) -> str:
    """The root turn's terminal status. A provider with weak terminal status may report an interrupted turn
    as completed: once the interrupt reached it, interrupted is the truth."""
    status = turn.status if turn.status in _RUN_ENDED else "failed"
    session = state.session(run.attempt.session_id or "")
    weak = session is not None and session.capabilities is not None and session.capabilities.terminal_status != "strong"
    if status == "completed" and weak and run.attempt.interrupt in ("native", "stop_session"):
        return "interrupted"
    return status


def _meaningful(state: ThreadView, run: Run) -> bool:
    """L3.4: a run has answered once an assistant message of it completed with text."""
    return any(m.role == "assistant" and m.status == "completed" and m.text.strip() for m in state.run_messages(run.id))


def restarts(state: ThreadView, run: Run, turn: pe.TurnCompleted) -> bool:
    """L3.3: the turn was interrupted for steering and the run has not answered yet: same run, new attempt."""
    return (
        run.attempt.interrupt_reason == "steering"
        and turn_status(state, run, turn) == "interrupted"
        and bool(undelivered_steers(state, run))
        and not _meaningful(state, run)
    )


def restart(state: ThreadView, run: Run, ctx: Ctx) -> list[Payload]:
    """Close the interrupted attempt (kept in the graph for audit, L3.7) and start one carrying the steers."""
    att = run.attempt
    steers = undelivered_steers(state, run)
    events = _close_messages(state, run) + _close_children(state, run)
    events.append(AttemptEnded(run_id=run.id, attempt_id=att.id, status="interrupted", reason="steering"))
    events.append(
        AttemptStarted(
            run_id=run.id,
            attempt_id=ctx.ids.next("att"),
            root_node_id=ctx.ids.next("node"),
            reason="steering_restart",
            message_ids=[m.id for m in steers],
            script=steers[-1].script,
        )
    )
    return events


def carried_message(state: ThreadView, reaction: Reaction, then: pe.ProviderEvent | None) -> MessageCompleted | None:
    """The message completion ``reaction`` appends, when the next event of the same burst (``then``) ends the turn
    and the run's end can carry it (``RunEnded.message``): one event instead of two, folding the same. Not when an
    interrupt was asked: a restart (L3.3) or a weak provider's status reads the messages folded before the end."""
    if then is None or not isinstance(then.body, pe.TurnCompleted) or reaction.finalize is not None:
        return None
    if len(reaction.events) != 1 or not isinstance(message := reaction.events[0], MessageCompleted):
        return None
    run = state.run(message.run_id)
    if run is None or run.terminal or run.attempt.id != message.attempt_id or then.attempt_id != message.attempt_id:
        return None
    return message if run.attempt.interrupt is None else None


def _completion(run: Run, body: pe.TextCompleted) -> MessageCompleted:
    return MessageCompleted(
        message_id=body.message_id, run_id=run.id, attempt_id=run.attempt.id, node_id=body.node_id, text=body.text
    )


class StartedAndEnded:
    """A turn whose start and end the provider reported in one burst (``started_and_ended``): the run's end
    carries its start (``RunEnded.started``) and its one message's completion (``message``), if any."""

    __slots__ = ("end", "message", "parts", "started")

    def __init__(self, started: RunStarted, message: MessageCompleted | None, end: pe.ProviderEvent) -> None:
        self.started, self.message, self.end = started, message, end
        self.parts = 3 if message is not None else 2  # the provider events it folds: start, [completion,] end


def started_and_ended(
    state: ThreadView, reaction: Reaction, start: pe.ProviderEvent, rest: Sequence[pe.ProviderEvent]
) -> StartedAndEnded | None:
    """When ``reaction`` is the run's start (``start`` folded) and the next parts of the same provider message
    (``rest``) are the turn's end, maybe after one message's completion, all in order (consecutive indexes, same
    attempt and session): one event, the run's end carrying both, folding as the three did. A start reported
    alone is not held back: it is appended at once (users see the run running)."""
    if reaction.finalize is not None or len(reaction.events) != 1 or not rest:
        return None
    started = reaction.events[0]
    if not isinstance(started, RunStarted) or start.index < 1:
        return None
    follow = list(rest[:2]) if isinstance(rest[0].body, pe.TextCompleted) else [rest[0]]
    if not isinstance(follow[-1].body, pe.TurnCompleted):
        return None
    for i, part in enumerate(follow, start=1):
        if (part.index, part.attempt_id, part.session_id) != (start.index + i, started.attempt_id, start.session_id):
            return None
    run = state.run(started.run_id)
    if run is None or run.terminal or run.attempt.id != started.attempt_id or run.attempt.interrupt is not None:
        return None  # an interrupt asked already: its status and a restart read what was folded before the end
    body = follow[0].body
    return StartedAndEnded(started, _completion(run, body) if isinstance(body, pe.TextCompleted) else None, follow[-1])


def started_with_text(
    state: ThreadView, reaction: Reaction, start: pe.ProviderEvent, rest: Sequence[pe.ProviderEvent]
) -> MessageDelta | None:
    """When ``reaction`` is the run's start (``start`` folded) and the next part of the same provider message
    (``rest``) is the turn's first text, in order (the next index, same attempt and session): one event, that
    text's ``message.delta`` carrying the start (``MessageDelta.started``), folding as the two did. A provider
    host holds a start briefly for the first output (``provider_host.publisher``)."""
    if reaction.finalize is not None or len(reaction.events) != 1 or not rest:
        return None
    started, text = reaction.events[0], rest[0]
    if not isinstance(started, RunStarted) or start.index < 1 or not isinstance(text.body, pe.TextDelta):
        return None
    if (text.index, text.attempt_id, text.session_id) != (start.index + 1, started.attempt_id, start.session_id):
        return None
    run = state.run(started.run_id)
    if run is None or run.terminal or run.attempt.id != started.attempt_id:
        return None
    body = text.body
    delta = MessageDelta(
        message_id=body.message_id,
        run_id=run.id,
        attempt_id=started.attempt_id,
        node_id=body.node_id,
        text=body.text,
        started=started,
    )
    return delta if len(_encode(delta)) <= MAX_EVENT_BYTES else None  # too big together: two events, as before


def finalize(
    state: ThreadView,
    run: Run,
    turn: pe.TurnCompleted,
    capture: CheckpointCaptured,
    ctx: Ctx | None = None,
    carried: MessageCompleted | None = None,
    started: RunStarted | None = None,
) -> list[Payload]:
    """L2.3, the finalization barrier, in order: close open assistant messages, close child nodes and
    requests the provider left open, then the run's terminal status with its checkpoint (L2.4: only the
    root turn ends a run). Usually that is the single terminal event; leftovers make it one atomic batch,
    so nothing can observe a terminal run with open parts. Steers the turn never took become the next run,
    superseding this one and starting at once (L3.4). ``carried``: the turn's last message completion, not
    appended yet (``carried_message``): the terminal event carries it, or it goes first when both would not
    fit in one event. ``started``: the run's start, not appended yet (``started_and_ended``): the terminal event
    carries it too, or it goes first (before ``carried``) when they would not fit in one event."""
    att = run.attempt
    status = turn_status(state, run, turn)
    events = _close_messages(state, run, carried.message_id if carried else None) + _close_children(state, run)
    error = turn.error if status != "interrupted" or turn.error else None
    end = _RUN_ENDED[status](
        run_id=run.id, attempt_id=att.id, checkpoint=capture, error=error, message=carried, started=started
    )
    if (carried is not None or started is not None) and len(_encode(end)) > MAX_EVENT_BYTES:
        end = msgspec.structs.replace(end, message=None, started=None)
        events[:0] = [e for e in (started, carried) if e is not None]
    events.append(end)
    steers = undelivered_steers(state, run)
    if steers and ctx is not None:
        ids = ctx.ids
        held = rollback.pending(state) is not None  # a rollback waiting for this run goes first
        events.append(
            RunQueued(
                run_id=ids.next("run"),
                ordinal=len(state.runs) + 1,
                message_id=steers[0].id,
                text="\n\n".join(m.text for m in steers),
                author=steers[0].author,
                root_node_id=ids.next("node"),
                attempt_id=ids.next("att"),
                mode="steer_active",
                disposition="superseding",
                dispatched=not held,
                front=held,
                provider=run.provider,
                model=run.model,
                script=steers[-1].script,
                supersedes_run_id=run.id,
            )
        )
    return events


def session_stopped(state: ThreadView, session_id: str, reason: str, ctx: Ctx, detail: str | None = None) -> Reaction:
    """L9.3: the session is stopped with its reason; the provider thread and its native ref are kept. A run
    that was mid-turn on it gets a recovery attempt (or fails once recovery has been tried enough) — unless
    the session was stopped to interrupt that run (L8.3): then the run ends interrupted."""
    session = state.session(session_id)
    if session is None or session.status != "live":
        return IGNORE
    events: list[Payload] = [ProviderStopped(session_id=session_id, reason=reason, detail=detail)]
    run = state.active_run
    if run is None or run.terminal:
        return Reaction(events)
    att = run.attempt
    if att.status not in ("running", "pending") or (att.session_id not in (None, session_id)):
        return Reaction(events)
    if att.status == "pending":
        return Reaction(events)  # not yet handed over: the supervisor places it on a new session
    if att.interrupt is not None:  # stopped to interrupt it (L8.3), or asked to stop anyway
        return Reaction(events, finalize=pe.TurnCompleted(status="interrupted"), run_id=run.id)
    for req in state.requests:
        if req.run_id == run.id and req.status == "pending":
            events.append(RequestResolved(request_id=req.id, run_id=run.id, status="not_resumable"))
    events.append(AttemptEnded(run_id=run.id, attempt_id=att.id, status="lost", reason=reason))
    events += _close_messages(state, run)
    if reason == DISK_QUOTA:  # ended for writing past the tenant's disk budget: a retry would write it again
        missing = CheckpointCaptured(
            checkpoint_id=ctx.ids.next("ckpt"), run_id=run.id, ordinal=run.ordinal, status="missing"
        )
        error = f"{DISK_QUOTA}: " + (detail or "over the tenant's disk budget")
        events.append(RunFailed(run_id=run.id, attempt_id=att.id, checkpoint=missing, error=error))
    elif (spent := recovery_spent(run)) >= MAX_RECOVERY_ATTEMPTS:
        # L10.4: a provider that may still be writing makes the files unsafe to capture: a missing summary.
        missing = CheckpointCaptured(
            checkpoint_id=ctx.ids.next("ckpt"), run_id=run.id, ordinal=run.ordinal, status="missing"
        )
        events.append(
            RunFailed(
                run_id=run.id,
                attempt_id=att.id,
                checkpoint=missing,
                error=f"provider lost {spent} times: {reason}" + (f" ({detail})" if detail else ""),
            )
        )
    else:
        events.append(_again(run, ctx, "provider_recovery"))
    return Reaction(events)
