"""The app thread aggregate: its folded state and ``evolve``.

One fold serves every reader: the coordinator and the supervisor decide on it, the projection writer
stores it in Redis as the thread's read model, and ``treadle check`` compares the two.
"""

from __future__ import annotations

import msgspec

from . import events as ev
from .capabilities import CapabilityView, view
from . import rollback
from .entities import (
    Activity,
    Attempt,
    Checkpoint,
    ContextHandoff,
    ContextTransfer,
    ExecutionNode,
    Lineage,
    Message,
    Plan,
    Progress,
    ProviderSession,
    ProviderThread,
    Run,
    Rollback,
    RuntimeRequest,
    StartContext,
    Thread,
)

PROVIDER_CAUSE = "prov:"


def provider_cause(seq: int, index: int = 0, attempt_id: str = "") -> str:
    """The causation id of events derived from provider-stream message ``seq``: its ``index`` in the play of
    ``attempt_id``. Events so caused may concern other attempts (a replacement, a superseding run)."""
    return f"{PROVIDER_CAUSE}{seq}:{index}:{attempt_id}"


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
    capabilities: CapabilityView | None = None  # what clients can do with the live provider
    rollbacks: list[Rollback] = msgspec.field(default_factory=list)  # L10.5/L10.6, in the order requested
    lineage: Lineage | None = None  # L6: parent, root and children of a forked thread
    transfers: list[ContextTransfer] = msgspec.field(default_factory=list)  # L6/L7 context transfers
    start_contexts: list[StartContext] = msgspec.field(default_factory=list)  # how each run's context was resolved
    handoffs: list[ContextHandoff] = msgspec.field(default_factory=list)  # L5.5 handoff artifacts

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

    def provider_thread_of(self, pth_id: str | None) -> ProviderThread | None:
        for p in self.provider_threads:
            if p.id == pth_id:
                return p
        return None

    def session_thread(self, session_id: str | None) -> ProviderThread | None:
        """The provider thread a session was attached to (the newest such)."""
        for p in reversed(self.provider_threads):
            if p.session_id == session_id:
                return p
        return None

    def start_context(self, run_id: str) -> StartContext | None:
        for c in reversed(self.start_contexts):
            if c.run_id == run_id:
                return c
        return None

    def transfer(self, transfer_id: str) -> ContextTransfer | None:
        for t in self.transfers:
            if t.id == transfer_id:
                return t
        return None

    def handoff(self, handoff_id: str) -> ContextHandoff | None:
        for h in reversed(self.handoffs):
            if h.id == handoff_id:
                return h
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
        seq, _, rest = e.causation_id[len(PROVIDER_CAUSE):].partition(":")
        index, _, attempt_id = rest.partition(":")
        state.provider_seq = max(state.provider_seq, int(seq))
        if index and int(index) and (att := _reporting_attempt(state, e.data, attempt_id)) is not None:
            att.provider_index = max(att.provider_index, int(index))
    return state


