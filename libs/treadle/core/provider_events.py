"""Normalised provider events: what a provider host publishes on ``treadle.prov.<tenant>.<thread>.<pth>``.

Adapters translate their runtime's protocol into these; the run supervisor folds them into thread
events. Text arrives here already coalesced (the host publishes every raw delta on the live subject).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from treadle.core.plans.model import TodoItem
from treadle.core.requests.model import FileEdit, Question


class Body(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="type"):
    pass


class TurnStarted(Body, kw_only=True, tag="turn.started"):
    native_turn_ref: str | None = None


class TextDelta(Body, kw_only=True, tag="text.delta"):
    message_id: str
    node_id: str
    text: str


class TextCompleted(Body, kw_only=True, tag="text.completed"):
    message_id: str
    node_id: str
    text: str


class SteerJoined(Body, kw_only=True, tag="steer.joined"):
    """L3.2: the runtime took the steer ``message_id`` (Treadle's id, which it was given) into its conversation
    here: what it reported before comes before the steer."""

    message_id: str


class ToolStarted(Body, kw_only=True, tag="tool.started"):
    node_id: str
    parent_id: str | None = None
    kind: str = "tool"
    title: str = ""
    input: dict[str, Any] | None = None
    native_thread_ref: str | None = None  # L6.4: a subagent's own provider thread, when its runtime gives it one


class ToolCompleted(Body, kw_only=True, tag="tool.completed"):
    node_id: str
    status: str = "completed"
    output: str | None = None


class RequestOpened(Body, kw_only=True, tag="request.opened"):
    """An approval or a question, in the one shape of every runtime (``treadle.core.requests.model``)."""

    request_id: str
    node_id: str
    parent_id: str | None = None  # the node that asked, when not the root turn (a subagent)
    kind: str
    prompt: str = ""
    detail: dict[str, Any] | None = None
    native_ref: str | None = None
    description: str | None = None
    command: str | None = None
    cwd: str | None = None
    files: list[FileEdit] = []
    questions: list[Question] = []


class PlanUpdated(Body, kw_only=True, tag="plan.updated"):
    plan_id: str
    kind: str
    node_id: str | None = None
    text: str = ""
    items: list[TodoItem] = []


class Warning(Body, kw_only=True, tag="warning"):
    """A provider error that does not end the run (L2.5)."""

    message: str


class TurnCompleted(Body, kw_only=True, tag="turn.completed"):
    status: str = "completed"  # completed | failed | interrupted
    error: str | None = None


class SessionStopped(Body, kw_only=True, tag="session.stopped"):
    """L9.3: the live runtime is gone (crash, host restart, reaper); the provider thread survives."""

    reason: str
    boot_id: str | None = None
    detail: str | None = None  # how the runtime ended (one clean line), when it died under a turn


AnyBody = (
    TurnStarted
    | TextDelta
    | TextCompleted
    | SteerJoined
    | ToolStarted
    | ToolCompleted
    | RequestOpened
    | PlanUpdated
    | Warning
    | TurnCompleted
    | SessionStopped
)


class ProviderEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    tenant: str
    thread: str
    session_id: str
    provider_thread_id: str | None = None
    run_id: str | None = None
    attempt_id: str | None = None
    index: int = 0  # 1, 2, … within one play of a turn; 0: not part of a turn's sequence (session events)
    at: datetime
    body: AnyBody
    then: list[AnyBody] = []  # what followed ``body`` in the same burst, numbered index + 1, index + 2, …

    def parts(self) -> list[ProviderEvent]:
        """One event per body, as if each had been sent alone (the first keeps this event's id)."""
        if not self.then:
            return [self]
        first = msgspec.structs.replace(self, then=[])
        return [first] + [
            msgspec.structs.replace(first, id=f"{self.id}.{i}", index=self.index + i, body=body)
            for i, body in enumerate(self.then, 1)
        ]


provider_event_decoder = msgspec.json.Decoder(ProviderEvent)


class LiveDelta(msgspec.Struct, kw_only=True):
    """What UIs receive on ``treadle.live.<tenant>.<thread>`` for every raw delta (best effort)."""

    run_id: str
    attempt_id: str
    message_id: str
    node_id: str
    text: str
