"""The app thread aggregate: its folded state and ``evolve``.

One fold serves every reader: the coordinator and the supervisor decide on it, the projection writer
stores it in Redis as the thread's read model, and ``treadle check`` compares the two.
"""

from __future__ import annotations

import msgspec

from . import events as ev
from . import rollback
from .entities import (
    Activity,
    Attempt,
    Checkpoint,
    ExecutionNode,
    Message,
    Plan,
    ProviderSession,
    ProviderThread,
    Run,
    Rollback,
    RuntimeRequest,
    Thread,
)

PROVIDER_CAUSE = "prov:"


def provider_cause(seq: int, index: int = 0) -> str:
    """The causation id of events derived from provider-stream message ``seq`` (its ``index`` in its turn)."""
    return f"{PROVIDER_CAUSE}{seq}:{index}"


class ThreadState(msgspec.Struct, kw_only=True):
    thread: Thread | None = None
    seq: int = 0
    messages: list[Message] = msgspec.field(default_factory=list)
    runs: list[Run] = msgspec.field(default_factory=list)
    queue: list[str] = msgspec.field(default_factory=list)
    active_run_id: str | None = None
    sessions: list[ProviderSession] = msgspec.field(default_factory=list)
    provider_threads: list[ProviderThread] = msgspec.field(default_factory=list)
    requests: list[RuntimeRequest] = msgspec.field(default_factory=list)
    plans: list[Plan] = msgspec.field(default_factory=list)
    checkpoints: list[Checkpoint] = msgspec.field(default_factory=list)
    activity: list[Activity] = msgspec.field(default_factory=list)
    provider_seq: int = 0  # last provider-stream sequence folded in (supervisor idempotency)
    rollbacks: list[Rollback] = msgspec.field(default_factory=list)  # L10.5/L10.6, in the order requested

    # --- lookups (reverse scans: the newest entity is nearly always the one asked for) ---

    def run(self, run_id: str) -> Run | None:
        for r in reversed(self.runs):
            if r.id == run_id:
                return r
        return None

    @property
    def active_run(self) -> Run | None:
        return self.run(self.active_run_id) if self.active_run_id else None

    def message(self, message_id: str) -> Message | None:
        for m in reversed(self.messages):
            if m.id == message_id:
                return m
        return None

    def message_for_command(self, command_id: str) -> Message | None:
        for m in reversed(self.messages):
            if m.command_id == command_id:
                return m
        return None

    def checkpoint(self, ordinal: int, scope: str = "root") -> Checkpoint | None:
        for c in reversed(self.checkpoints):
            if c.ordinal == ordinal and c.scope == scope and not c.stale:
                return c
        return None

    def session(self, session_id: str) -> ProviderSession | None:
        for s in reversed(self.sessions):
            if s.id == session_id:
                return s
        return None

    @property
    def live_session(self) -> ProviderSession | None:
        s = self.sessions[-1] if self.sessions else None
        return s if s is not None and s.status == "live" else None

    @property
    def provider_thread(self) -> ProviderThread | None:
        for p in reversed(self.provider_threads):
            if p.status == "active":
                return p
        return None

    def request(self, request_id: str) -> RuntimeRequest | None:
        for r in reversed(self.requests):
            if r.id == request_id:
                return r
        return None


def evolve(state: ThreadState, e: ev.Envelope) -> ThreadState:
    """Fold one event into ``state`` (in place) and return it. Events at or below ``state.seq`` are no-ops."""
    if e.seq is not None:
        if e.seq <= state.seq:
            return state
        state.seq = e.seq
    handler = _HANDLERS.get(type(e.data))
    if handler is not None:
        handler(state, e, e.data)
    if e.causation_id and e.causation_id.startswith(PROVIDER_CAUSE):
        seq, _, index = e.causation_id[len(PROVIDER_CAUSE):].partition(":")
        state.provider_seq = max(state.provider_seq, int(seq))
        run = state.run(getattr(e.data, "run_id", "") or "")
        if index and run is not None:
            run.attempt.provider_index = max(run.attempt.provider_index, int(index))
    return state


def fold(events, state: ThreadState | None = None) -> ThreadState:
    state = state or ThreadState()
    for e in events:
        evolve(state, e)
    return state


# --- handlers ------------------------------------------------------------------------------------