def _reporting_attempt(state: ThreadState, data, attempt_id: str) -> Attempt | None:
    """The attempt whose play reported the provider event (named in the causation id since steering; before,
    the run's current attempt)."""
    if not attempt_id:
        run = state.run(getattr(data, "run_id", "") or "")
        return run.attempt if run is not None else None
    for run in reversed(state.runs):
        for att in run.attempts:
            if att.id == attempt_id:
                return att
    return None


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
    steer = state.message(d.message_id)
    if steer is not None:  # a steer that came too late for its run moves to the run that supersedes it
        steer.run_id, steer.delivered = d.run_id, True
    else:
        state.messages.append(Message(id=d.message_id, role="user", text=d.text, run_id=d.run_id, author=d.author,
                                      created_at=e.at, command_id=e.command_id))
    if d.supersedes_run_id and (old := state.run(d.supersedes_run_id)) is not None:
        old.superseded_by = d.run_id
        for m in state.messages:  # every undelivered steer of the old run rides along with this one
            if m.run_id == old.id and not m.delivered:
                m.run_id, m.delivered = d.run_id, True
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
        supersedes_run_id=d.supersedes_run_id,
    )
    run.attempts.append(Attempt(id=d.attempt_id, run_id=d.run_id, number=1, root_node_id=d.root_node_id))
    run.nodes.append(
        ExecutionNode(
            id=d.root_node_id, run_id=d.run_id, attempt_id=d.attempt_id, kind="root_turn", counts_for_run=True
        )
    )
    state.runs.append(run)
    if d.context is not None:
        _context_requested(state, e, run, d.context)
    if d.dispatched:
        run.status = "starting"
        state.active_run_id = d.run_id
    elif d.front:
        state.queue.insert(0, d.run_id)
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
    pth = state.session_thread(d.session_id) or state.provider_thread
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
        for plan in state.plans:  # L2.3: the run's todo lists are final with it
            if plan.run_id == d.run_id and plan.status == "open" and plan.kind == "todo_list":
                plan.status = "final"
        # Coverage goes to the provider thread the run actually ran on (L5.3: switching leaves several).
        ended = next((a for a in run.attempts if a.id == d.attempt_id), None)
        pth = state.provider_thread_of(ended.provider_thread_id if ended else None) or state.provider_thread
        if pth is not None and status == "completed" and run.ordinal not in pth.covered_ordinals:
            pth.covered_ordinals.append(run.ordinal)

    return handle


def _attempt_started(state: ThreadState, e: ev.Envelope, d: ev.AttemptStarted) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    run.attempts.append(
        Attempt(id=d.attempt_id, run_id=d.run_id, number=len(run.attempts) + 1, reason=d.reason,  # type: ignore[arg-type]
                root_node_id=d.root_node_id, message_ids=list(d.message_ids), script=d.script)
    )
    for message_id in d.message_ids:
        if (m := state.message(message_id)) is not None:
            m.delivered = True
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
            native_thread_ref=d.native_thread_ref,
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
        pth = ProviderThread(id=d.provider_thread_id, provider=d.provider, native_ref=d.native_ref, replaces=d.replaces,
                             settings=d.settings)
        state.provider_threads.append(pth)
    elif pth.settings is None:
        pth.settings = d.settings  # a thread attached before settings were recorded: learnt on its next attach
    pth.session_id = d.session_id
    pth.status = "active"
    state.capabilities = view(d.capabilities)


def _provider_stopped(state: ThreadState, e: ev.Envelope, d: ev.ProviderStopped) -> None:
    s = state.session(d.session_id)
    if s is not None and s.status == "live":
        s.status = "stopped"
        s.reason = d.reason
    run_id = state.active_run_id or (state.runs[-1].id if state.runs else "")
    _activity(state, e, "runtime.warning", run_id, None, f"provider session stopped: {d.reason}")


def _provider_resume_failed(state: ThreadState, e: ev.Envelope, d: ev.ProviderResumeFailed) -> None:
    for p in state.provider_threads:
        if p.id == d.provider_thread_id:
            p.status = "unusable"
            p.session_id = None
    run_id = state.active_run_id or (state.runs[-1].id if state.runs else "")
    _activity(state, e, "provider_thread.unusable", run_id, None, f"provider thread could not resume: {d.reason}")


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
                parent_id=d.parent_id or run.attempt.root_node_id,
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
    req.command_id = e.command_id
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
    run = state.run(d.run_id)
    for p in state.plans:
        if p.id == d.plan_id:
            p.text = d.text
            p.items = list(d.items)
            break
    else:
        # L12.2: only the root turn's list is the run's; a child's nests under its node and never replaces it.
        root = run is not None and (d.node_id is None or any(a.root_node_id == d.node_id for a in run.attempts))
        p = Plan(id=d.plan_id, run_id=d.run_id, node_id=d.node_id, kind=d.kind, text=d.text,  # type: ignore[arg-type]
                 items=list(d.items), root=root)
        state.plans.append(p)
    if run is not None and p.root and p.kind == "todo_list":
        run.progress = Progress(done=sum(i.status == "completed" for i in p.items), total=len(p.items))
    _activity(state, e, "plan.updated", d.run_id, d.node_id, d.kind)


