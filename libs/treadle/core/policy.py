"""A tenant's policy: which runtime modes its threads may run in, and its own quotas (None: the deployment's
defaults). Checked where a command is decided, so no path (create, send, fork, plan implement) escalates."""

from __future__ import annotations

from datetime import datetime
from typing import get_args

import msgspec

from treadle.core.commands import Command
from treadle.core.errors import BadRequest, Forbidden, check
from treadle.core.lineage.commands import ForkThread
from treadle.core.plans.commands import ImplementPlan
from treadle.core.state import ThreadState
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.core.thread.model import RuntimeMode

ROLES = ("admin", "member")  # admin: tokens, consumers, policy; member: threads
DEFAULT_MODES: tuple[RuntimeMode, ...] = ("approval_required", "auto_accept_edits")  # full_access only when allowed
MAX_QUOTA = 1_000_000
MAX_DISK_BYTES = 1 << 50  # 1 PiB


class TenantPolicy(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    allowed_modes: tuple[RuntimeMode, ...] = DEFAULT_MODES
    max_threads: int | None = None  # threads of the tenant (None: TREADLE_COORDINATOR_MAX_THREADS_PER_TENANT)
    max_queued_runs: int | None = None  # queued runs per thread (None: TREADLE_COORDINATOR_MAX_QUEUED_RUNS)
    # Delegated tasks (issue 21; None: the TREADLE_COORDINATOR_DELEGATION_… settings)
    max_delegation_depth: int | None = None
    max_children_per_run: int | None = None
    max_running_children: int | None = None
    cascade_interrupts: bool | None = None  # an interrupted run interrupts its async tasks
    # Disk budget of its workspaces and runtime homes (issue 36; None: TREADLE_PROVIDER_HOST_DISK_BUDGET_…)
    max_disk_bytes: int | None = None
    max_disk_files: int | None = None
    max_schedules: int | None = None  # schedules of the tenant (None: core/schedules DEFAULT_MAX_SCHEDULES)
    updated_at: datetime | None = None
    updated_by: str | None = None


def validated(policy: TenantPolicy) -> TenantPolicy:
    """A policy an admin may store: modes named once, quotas positive and bounded."""
    check(
        len(set(policy.allowed_modes)) == len(policy.allowed_modes),
        BadRequest,
        "allowed_modes names a mode twice",
        code="invalid_policy",
    )
    for name in (
        "max_threads",
        "max_queued_runs",
        "max_delegation_depth",
        "max_children_per_run",
        "max_running_children",
        "max_schedules",
    ):
        value = getattr(policy, name)
        check(
            value is None or 0 < value <= MAX_QUOTA,
            BadRequest,
            f"{name} is 1..{MAX_QUOTA} or null",
            code="invalid_policy",
        )
    for name, most in (("max_disk_bytes", MAX_DISK_BYTES), ("max_disk_files", MAX_QUOTA * 100)):
        value = getattr(policy, name)
        check(value is None or 0 < value <= most, BadRequest, f"{name} is 1..{most} or null", code="invalid_policy")
    return policy


def check_mode(policy: TenantPolicy, mode: str, why: str) -> None:
    if mode not in get_args(RuntimeMode):
        return  # not a runtime mode at all: the decision refuses it as bad input (400 invalid_runtime_mode)
    if mode not in policy.allowed_modes:
        raise Forbidden(
            f"runtime mode {mode} is not allowed for this tenant ({why}); an admin can allow it",
            code="mode_not_allowed",
            details={"runtime_mode": mode, "allowed": list(policy.allowed_modes)},
        )


def check_command(policy: TenantPolicy, state: ThreadState, command: Command) -> None:
    """Every command that creates a thread or starts provider work must run in a mode the tenant may use now:
    a fork or a plan's thread inherits its source's mode, and a thread made before an admin narrowed the
    policy takes no new work in a mode no longer allowed."""
    body = command.body
    if isinstance(body, CreateThread):
        check_mode(policy, body.runtime_mode, "a new thread")
    elif isinstance(body, SendMessage) and state.message_for_command(command.id) is not None:
        return  # a retry of a message already taken gets its original receipt
    elif isinstance(body, (SendMessage, ForkThread, ImplementPlan)) and state.thread is not None:
        check_mode(policy, state.thread.runtime_mode, f"the thread's mode, for a {body.__struct_config__.tag}")


def require_role(role: str, needed: str, action: str) -> None:
    check(role in ROLES, Forbidden, f"role {role!r} is not a known role", code="forbidden")
    if needed == "admin" and role != "admin":
        raise Forbidden(f"{action} needs the admin role", code="forbidden", details={"role": role, "needed": "admin"})
