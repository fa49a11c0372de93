"""The scripted provider's script format (documented in docs/providers.md).

A script is data, so it lives in the core: the coordinator validates it when a message is sent and the
scripted adapter plays it. Every step is a tagged object; unknown fields are rejected so typos fail loudly.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from treadle.core.plans.model import TodoItem
from treadle.core.providers.capabilities import PROFILES
from treadle.core.providers.model import ProviderCapabilities


class Step(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type"):
    pass


class Text(Step, kw_only=True, tag="text"):
    """Assistant text, streamed in chunks of ``chunk`` characters with ``delay_ms`` between them."""

    text: str
    chunk: int = 16
    delay_ms: int = 0


class Tool(Step, kw_only=True, tag="tool"):
    name: str
    input: dict[str, Any] = {}
    output: str = ""
    status: Literal["completed", "failed"] = "completed"
    delay_ms: int = 0


class WriteFile(Step, kw_only=True, tag="write_file"):
    path: str
    content: str


class Delay(Step, kw_only=True, tag="delay"):
    ms: int


class FileEdit(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    path: str
    change: Literal["add", "update", "delete", "move", "write"] = "update"
    diff: str = ""
    move_to: str | None = None


class Approval(Step, kw_only=True, tag="approval"):
    """``command`` (run in ``cwd``, the workspace when not given) or ``files`` is the action; ``prompt`` then
    plays the model's description of it. Without either, ``prompt`` is shown as it is."""

    kind: Literal["command", "file_change", "file_read", "patch"] = "command"
    prompt: str = ""
    detail: dict[str, Any] = {}
    command: str | None = None
    cwd: str | None = None
    files: list[FileEdit] = []


class Option(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    label: str
    description: str = ""


class Question(Step, kw_only=True, tag="question"):
    prompt: str
    options: list[str | Option] = []


class Todo(Step, kw_only=True, tag="todo"):
    items: list[TodoItem]


class ProposedPlan(Step, kw_only=True, tag="plan"):
    text: str


class Subagent(Step, kw_only=True, tag="subagent"):
    title: str = "subagent"
    steps: list[AnyStep] = []


class Fail(Step, kw_only=True, tag="fail"):
    message: str = "scripted failure"
    fatal: bool = True


class Hang(Step, kw_only=True, tag="hang"):
    """Never finishes on its own: only an interrupt or a crash ends the turn."""


class Crash(Step, kw_only=True, tag="crash"):
    """The provider runtime dies under the turn (L9.3): the session is stopped and the run retried."""


class Echo(Step, kw_only=True, tag="echo"):
    """Answers with the turn's whole input as the provider received it (context handoffs included), so a test
    can read what context a run was given."""

    prefix: str = "Received: "


class Recall(Step, kw_only=True, tag="recall"):
    """Answers with what the provider thread remembers: the inputs of its earlier turns, oldest first, as a
    JSON list, so a test can read which turns a provider conversation still holds (e.g. after a rollback)."""

    prefix: str = "Remembered: "


AnyStep = (
    Text
    | Tool
    | WriteFile
    | Delay
    | Approval
    | Question
    | Todo
    | ProposedPlan
    | Subagent
    | Fail
    | Hang
    | Crash
    | Echo
    | Recall
)


class Script(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    steps: list[AnyStep] = []
    profile: str | None = None  # a named capability profile (providers.capabilities.PROFILES)
    capabilities: ProviderCapabilities | None = None  # or a profile spelled out


MAX_STEPS = 10_000
MAX_DELAY_MS = 600_000


def parse_script(raw: dict[str, Any] | None) -> Script | None:
    """Validate a user-supplied script; raises ``ValueError`` with a readable reason."""
    if raw is None:
        return None
    try:
        script = msgspec.convert(raw, Script)
    except msgspec.ValidationError as exc:
        raise ValueError(f"invalid script: {exc}") from None
    _check_steps(script.steps, depth=0)
    if script.profile is not None:
        if script.profile not in PROFILES:
            raise ValueError(f"invalid script: profile must be one of {', '.join(PROFILES)}")
        script.capabilities = script.capabilities or PROFILES[script.profile]
    return script


def _check_steps(steps: list[Any], depth: int) -> None:
    if depth > 3:
        raise ValueError("invalid script: subagents nest at most 3 deep")
    if len(steps) > MAX_STEPS:
        raise ValueError(f"invalid script: at most {MAX_STEPS} steps")
    for step in steps:
        if isinstance(step, Text) and step.chunk < 1:
            raise ValueError("invalid script: text.chunk must be ≥ 1")
        delay = getattr(step, "delay_ms", None) if not isinstance(step, Delay) else step.ms
        if delay is not None and not 0 <= delay <= MAX_DELAY_MS:
            raise ValueError(f"invalid script: delays are 0..{MAX_DELAY_MS} ms")
        if isinstance(step, WriteFile) and (step.path.startswith("/") or ".." in step.path.split("/")):
            raise ValueError("invalid script: write_file.path must stay inside the workspace")
        if isinstance(step, Subagent):
            _check_steps(step.steps, depth + 1)