def _plan_implemented(state: ThreadState, e: ev.Envelope, d: ev.PlanImplemented) -> None:
    for p in state.plans:
        if p.id == d.plan_id:
            p.status, p.implemented_by = "implemented", d.by
    _activity(state, e, "plan.implemented", d.run_id, None, f"as {d.as_}: {d.by}")


def _run_steered(state: ThreadState, e: ev.Envelope, d: ev.RunSteered) -> None:
    state.messages.append(Message(id=d.message_id, role="user", text=d.text, run_id=d.run_id, author=d.author,
                                  created_at=e.at, command_id=e.command_id, steering=d.steering,  # type: ignore[arg-type]
                                  delivered=False, script=d.script))
    _activity(state, e, "run.steered", d.run_id, None, d.steering)


def _steer_delivered(state: ThreadState, e: ev.Envelope, d: ev.SteerDelivered) -> None:
    if (m := state.message(d.message_id)) is not None:
        m.delivered = True


def _attempt_of(state: ThreadState, run_id: str, attempt_id: str) -> Attempt | None:
    run = state.run(run_id)
    for att in run.attempts if run else ():
        if att.id == attempt_id:
            return att
    return None


def _interrupt_requested(state: ThreadState, e: ev.Envelope, d: ev.InterruptRequested) -> None:
    if (att := _attempt_of(state, d.run_id, d.attempt_id)) is not None and att.interrupt is None:
        att.interrupt, att.interrupt_reason = "requested", d.reason  # type: ignore[assignment]
    _activity(state, e, "interrupt.requested", d.run_id, None, d.reason)


def _interrupt_sent(state: ThreadState, e: ev.Envelope, d: ev.InterruptSent) -> None:
    if (att := _attempt_of(state, d.run_id, d.attempt_id)) is not None:
        att.interrupt = d.path  # type: ignore[assignment]


def _queue_reordered(state: ThreadState, e: ev.Envelope, d: ev.QueueReordered) -> None:
    state.queue = list(d.order)


def _run_edited(state: ThreadState, e: ev.Envelope, d: ev.RunEdited) -> None:
    run = state.run(d.run_id)
    if run is None:
        return
    if (m := state.message(run.message_id)) is not None:
        m.text = d.text
    run.script = d.script


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


# --- lineage: forks, provider switches, handoffs, merge-back (L5, L6, L7) -------------------------------


def _thread_forked(state: ThreadState, e: ev.Envelope, d: ev.ThreadForked) -> None:
    if state.thread is not None:
        state.thread.parent_thread_id = d.parent_thread_id
    lineage = state.lineage = state.lineage or Lineage()
    lineage.parent_thread_id, lineage.root_thread_id = d.parent_thread_id, d.root_thread_id
    lineage.relationship, lineage.source_point = "fork", dict(d.source_point)
    state.transfers.append(ContextTransfer(id=d.transfer_id, type="fork", source_thread_id=d.parent_thread_id,
                                           source_point=dict(d.source_point), fidelity=d.fidelity,  # type: ignore[arg-type]
                                           created_at=e.at))


def _child_forked(state: ThreadState, e: ev.Envelope, d: ev.ChildForked) -> None:
    lineage = state.lineage = state.lineage or Lineage()
    if all(c.get("thread_id") != d.child_thread_id for c in lineage.children):
        lineage.children.append({"thread_id": d.child_thread_id, "transfer_id": d.transfer_id,
                                 "source_point": dict(d.source_point), "at": e.at.isoformat()})


def _context_requested(state: ThreadState, e: ev.Envelope, run: Run, d: ev.ContextRequest) -> None:
    """Folded with the ``run.queued`` that carries it."""
    run.clean_context = d.clean_context
    if d.transfer_id and d.merge_back_from and state.transfer(d.transfer_id) is None:
        state.transfers.append(ContextTransfer(id=d.transfer_id, type="merge_back", source_thread_id=d.merge_back_from,
                                               source_point=dict(d.source_point or {}), base_point=d.base_point,
                                               run_id=run.id, created_at=e.at))