def _activity(state: ThreadState, e: ev.Envelope, kind: str, run_id: str, node_id: str | None, summary: str) -> None:
    state.activity.append(Activity(at=e.at, kind=kind, run_id=run_id, node_id=node_id, summary=summary))


def _thread_created(state: ThreadState, e: ev.Envelope, d: ev.ThreadCreated) -> None:
    state.thread = Thread(
        id=d.thread_id,
        tenant=e.tenant,
        title=d.title,
        provider=d.provider,
        model=d.model,
        runtime_mode=d.runtime_mode,  # type: ignore[arg-type]
        workspace=d.workspace,
        created_by=d.created_by,
        created_at=e.at,
        command_id=e.command_id,
    )


def _message_created(state: ThreadState, e: ev.Envelope, d: ev.MessageCreated) -> None:
    state.messages.append(
        Message(
            id=d.message_id,
            role=d.role,  # type: ignore[arg-type]
            text=d.text,
            run_id=d.run_id,
            author=d.author,
            created_at=e.at,
            command_id=e.command_id,
        )
    )


def _message_delta(state: ThreadState, e: ev.Envelope, d: ev.MessageDelta) -> None:
    m = state.message(d.message_id)
    if m is None:
        state.messages.append(
            Message(
                id=d.message_id,
                role="assistant",
                text=d.text,
                status="streaming",
                run_id=d.run_id,
                attempt_id=d.attempt_id,
                node_id=d.node_id,
                created_at=e.at,
            )
        )
    else:
        m.text += d.text


def _message_completed(state: ThreadState, e: ev.Envelope, d: ev.MessageCompleted) -> None:
    m = state.message(d.message_id)
    if m is None:
        m = Message(
            id=d.message_id,
            role="assistant",
            run_id=d.run_id,
            attempt_id=d.attempt_id,
            node_id=d.node_id,
            created_at=e.at,
        )
        state.messages.append(m)
    m.text = d.text
    m.status = d.status  # type: ignore[assignment]


def _run_queued(state: ThreadState, e: ev.Envelope, d: ev.RunQueued) -> None:
    state.messages.append(Message(id=d.message_id, role="user", text=d.text, run_id=d.run_id, author=d.author,
                                  created_at=e.at, command_id=e.command_id))
    run = Run(
        id=d.run_id,
        ordinal=d.ordinal,
        message_id=d.message_id,
        mode=d.mode,  # type: ignore[arg-type]
        disposition=d.disposition,
        provider=d.provider,
        model=d.model,
        script=d.script,
        queued_at=e.at,
    )
    run.attempts.append(Attempt(id=d.attempt_id, run_id=d.run_id, number=1, root_node_id=d.root_node_id))
    run.nodes.append(
        ExecutionNode(
            id=d.root_node_id, run_id=d.run_id, attempt_id=d.attempt_id, kind="root_turn", counts_for_run=True
        )
    )
    state.runs.append(run)
    if d.dispatched:
        run.status = "starting"
        state.active_run_id = d.run_id
    else:
        state.queue.append(d.run_id)


def _run_dispatched(state: ThreadState, e: ev.Envelope, d: ev.RunDispatched) -> None:
    run = state.run(d.run_id)
    if run is None or run.status != "queued":
        return
    if d.run_id in state.queue:
        state.queue.remove(d.run_id)
    run.status = "starting"
    state.active_run_id = d.run_id


def _run_started(state: ThreadState, e: ev.Envelope, d: ev.RunStarted) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    run.status = "running"
    run.started_at = run.started_at or e.at
    att = run.attempt
    att.status = "running"
    att.session_id = d.session_id
    att.turn_id = d.turn_id
    att.native_turn_ref = d.native_turn_ref
    att.started_at = e.at
    pth = state.provider_thread
    att.provider_thread_id = pth.id if pth else None
    root = run.node(att.root_node_id)
    if root is not None:
        root.status = "running"
        root.started_at = e.at


