"""How rollbacks fold into a thread: started, provider requested, completed or failed."""

from __future__ import annotations

from treadle.core import activity
from treadle.core.envelope import Envelope
from treadle.core.rollback.decide import saw_dropped_runs
from treadle.core.rollback.events import RollbackCompleted, RollbackFailed, RollbackProviderRequested, RollbackStarted
from treadle.core.rollback.model import Rollback
from treadle.core.view import Folds, ThreadView


def fold_started(state: ThreadView, e: Envelope, d: RollbackStarted) -> None:
    state.rollbacks.append(Rollback(
        id=d.rollback_id, command_id=e.command_id, kind=d.kind,  # type: ignore[arg-type]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
        to_run_ordinal=d.to_run_ordinal, node_id=d.node_id, checkpoint_id=d.checkpoint_id, commit=d.commit,
        rolled_back_run_ids=list(d.rolled_back_run_ids), stale_checkpoint_ids=list(d.stale_checkpoint_ids),
        touches_parent_workspace=d.touches_parent_workspace, requested_by=e.actor, started_at=e.at,
        after_run_id=d.after_run_id,
    ))  # fmt: skip
    _activity(state, e, d.rollback_id, "rollback.started", d.node_id)


def fold_completed(state: ThreadView, e: Envelope, d: RollbackCompleted) -> None:
    r = _find(state, d.rollback_id)
    if r is None or r.status != "in_progress":
        return
    r.status, r.ended_at = "completed", e.at
    r.undo_ref, r.undo_commit, r.files = d.undo_ref, d.undo_commit, list(d.files)
    r.provider_context = d.provider_context  # type: ignore[assignment]  # events carry plain str (a value this version does not know still decodes); the fold stores it as is
    for run_id in r.rolled_back_run_ids:
        run = state.run(run_id)
        if run is not None:
            run.status = "rolled_back"
            state.touch_id("runs", run_id)
    stale = set(r.stale_checkpoint_ids)
    for i, c in enumerate(state.checkpoints):
        if c.id in stale:
            c.stale = True
            state.touch("checkpoints", i)
    r.provider_thread_id = d.provider_thread_id or r.provider_thread_id
    r.provider_error = d.provider_error
    if d.provider_context == "divergent":
        # The provider still remembers turns whose files are gone: never resume it; the next run opens a
        # fresh provider thread on a fresh session.
        for p in state.provider_threads:
            if p.status == "active":
                p.status = "divergent"
        for s in state.sessions:
            if s.status == "live":
                s.status, s.reason = "stopped", "rolled_back"
    else:
        _realign(state, r, d)
    _activity(state, e, d.rollback_id, "rollback.completed", r.node_id)


def _realign(state: ThreadView, r: Rollback, d: RollbackCompleted) -> None:
    """``kept``/``rolled_back``: the kept provider thread covers only the kept runs now (the next run on it gets
    no handoff for runs it still has, and no history of dropped ones). Any other provider thread that saw a
    dropped run still remembers it: divergent, and let go if live."""
    kept = state.provider_thread_of(d.provider_thread_id)
    upto = r.to_run_ordinal if r.to_run_ordinal is not None else 0
    if kept is not None:
        kept.covered_ordinals = [o for o in kept.covered_ordinals if o <= upto]
    if d.provider_context == "rolled_back":
        r.provider_turns = d.provider_turns_dropped
    for p in state.provider_threads:
        if p is kept or p.status != "active" or not saw_dropped_runs(state, r, p):
            continue
        p.status = "divergent"
        s = state.session(p.session_id or "")
        if s is not None and s.status == "live":
            s.status, s.reason = "stopped", "rolled_back"


def fold_provider_requested(state: ThreadView, e: Envelope, d: RollbackProviderRequested) -> None:
    r = _find(state, d.rollback_id)
    if r is None or r.status != "in_progress":
        return
    r.provider_thread_id, r.provider_session_id, r.provider_turns = d.provider_thread_id, d.session_id, d.turns


def fold_failed(state: ThreadView, e: Envelope, d: RollbackFailed) -> None:
    r = _find(state, d.rollback_id)
    if r is None or r.status != "in_progress":
        return
    r.status, r.ended_at, r.error = "failed", e.at, d.error
    _activity(state, e, d.rollback_id, "rollback.failed", r.node_id)


def _find(state: ThreadView, rollback_id: str) -> Rollback | None:
    for r in reversed(state.rollbacks):
        if r.id == rollback_id:
            return r
    return None


def _activity(state: ThreadView, e: Envelope, rollback_id: str, kind: str, node_id: str | None) -> None:
    # L12.4: activity carries a run id; a rollback belongs to the thread's latest run.
    activity.record(state, e, kind, state.runs[-1].id if state.runs else "", node_id, rollback_id)


FOLDS: Folds = {
    RollbackStarted: fold_started,
    RollbackCompleted: fold_completed,
    RollbackFailed: fold_failed,
    RollbackProviderRequested: fold_provider_requested,
}
