"""The thread document (``/v1/threads/{id}``), its list item, and the documents shaped from it for the
other read routes (a run, the queue, a handoff, a lineage node). Pure: views in, views out."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, NamedTuple

import msgspec

from . import View
from .checkpoints import Checkpoint, Rollback
from .lineage import ContextHandoff, ContextTransfer, HandoffRef, HandoffView, Lineage, LineageNode, StartContext
from .providers import CapabilityView, ProviderSession, ProviderThread
from .requests import Activity, Plan, RuntimeRequest
from .runs import Message, QueuedRun, QueueView, Run


class Move(View, kw_only=True):
    """A change of the thread's home volume."""

    from_volume: str
    to_volume: str
    reason: str
    checkpoint_id: str | None = None
    at: datetime


class Thread(View, kw_only=True):
    id: str
    tenant: str
    title: str = ""
    provider: str = "scripted"
    model: str | None = None
    runtime_mode: Literal["approval_required", "auto_accept_edits", "full_access"] = "approval_required"
    workspace: str
    created_by: str
    created_at: datetime
    parent_thread_id: str | None = None
    volume: str = "local"  # its home: the workspace volume its workspace and provider sessions are on
    moves: list[Move] = msgspec.field(default_factory=list)
    archived: bool = False  # out of the default list; refuses new messages until unarchived


class ThreadView(View, kw_only=True):
    """The thread's projection: runs, attempts, nodes, messages, requests, plans, checkpoints, activity."""

    thread: Thread | None = None
    seq: int = 0  # the stream sequence of the last event it reflects
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
    capabilities: CapabilityView | None = None  # what clients can do with the live provider
    rollbacks: list[Rollback] = msgspec.field(default_factory=list)  # L10.5/L10.6, in the order requested
    lineage: Lineage | None = None  # L6: parent, root and children of a forked thread
    transfers: list[ContextTransfer] = msgspec.field(default_factory=list)  # L6/L7 context transfers
    start_contexts: list[StartContext] = msgspec.field(default_factory=list)  # how each run's context was resolved
    handoffs: list[ContextHandoff] = msgspec.field(default_factory=list)  # L5.5 handoff artifacts
    last_activity_at: datetime | None = None  # when the newest event of the thread happened

    def run(self, run_id: str) -> Run | None:
        return next((r for r in reversed(self.runs) if r.id == run_id), None)

    def message(self, message_id: str) -> Message | None:
        return next((m for m in reversed(self.messages) if m.id == message_id), None)

    def checkpoint(self, ordinal: int, scope: str = "root") -> Checkpoint | None:
        """The live (not stale) checkpoint of run ``ordinal`` (0: the baseline)."""
        return next(
            (c for c in reversed(self.checkpoints) if c.ordinal == ordinal and c.scope == scope and not c.stale), None
        )

    def checkpoint_by_id(self, checkpoint_id: str | None) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.id == checkpoint_id), None)

    def handoff(self, handoff_id: str) -> ContextHandoff | None:
        return next((h for h in reversed(self.handoffs) if h.id == handoff_id), None)

    def plan(self, plan_id: str) -> Plan | None:
        return next((p for p in self.plans if p.id == plan_id), None)


class ThreadSummary(View, kw_only=True):
    """One thread in the tenant's list (``/v1/threads``)."""

    id: str
    title: str
    provider: str
    created_at: str
    archived: bool = False
    seq: int
    runs: int
    active_run_id: str | None = None
    last_run_status: str | None = None
    last_activity_at: str | None = None  # ISO-8601: when the newest event of the thread happened


class RunView(Run, kw_only=True):
    """One run (``/v1/runs/{id}``) with its thread, its messages and its checkpoint."""

    thread_id: str
    messages: list[Message]
    checkpoint: Checkpoint | None


def summary(view: ThreadView) -> ThreadSummary:
    t = view.thread
    assert t is not None
    last = view.runs[-1] if view.runs else None
    return ThreadSummary(
        id=t.id,
        title=t.title,
        provider=t.provider,
        created_at=t.created_at.isoformat(),
        archived=t.archived,
        seq=view.seq,
        runs=len(view.runs),
        active_run_id=view.active_run_id,
        last_run_status=last.status if last else None,
        last_activity_at=view.last_activity_at.isoformat() if view.last_activity_at else None,
    )


