"""A new thread's first session, named when the thread is created.

A first turn waits for its runtime's start (sandbox, process, handshake): most of its time. The thread's creation
comes before its first message (by the seconds a user takes to type it), so the supervisor hints a host to launch
the runtime then. The hint and the first run's placement must name the same session without a shared record: its
id is derived from the thread (its id and creation time), and used only while the thread has never had a session,
so no id is ever placed twice for different sessions (warm_workspaces.py relies on that).
"""

from __future__ import annotations

from treadle.core.ids import IdFactory
from treadle.core.state import ThreadState
from treadle.providers import protocol as hp


def first_session_id(state: ThreadState) -> str | None:
    """The id of the thread's first session; None once it has had one."""
    thread = state.thread
    if thread is None or state.sessions:
        return None
    return IdFactory(f"first-session|{thread.id}", int(thread.created_at.timestamp() * 1000)).next("ps")


def creation_hint(state: ThreadState) -> hp.WarmSession | None:
    """The runtime to launch for a thread just created, when its first run will open a fresh provider thread of
    the thread's own settings (a fork or a context transfer resolves its sources first and opens otherwise)."""
    thread = state.thread
    session_id = first_session_id(state)
    if (
        thread is None
        or session_id is None
        or thread.archived
        or thread.deleted
        or state.runs
        or state.provider_threads
        or state.transfers
        or state.lineage is not None
    ):
        return None
    return hp.WarmSession(
        tenant=thread.tenant,
        thread=thread.id,
        provider=thread.provider,
        session_id=session_id,
        workspace=thread.workspace,
        runtime_mode=thread.runtime_mode,
        model=thread.model,
        speculative=True,
    )