def _run_ended(status: str):
    def handle(state: ThreadState, e: ev.Envelope, d: ev.RunEnded) -> None:
        run = state.run(d.run_id)
        if run is None or run.terminal:
            return
        if d.checkpoint is not None:
            _checkpoint_captured(state, e, d.checkpoint)
            run.checkpoint_id = d.checkpoint.checkpoint_id
        run.status = status  # type: ignore[assignment]
        run.ended_at = e.at
        run.error = d.error
        for att in run.attempts:
            if att.id == d.attempt_id:
                att.status = status if status != "rolled_back" else att.status  # type: ignore[assignment]
                att.ended_at = e.at
                root = run.node(att.root_node_id)
                if root is not None:
                    root.status = "completed" if status == "completed" else status  # type: ignore[assignment]
                    root.ended_at = e.at
        if state.active_run_id == d.run_id:
            state.active_run_id = None
        if d.run_id in state.queue:
            state.queue.remove(d.run_id)
        pth = state.provider_thread
        if pth is not None and status == "completed" and run.ordinal not in pth.covered_ordinals:
            pth.covered_ordinals.append(run.ordinal)

    return handle


def _attempt_started(state: ThreadState, e: ev.Envelope, d: ev.AttemptStarted) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    run.attempts.append(
        Attempt(id=d.attempt_id, run_id=d.run_id, number=len(run.attempts) + 1, reason=d.reason, root_node_id=d.root_node_id)  # type: ignore[arg-type]
    )
    run.nodes.append(
        ExecutionNode(id=d.root_node_id, run_id=d.run_id, attempt_id=d.attempt_id, kind="root_turn", counts_for_run=True)
    )
    run.status = "starting"


def _attempt_ended(state: ThreadState, e: ev.Envelope, d: ev.AttemptEnded) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    for att in run.attempts:
        if att.id == d.attempt_id:
            att.status = d.status  # type: ignore[assignment]
            att.error = d.reason
            att.ended_at = e.at
            for node in run.nodes:
                if node.attempt_id == att.id and node.status in ("pending", "running", "waiting"):
                    node.status = "interrupted" if d.status == "interrupted" else "failed"
                    node.ended_at = e.at
    _activity(state, e, "attempt.ended", d.run_id, None, f"attempt {d.status}: {d.reason or ''}".strip())


def _node_started(state: ThreadState, e: ev.Envelope, d: ev.NodeStarted) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    run.nodes.append(
        ExecutionNode(
            id=d.node_id,
            run_id=d.run_id,
            attempt_id=d.attempt_id,
            kind=d.kind,  # type: ignore[arg-type]
            parent_id=d.parent_id,
            status="running",
            title=d.title,
            input=d.input,
            started_at=e.at,
        )
    )
    _activity(state, e, f"{d.kind}.started", d.run_id, d.node_id, d.title)


def _node_completed(state: ThreadState, e: ev.Envelope, d: ev.NodeCompleted) -> None:
    run = state.run(d.run_id)
    node = run.node(d.node_id) if run else None
    if node is None:
        return
    node.status = d.status  # type: ignore[assignment]
    node.output = d.output
    node.ended_at = e.at
    _activity(state, e, f"{node.kind}.{d.status}", d.run_id, d.node_id, node.title)


def _provider_attached(state: ThreadState, e: ev.Envelope, d: ev.ProviderAttached) -> None:
    for s in state.sessions:
        if s.status == "live":
            s.status = "stopped"
            s.reason = s.reason or "replaced"
    state.sessions.append(
        ProviderSession(id=d.session_id, provider=d.provider, host_id=d.host_id, boot_id=d.boot_id, capabilities=d.capabilities)
    )
    pth = None
    for p in state.provider_threads:
        if p.id == d.provider_thread_id:
            pth = p
    if pth is None:
        pth = ProviderThread(id=d.provider_thread_id, provider=d.provider, native_ref=d.native_ref)
        state.provider_threads.append(pth)
    pth.session_id = d.session_id
    pth.status = "active"


def _provider_stopped(state: ThreadState, e: ev.Envelope, d: ev.ProviderStopped) -> None:
    s = state.session(d.session_id)
    if s is not None and s.status == "live":
        s.status = "stopped"
        s.reason = d.reason
    run_id = state.active_run_id or (state.runs[-1].id if state.runs else "")
    _activity(state, e, "runtime.warning", run_id, None, f"provider session stopped: {d.reason}")