def run_view(view: ThreadView, run_id: str) -> RunView | None:
    run = view.run(run_id)
    if run is None or view.thread is None:
        return None
    return RunView(
        **msgspec.structs.asdict(run),
        thread_id=view.thread.id,
        messages=[m for m in view.messages if m.run_id == run_id],
        checkpoint=view.checkpoint_by_id(run.checkpoint_id) if run.checkpoint_id else None,
    )


def recent(view: ThreadView, runs: int) -> ThreadView:
    """The thread with only its last ``runs`` runs (``/v1/threads/{id}?runs=N``, what a page showing the thread
    reads on each of its events): their messages and activity, the checkpoints of their ordinals and of the one
    before the first (where its diff starts); every other field whole. ``parts.recent`` reads just that."""
    kept = view.runs[-runs:]
    ids, ordinals = {r.id for r in kept}, recent_ordinals(kept)
    return msgspec.structs.replace(
        view,
        runs=kept,
        messages=[m for m in view.messages if m.run_id in ids],
        activity=[a for a in view.activity if a.run_id in ids],
        checkpoints=[c for c in view.checkpoints if c.ordinal in ordinals],
    )


def recent_ordinals(kept: list[Run]) -> set[int]:
    """The run ordinals whose checkpoints go with ``kept`` runs: theirs and the one before the first."""
    return {r.ordinal for r in kept} | {(kept[0].ordinal if kept else 1) - 1}


def queue_view(view: ThreadView) -> QueueView:
    assert view.thread is not None
    items = []
    for run_id in view.queue:
        run = view.run(run_id)
        if run is not None:
            message = view.message(run.message_id)
            items.append(
                QueuedRun(
                    run_id=run.id,
                    ordinal=run.ordinal,
                    message_id=run.message_id,
                    text=message.text if message else "",
                    mode=run.mode,
                    queued_at=run.queued_at.isoformat(),
                )
            )
    return QueueView(thread_id=view.thread.id, active_run_id=view.active_run_id, queue=items)


class RunChange(NamedTuple):
    """What a run's diff compares: its checkpoint (``new``) and the previous root checkpoint it started from."""

    thread: Thread
    run: Run
    new: Checkpoint | None
    old: Checkpoint | None


def run_change(view: ThreadView, run_id: str) -> RunChange | None:
    run = view.run(run_id)
    if run is None or view.thread is None:
        return None
    new = view.checkpoint_by_id(run.checkpoint_id)
    old = None
    if new is not None and new.commit:
        # Ordinal N-1 as captured before the run's own.
        before = view.checkpoints[: view.checkpoints.index(new)]
        old = next(
            (c for c in reversed(before) if c.scope == "root" and c.ordinal == run.ordinal - 1 and c.commit), None
        )
    return RunChange(view.thread, run, new, old)


def handoff_view(view: ThreadView, handoff_id: str) -> HandoffView | None:
    handoff = view.handoff(handoff_id)
    if handoff is None or view.thread is None:
        return None
    run = view.run(handoff.run_id)
    return HandoffView(
        **msgspec.structs.asdict(handoff), thread_id=view.thread.id, run_ordinal=run.ordinal if run else None
    )


class ThreadHead(msgspec.Struct, kw_only=True):
    """What the lineage tree shows of a thread (``lineage_node``): its runs only counted."""

    thread: Thread
    lineage: Lineage | None
    runs: int
    transfers: list[ContextTransfer]
    handoffs: list[ContextHandoff]


def thread_head(view: ThreadView) -> ThreadHead:
    assert view.thread is not None
    return ThreadHead(
        thread=view.thread, lineage=view.lineage, runs=len(view.runs), transfers=view.transfers, handoffs=view.handoffs
    )


def lineage_node(head: ThreadHead, children: list[LineageNode]) -> LineageNode:
    lineage = head.lineage
    return LineageNode(
        thread_id=head.thread.id,
        title=head.thread.title,
        provider=head.thread.provider,
        relationship=lineage.relationship if lineage else None,
        source_point=lineage.source_point if lineage else None,
        runs=head.runs,
        transfers=head.transfers,
        handoffs=[
            HandoffRef(id=h.id, run_id=h.run_id, strategy=h.strategy, to_provider=h.to_provider) for h in head.handoffs
        ],
        children=children,
    )
