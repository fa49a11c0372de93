"""Whether an idle thread's workspace may leave its node's disk (issue 35: a node holds the active threads).

Pure: the thread's state as its events fold, the volume asking and the time go in; ``None`` (it may go) or why
not comes out. The checkpoint service also checks what only the disk knows (the workspace is exactly its last
durable checkpoint) before it deletes anything: checkpoints/eviction.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from treadle.core.state import ThreadState


def own_workspace(thread_id: str) -> str:
    """The workspace a thread gets when it names none: the only kind evicted (a named one may be shared)."""
    return f"threads/{thread_id}"


def refusal(state: ThreadState, volume: str, now: datetime, idle_seconds: float) -> str | None:
    """Why the thread's workspace must stay on ``volume`` now; None when nothing needs it there."""
    thread = state.thread
    if thread is None:
        return "no such thread"
    if thread.volume != volume:
        return f"its home is {thread.volume}"
    if thread.workspace != own_workspace(thread.id):
        return "a named workspace (it may be shared)"
    if idle_seconds <= 0:
        return "eviction is off"
    if state.active_run_id is not None or state.queue or any(not r.terminal for r in state.runs):
        return "a run is playing or queued"
    if state.live_session is not None:
        return "a provider session is live"
    if any(r.status == "in_progress" for r in state.rollbacks):
        return "a rollback is in progress"
    last = state.last_activity_at
    if last is None or now - last < timedelta(seconds=idle_seconds):
        return "active recently"
    roots = [c for c in state.checkpoints if c.scope == "root" and not c.stale]
    if not roots or max(roots, key=lambda c: c.ordinal).commit is None:
        return "its last checkpoint failed"  # what the disk holds may be all there is of that run's files
    return None
