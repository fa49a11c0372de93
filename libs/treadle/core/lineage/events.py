"""Events of lineage: forks, provider switches, context transfers, handoffs, merge-back."""

from __future__ import annotations

from typing import Any

import msgspec

from treadle.core.envelope import Payload, event


@event("thread.forked", local=True, other_runs=True, provider_threads=True)
class ThreadForked(Payload, kw_only=True):
    """L6.1, on the new thread right after its ``thread.created``: its lineage and a pending fork transfer.
    Nothing else: no provider, session, provider thread or summary until its first run."""

    parent_thread_id: str
    root_thread_id: str
    transfer_id: str
    source_point: dict[str, Any]
    fidelity: str | None = None  # "synthetic" when only a low-fidelity fork is possible (L6.4)


@event("thread.child_forked", local=True, other_runs=True, provider_threads=True)
class ChildForked(Payload, kw_only=True):
    """On the source thread: a fork was made from it. Its own history is untouched."""

    child_thread_id: str
    transfer_id: str
    source_point: dict[str, Any]


class ContextRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a message asked of its run's context, carried by its ``run.queued`` (so a reader that sees the run
    sees the request): a clean provider thread (L5.4) and/or the results of a fork (L7.1: the merge-back
    transfer, pending until the run starts)."""

    clean_context: bool = False
    transfer_id: str | None = None
    merge_back_from: str | None = None
    source_point: dict[str, Any] | None = None
    base_point: dict[str, Any] | None = None


@event("handoff.created", local=True, other_runs=False, provider_threads=True, indexes=("handoff_id",))
class HandoffCreated(Payload, kw_only=True):
    """L5.5: a context handoff artifact, stored before the provider sees it."""

    handoff_id: str
    run_id: str
    strategy: str
    reason: str = ""
    from_provider: str | None = None
    to_provider: str
    provider_thread_id: str | None = None
    transfer_id: str | None = None
    source_thread_id: str | None = None
    covered_ordinals: list[int] = []
    text: str
    truncated: bool = False
    summariser: str = "local"  # L5.5: "local" (deterministic) or "provider:<name>"
    version: int = 1  # of that summariser
    fallback: str | None = None  # why a configured provider-backed summariser was not used


@event("context.resolved", local=True, other_runs=False, provider_threads=True)
class ContextResolved(Payload, kw_only=True):
    """L5.2/L6.2: the provider thread a run starts on and the context it gets; resolves its transfers."""

    run_id: str
    provider: str
    provider_thread_id: str
    fresh: bool
    fork_native_ref: str | None = None
    fork_at_turn_ref: str | None = None
    handoff_ids: list[str] = []
    transfers: dict[str, str] = {}  # transfer id -> resolved_native | resolved_portable


@event("context.delivered", local=False, other_runs=False, provider_threads=True)
class ContextDelivered(Payload, kw_only=True):
    """The provider took the turn carrying the resolved context: transfers consumed, coverage extended."""

    run_id: str
    provider_thread_id: str


@event("transfer.failed", local=True, other_runs=True, provider_threads=True)
class TransferFailed(Payload, kw_only=True):
    """A transfer that cannot be resolved; the run that needed it fails before any provider work."""

    transfer_id: str
    run_id: str | None = None
    error: str


@event("thread.delegated", local=False, other_runs=True, provider_threads=True)
class ThreadDelegated(Payload, kw_only=True):
    """On a delegated task's thread, right after its ``thread.created``: lineage ``subagent`` pointing at the
    parent run's app-owned node (issue 21). Its first run is the task."""

    parent_thread_id: str
    root_thread_id: str
    parent_run_id: str
    parent_node_id: str
    depth: int
    mode: str  # async | wait: how the task was asked for (an interrupted parent cascades to async ones)
    role: str = ""


@event("delegation.started", local=False, other_runs=True, provider_threads=True)
class DelegationStarted(Payload, kw_only=True):
    """On the parent thread: the app-owned ``subagent`` node of its run, standing for the child thread."""

    run_id: str
    attempt_id: str
    node_id: str
    child_thread_id: str
    child_run_id: str
    title: str = ""
    input: dict[str, Any] = {}


@event("delegation.finished", local=False, other_runs=True, provider_threads=True)
class DelegationFinished(Payload, kw_only=True):
    """On the parent thread, once the child's task run ended: its node finalised and the result transfer."""

    run_id: str
    node_id: str
    child_thread_id: str
    child_run_id: str
    transfer_id: str
    status: str
    summary: str


@event("delegation.ended", local=False, other_runs=True, provider_threads=True)
class DelegationEnded(Payload, kw_only=True):
    """On the child, after its parent recorded the result: the task no longer counts as a running child."""

    child_run_id: str
    status: str
