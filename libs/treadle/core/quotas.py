"""Quotas the coordinator decides from the thread's state (exact: it owns the queue): queued runs per
thread, stored text per thread, threads per tenant. Each refusal says which quota, its limit and the count."""

from __future__ import annotations

import msgspec

from treadle.core.commands import Command
from treadle.core.errors import QuotaExceeded
from treadle.core.plans.commands import ImplementPlan
from treadle.core.run.model import script_bytes
from treadle.core.state import ThreadState
from treadle.core.thread.commands import EditQueued, SendMessage


class Quotas(msgspec.Struct, kw_only=True, frozen=True):
    max_threads: int = 10_000
    max_queued_runs: int = 100
    max_thread_text_bytes: int = 16 * 1024 * 1024


def refuse(quota: str, limit: int, current: int, message: str) -> QuotaExceeded:
    return QuotaExceeded(message, details={"quota": quota, "limit": limit, "current": current})


def stored_text_bytes(state: ThreadState) -> int:
    """What the thread's messages and run scripts hold: the part of its document that input grows (the fold
    keeps the sum)."""
    return state.text_bytes


def _added_bytes(command: Command) -> int:
    body = command.body
    if isinstance(body, (SendMessage, EditQueued)):
        return len(body.text.encode()) + script_bytes(body.script)
    return 0


def check_command(quotas: Quotas, state: ThreadState, command: Command) -> None:
    """L3.6 with bounds: a send or plan run that would queue past the limit, or input that would take the thread's
    stored text past its limit, is refused before anything is appended."""
    body = command.body
    if state.thread is None or not isinstance(body, (SendMessage, ImplementPlan, EditQueued)):
        return
    queues = (isinstance(body, SendMessage) and body.mode not in ("steer_active", "restart_active")) or (
        isinstance(body, ImplementPlan) and body.as_ == "run"
    )
    if queues and len(state.queue) >= quotas.max_queued_runs and state.message_for_command(command.id) is None:
        raise refuse(
            "queued_runs_per_thread",
            quotas.max_queued_runs,
            len(state.queue),
            f"this thread already has {len(state.queue)} queued runs; wait for some to start or cancel some",
        )
    added = _added_bytes(command)
    if added:
        current = stored_text_bytes(state)
        if current + added > quotas.max_thread_text_bytes and state.message_for_command(command.id) is None:
            raise refuse(
                "thread_text_bytes",
                quotas.max_thread_text_bytes,
                current,
                "this thread's stored text would pass its limit; start a new thread or fork this one",
            )


def check_thread_count(quotas: Quotas, current: int) -> None:
    if current >= quotas.max_threads:
        raise refuse("threads_per_tenant", quotas.max_threads, current, f"the tenant has {current} threads, its limit")