def _handoff_created(state: ThreadState, e: ev.Envelope, d: ev.HandoffCreated) -> None:
    if state.handoff(d.handoff_id) is not None:
        return
    state.handoffs.append(ContextHandoff(
        id=d.handoff_id, run_id=d.run_id, strategy=d.strategy, reason=d.reason,  # type: ignore[arg-type]
        from_provider=d.from_provider, to_provider=d.to_provider, provider_thread_id=d.provider_thread_id,
        transfer_id=d.transfer_id, source_thread_id=d.source_thread_id, covered_ordinals=list(d.covered_ordinals),
        text=d.text, truncated=d.truncated, summariser=d.summariser, version=d.version, fallback=d.fallback,
        created_at=e.at))
    run = state.run(d.run_id)
    if run is not None and d.handoff_id not in run.handoff_ids:
        run.handoff_ids.append(d.handoff_id)
    _activity(state, e, "handoff.created", d.run_id, None, f"{d.strategy} for {d.to_provider}")


def _context_resolved(state: ThreadState, e: ev.Envelope, d: ev.ContextResolved) -> None:
    state.start_contexts.append(StartContext(
        run_id=d.run_id, provider=d.provider, provider_thread_id=d.provider_thread_id, fresh=d.fresh,
        fork_native_ref=d.fork_native_ref, fork_at_turn_ref=d.fork_at_turn_ref, handoff_ids=list(d.handoff_ids),
        transfer_ids=list(d.transfers)))
    for transfer_id, status in d.transfers.items():
        if (t := state.transfer(transfer_id)) is not None:
            t.status, t.run_id = status, d.run_id  # type: ignore[assignment]
            t.fidelity = t.fidelity or ("native" if status == "resolved_native" else "portable")  # type: ignore[assignment]
            t.handoff_id = next((h for h in d.handoff_ids if (ho := state.handoff(h)) and ho.transfer_id == t.id), None)


def _context_delivered(state: ThreadState, e: ev.Envelope, d: ev.ContextDelivered) -> None:
    context = state.start_context(d.run_id)
    if context is None or context.delivered:
        return
    context.delivered = True
    pth = state.provider_thread_of(d.provider_thread_id)
    for handoff_id in context.handoff_ids:
        if (h := state.handoff(handoff_id)) is None:
            continue
        h.delivered = True
        if pth is not None and h.strategy in ("delta", "full_thread_summary"):  # this thread's own runs
            pth.covered_ordinals = sorted(set(pth.covered_ordinals) | set(h.covered_ordinals))
    for transfer_id in context.transfer_ids:
        if (t := state.transfer(transfer_id)) is not None and t.status.startswith("resolved"):
            t.status = "consumed"
    if context.transfer_ids:
        _activity(state, e, "transfer.consumed", d.run_id, None, ", ".join(context.transfer_ids))


def _transfer_failed(state: ThreadState, e: ev.Envelope, d: ev.TransferFailed) -> None:
    if (t := state.transfer(d.transfer_id)) is not None:
        t.status, t.error, t.run_id = "failed", d.error, d.run_id or t.run_id
    if d.run_id:
        _activity(state, e, "transfer.failed", d.run_id, None, d.error)




_LINEAGE_HANDLERS = {
    ev.ThreadForked: _thread_forked,
    ev.ChildForked: _child_forked,
    ev.HandoffCreated: _handoff_created,
    ev.ContextResolved: _context_resolved,
    ev.ContextDelivered: _context_delivered,
    ev.TransferFailed: _transfer_failed,
}


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
    ev.ProviderResumeFailed: _provider_resume_failed,
    ev.RequestOpened: _request_opened,
    ev.RequestResolved: _request_resolved,
    ev.PlanUpdated: _plan_updated,
    ev.CheckpointCaptured: _checkpoint_captured,
    ev.PlanImplemented: _plan_implemented,
    ev.RunSteered: _run_steered,
    ev.SteerDelivered: _steer_delivered,
    ev.InterruptRequested: _interrupt_requested,
    ev.InterruptSent: _interrupt_sent,
    ev.QueueReordered: _queue_reordered,
    ev.RunEdited: _run_edited,
} | _LINEAGE_HANDLERS
_HANDLERS.update(rollback.FOLDS)  # rollback.started/completed/failed (domain/rollback.py)
