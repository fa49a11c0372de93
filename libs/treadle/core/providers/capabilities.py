"""Capability profiles and what they mean to a client (docs/requirements.md "Capabilities").

Orchestration branches on these typed results, never on provider names.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from treadle.core.providers.model import ProviderCapabilities

ALL_APPROVALS = ["command", "file_change", "file_read", "patch"]

FULL = ProviderCapabilities(  # Codex-like
    create_empty_thread=True,
    interrupt=True,
    active_steering=True,
    approvals=ALL_APPROVALS,
    structured_questions=True,
    plan_updates=True,
    todo_list=True,
    proposed_plan=True,
    subagents=True,
)

# The scripted provider's named profiles: one per degradation path a real provider takes.
PROFILES: dict[str, ProviderCapabilities] = {
    "full": FULL,
    "no_steering": msgspec.structs.replace(FULL, active_steering=False, native_turn_ids=False),  # Claude-like
    "no_interrupt": msgspec.structs.replace(FULL, active_steering=False, interrupt=False),
    "no_approvals": msgspec.structs.replace(FULL, approvals=[]),
    "no_plans": msgspec.structs.replace(
        FULL, plan_updates=False, todo_list=False, proposed_plan=False, structured_questions=False
    ),
    "weak_terminal": msgspec.structs.replace(FULL, terminal_status="weak"),
    # L6.2: a provider that forks its threads natively (native refs it can branch), and one that cannot.
    "native_fork": msgspec.structs.replace(FULL, fork=True, read_snapshot=True),
    # L6.4: subagents that own provider threads of their own, which fork natively too.
    "subagent_fork": msgspec.structs.replace(FULL, fork=True, read_snapshot=True, fork_subagent=True),
    "no_fork": msgspec.structs.replace(FULL, fork=False),
    # L10.5: a provider that drops turns of its conversation natively (Codex-like), and the default without.
    "native_rollback": msgspec.structs.replace(FULL, rollback=True, read_snapshot=True),
}


class CapabilityView(msgspec.Struct, kw_only=True):
    """What a client can do with the thread's live provider, as typed results."""

    interrupt: Literal["available", "destructive", "unavailable"]
    steering: Literal["native", "restart", "queue_only"]
    approvals: Literal["structured", "none"]
    questions: Literal["structured", "text_only"]
    plans: Literal["available", "unavailable"]
    terminal_status: Literal["strong", "weak", "none"]
    # L10.5: a rollback brings the provider conversation back with the files (native), or the next run starts a
    # fresh provider thread from a summary of the kept runs (fresh_thread).
    rollback: Literal["native", "fresh_thread"] = "fresh_thread"
    # L6.2/L6.4: what a fork of this thread gets. ``portable``/``synthetic``: a summary of the projected graph
    # instead of the provider's own history, a lower-fidelity fork.
    fork: Literal["native", "portable"] = "portable"
    subagent_fork: Literal["native", "synthetic", "unavailable"] = "unavailable"
    # Issue 21: the agent can call Treadle's MCP tools (delegate, create and read threads) as the thread's tenant.
    orchestrator: Literal["mcp", "none"] = "none"


def fork_fidelity(caps: ProviderCapabilities) -> Literal["native", "portable"]:
    """L6.2: a run's fork continues the provider's own history only where it forks natively; names to fork by
    are needed too (weak identity is Treadle-minted turn refs the provider records, enough)."""
    return "native" if caps.fork and caps.identity != "none" else "portable"


def subagent_fork_fidelity(caps: ProviderCapabilities) -> Literal["native", "synthetic", "unavailable"]:
    """L6.4: a subagent's fork is native only when its runtime gives subagents provider threads it can fork;
    otherwise it is synthesised from the projected graph (lower fidelity)."""
    if not caps.subagents:
        return "unavailable"
    return "native" if fork_fidelity(caps) == "native" and caps.fork_subagent else "synthetic"


def view(caps: ProviderCapabilities) -> CapabilityView:
    # Without native interrupt the session can still be stopped (L8.3): destructive, but available.
    return CapabilityView(
        interrupt="available" if caps.interrupt else "destructive",
        steering="native" if caps.active_steering else "restart" if caps.interrupt else "queue_only",
        approvals="structured" if caps.approvals else "none",
        questions="structured" if caps.structured_questions else "text_only",
        plans="available" if (caps.todo_list or caps.proposed_plan) else "unavailable",
        terminal_status=caps.terminal_status,
        rollback="native" if caps.rollback else "fresh_thread",
        fork=fork_fidelity(caps),
        subagent_fork=subagent_fork_fidelity(caps),
        orchestrator="mcp" if caps.orchestrator else "none",
    )
