"""Issue 21, part 3 (decisions only; not wired yet): what a delegated task may be and what it reports. A child's
runtime mode may only narrow its parent's; a tenant's delegations are bounded in depth, children per run and
children running at once; a task's id is derived from the parent run and the caller's request id, so a retried
``delegate_task`` names the same child; the result transfer's summary is the child's last assistant text,
else its status."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import get_args

import msgspec

from treadle.core.errors import BadRequest, Forbidden, QuotaExceeded, check
from treadle.core.thread.model import RuntimeMode

MODES: tuple[str, ...] = get_args(RuntimeMode)  # least to most permissive
SUMMARY_CHARS = 4000


class DelegationBounds(msgspec.Struct, kw_only=True, frozen=True):
    max_depth: int = 3  # a child's child's child, no further
    max_children_per_run: int = 10
    max_running_children: int = 5  # of the tenant, at once


def narrowed_mode(parent: str, child: str | None) -> str:
    """The child's runtime mode: the parent's when not asked, else the one asked if it is no wider."""
    check(parent in MODES, BadRequest, f"unknown runtime mode {parent!r}", code="invalid_runtime_mode")
    if child is None:
        return parent
    check(child in MODES, BadRequest, f"unknown runtime mode {child!r}", code="invalid_runtime_mode")
    if MODES.index(child) > MODES.index(parent):
        raise Forbidden(
            f"a delegated task may not run in {child}: its parent runs in {parent}",
            code="mode_not_allowed",  # the tools report it as kind mode_escalation_denied
            details={"parent_mode": parent, "runtime_mode": child},
        )
    return child


def check_bounds(bounds: DelegationBounds, *, depth: int, children_of_run: int, running_children: int) -> None:
    """``depth``: the new child's (the parent's depth + 1); the counts: before the new child."""
    for quota, limit, current in (
        ("delegation_depth", bounds.max_depth, depth),
        ("children_per_run", bounds.max_children_per_run, children_of_run + 1),
        ("running_children", bounds.max_running_children, running_children + 1),
    ):
        if current > limit:
            raise QuotaExceeded(
                f"{quota} is at most {limit}", details={"quota": quota, "limit": limit, "current": current - 1}
            )


def task_key(tenant: str, parent_run_id: str, client_request_id: str) -> str:
    """The idempotency key of a delegation: the same (parent run, request id) is the same child."""
    digest = hashlib.sha256(f"{tenant}|{parent_run_id}|{client_request_id}".encode()).hexdigest()[:40]
    return f"delegate:{digest}"


def result_summary(assistant_texts: Sequence[str], status: str) -> str:
    """What the parent's result transfer says: the child's last non-empty assistant text, else its status."""
    last = next((t.strip() for t in reversed(assistant_texts) if t.strip()), "")
    return last[:SUMMARY_CHARS] if last else f"the delegated task ended {status}"