def _request_opened(state: ThreadState, e: ev.Envelope, d: ev.RequestOpened) -> None:
    state.requests.append(
        RuntimeRequest(
            id=d.request_id,
            run_id=d.run_id,
            node_id=d.node_id,
            kind=d.kind,  # type: ignore[arg-type]
            native_ref=d.native_ref,
            prompt=d.prompt,
            detail=d.detail,
            created_at=e.at,
        )
    )
    run = state.run(d.run_id)
    if run is not None:
        run.nodes.append(
            ExecutionNode(
                id=d.node_id,
                run_id=d.run_id,
                attempt_id=d.attempt_id,
                kind="user_input" if d.kind == "user_input" else "approval",
                parent_id=run.attempt.root_node_id,
                status="waiting",
                title=d.prompt,
                started_at=e.at,
            )
        )
        if not run.terminal:
            run.status = "waiting"
    _activity(state, e, "request.opened", d.run_id, d.node_id, d.prompt)


def _request_resolved(state: ThreadState, e: ev.Envelope, d: ev.RequestResolved) -> None:
    req = state.request(d.request_id)
    if req is None:
        return
    req.status = d.status  # type: ignore[assignment]
    req.response = d.response
    run = state.run(d.run_id)
    if run is not None:
        node = run.node(req.node_id)
        if node is not None:
            node.status = "completed" if d.status == "resolved" else "cancelled"
            node.ended_at = e.at
        if run.status == "waiting" and not any(r.status == "pending" and r.run_id == run.id for r in state.requests):
            run.status = "running"
    _activity(state, e, "request.resolved", d.run_id, req.node_id, d.status)


def _plan_updated(state: ThreadState, e: ev.Envelope, d: ev.PlanUpdated) -> None:
    for p in state.plans:
        if p.id == d.plan_id:
            p.text = d.text
            p.items = list(d.items)
            break
    else:
        state.plans.append(
            Plan(id=d.plan_id, run_id=d.run_id, node_id=d.node_id, kind=d.kind, text=d.text, items=list(d.items))  # type: ignore[arg-type]
        )
    _activity(state, e, "plan.updated", d.run_id, d.node_id, d.kind)


def _checkpoint_captured(state: ThreadState, e: ev.Envelope, d: ev.CheckpointCaptured) -> None:
    state.checkpoints.append(
        Checkpoint(
            id=d.checkpoint_id,
            scope=d.scope,
            ordinal=d.ordinal,
            run_id=d.run_id,
            kind=d.kind,  # type: ignore[arg-type]
            status=d.status,
            ref=d.ref,
            commit=d.commit,
            tree=d.tree,
            unchanged=d.unchanged,
            files=list(d.files),
            created_at=e.at,
            node_id=d.node_id,
            children=list(d.children),
            skipped=list(d.skipped),
            files_total=d.files_total,
        )
    )
    if d.run_id:
        _activity(state, e, "checkpoint.captured", d.run_id, d.node_id, f"{d.scope}/{d.ordinal} {d.status}")


def _run_warning(state: ThreadState, e: ev.Envelope, d: ev.RunWarning) -> None:
    _activity(state, e, "runtime.warning", d.run_id, None, d.message)


_HANDLERS = {
    ev.RunWarning: _run_warning,
    ev.ThreadCreated: _thread_created,
    ev.MessageCreated: _message_created,
    ev.MessageDelta: _message_delta,
    ev.MessageCompleted: _message_completed,
    ev.RunQueued: _run_queued,
    ev.RunDispatched: _run_dispatched,
    ev.RunStarted: _run_started,
    ev.RunCompleted: _run_ended("completed"),
    ev.RunFailed: _run_ended("failed"),
    ev.RunInterrupted: _run_ended("interrupted"),
    ev.RunCancelled: _run_ended("cancelled"),
    ev.AttemptStarted: _attempt_started,
    ev.AttemptEnded: _attempt_ended,
    ev.NodeStarted: _node_started,
    ev.NodeCompleted: _node_completed,
    ev.ProviderAttached: _provider_attached,
    ev.ProviderStopped: _provider_stopped,
    ev.RequestOpened: _request_opened,
    ev.RequestResolved: _request_resolved,
    ev.PlanUpdated: _plan_updated,
    ev.CheckpointCaptured: _checkpoint_captured,
}
_HANDLERS.update(rollback.FOLDS)  # rollback.started/completed/failed (domain/rollback.py)
