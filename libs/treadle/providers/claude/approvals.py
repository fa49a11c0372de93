"""Claude Code's permission callback (``can_use_tool``) as Treadle runtime requests (L11).

The CLI asks before a tool runs; the callback opens a request through the turn's sink and waits for
``respond``. A question (``AskUserQuestion``) is a ``user_input`` request whose answers go back to the
CLI inside the tool's input. Requests are live only: once the callback is gone (the turn ended, the
process died) an answer is refused with ``Unsupported``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import json
import logging
from typing import Any

from claude_agent_sdk import PermissionResult, PermissionResultAllow, PermissionResultDeny, ToolPermissionContext

from treadle.core import provider_events as pe
from treadle.core.requests.model import FileEdit, Question, QuestionOption, action_prompt, clipped_diff

from ..base import Response, Unsupported
from .translate import TurnTranslator

log = logging.getLogger(__name__)

FILE_CHANGE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
FILE_READ_TOOLS = frozenset({"Read", "Glob", "Grep", "LS"})
PLAN_HANDED_OVER = (
    "The plan is now shown to the user as a proposed plan. Do not implement it in this turn: "
    "the user starts its implementation with a new message if they accept it. End your turn."
)


MAX_PROMPT_CHARS = 2000


def request_kind(tool_name: str) -> str:
    if tool_name in FILE_CHANGE_TOOLS:
        return "file_change"
    if tool_name in FILE_READ_TOOLS:
        return "file_read"
    return "command"


def _diff(path: str, old: str, new: str) -> str:
    """A unified diff of ``old`` → ``new`` as the tool's input states them (an Edit's hunks are relative to the
    replaced text, not numbered in the file: the workspace's files are never read here)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path.lstrip('/')}", f"b/{path.lstrip('/')}"
    )
    return clipped_diff("".join(line if line.endswith("\n") else line + "\n" for line in lines))


def file_edits(tool_name: str, tool_input: dict[str, Any]) -> list[FileEdit]:
    """What an editing tool call would change, from its input alone."""
    path = str(tool_input.get("file_path") or tool_input.get("notebook_path") or "")
    if tool_name == "Write":
        return [FileEdit(path=path, change="write", diff=_diff(path, "", str(tool_input.get("content") or "")))]
    if tool_name == "Edit":
        old, new = str(tool_input.get("old_string") or ""), str(tool_input.get("new_string") or "")
        return [FileEdit(path=path, diff=_diff(path, old, new))]
    if tool_name == "MultiEdit":
        edits = [e for e in tool_input.get("edits") or [] if isinstance(e, dict)]
        diff = clipped_diff(
            "".join(_diff(path, str(e.get("old_string") or ""), str(e.get("new_string") or "")) for e in edits)
        )
        return [FileEdit(path=path, diff=diff)]
    if tool_name == "NotebookEdit":
        mode = str(tool_input.get("edit_mode") or "replace")
        new = "" if mode == "delete" else str(tool_input.get("new_source") or "")
        return [FileEdit(path=path, diff=_diff(path, "", new))]
    return []


def tool_action(tool_name: str, tool_input: dict[str, Any]) -> str:
    """The action of a tool call that is neither a shell command nor an edit: the tool and what it acts on
    (the input's target, else the whole input), never the model's description of it."""
    target = next((tool_input[k] for k in ("file_path", "path", "pattern", "url", "query") if tool_input.get(k)), None)
    if target is not None and tool_name in ("Grep", "Glob") and tool_input.get("path"):
        target = f"{tool_input.get('pattern')} in {tool_input['path']}"
    shown = str(target) if target is not None else json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
    text = f"{tool_name} {shown}"
    return text if len(text) <= MAX_PROMPT_CHARS else text[: MAX_PROMPT_CHARS - 1] + "…"


class Approvals:
    def __init__(self, workspace: str | None = None) -> None:
        # Every Bash command starts in the workspace (CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR): its exact cwd
        self._workspace = workspace
        self.turn: TurnTranslator | None = None  # the playing turn; the adapter sets and clears it
        self._pending: dict[str, asyncio.Future[Response]] = {}
        # request id -> the keys its answers may use (question ids and texts); approvals have none
        self._questions: dict[str, frozenset[str]] = {}

    @property
    def pending(self) -> list[str]:
        return [r for r, f in self._pending.items() if not f.done()]

    async def can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], ctx: ToolPermissionContext
    ) -> PermissionResult:
        turn = self.turn
        if turn is None or turn.finished:
            return PermissionResultDeny(message="No Treadle turn is playing; the tool call was refused.")
        if tool_name == "ExitPlanMode":
            return PermissionResultDeny(message=PLAN_HANDED_OVER)  # the translator already published the plan
        if tool_name == "AskUserQuestion":
            return await self._question(turn, tool_input, ctx)
        return await self._approval(turn, tool_name, tool_input, ctx)

    async def _approval(
        self, turn: TurnTranslator, tool_name: str, tool_input: dict[str, Any], ctx: ToolPermissionContext
    ) -> PermissionResult:
        detail: dict[str, Any] = {
            "tool": tool_name,
            "input": tool_input,
            "parent_node_id": turn.node_of_agent(ctx.agent_id),
        }
        tool_node = turn.tool_node(ctx.tool_use_id)
        if tool_node:
            detail["tool_node_id"] = tool_node
        if ctx.blocked_path:
            detail["blocked_path"] = ctx.blocked_path
        if ctx.decision_reason:
            detail["reason"] = ctx.decision_reason
        if ctx.suggestions:
            detail["suggestions"] = [s.to_dict() for s in ctx.suggestions]
        action: dict[str, Any] = {}
        if tool_name == "Bash" and isinstance(tool_input.get("command"), str):
            action = {"command": tool_input["command"], "cwd": self._workspace}
            prompt = action_prompt(**action)
        elif tool_name in FILE_CHANGE_TOOLS:
            action = {"files": file_edits(tool_name, tool_input)}
            prompt = action_prompt(**action) or tool_action(tool_name, tool_input)
        else:
            prompt = tool_action(ctx.display_name or tool_name, tool_input)
        # The model's words: the CLI's title or description of the call, or the description the model gave it.
        said = ctx.title or ctx.description or tool_input.get("description")
        answer = await self._ask(
            turn,
            request_kind(tool_name),
            prompt,
            detail,
            ctx.tool_use_id,
            description=str(said) if said else None,
            **action,
        )
        if answer.decision == "accept":
            return PermissionResultAllow()
        if answer.decision == "accept_for_session":
            # The CLI suggests where to keep the rule (often the workspace's .claude/settings.local.json);
            # "for this session" must not write into the user's repository, so every rule stays in memory.
            rules = [dataclasses.replace(s, destination="session") for s in ctx.suggestions]
            return PermissionResultAllow(updated_permissions=rules)
        message = answer.message or f"The user declined this {tool_name} call."
        return PermissionResultDeny(message=message, interrupt=answer.decision == "cancel")

    async def _question(
        self, turn: TurnTranslator, tool_input: dict[str, Any], ctx: ToolPermissionContext
    ) -> PermissionResult:
        questions = [q for q in tool_input.get("questions") or [] if isinstance(q, dict) and q.get("question")]
        shown = [
            Question(
                id=str(i),
                question=str(q["question"]),
                header=str(q.get("header") or ""),
                multi_select=bool(q.get("multiSelect")),
                options=[
                    QuestionOption(label=str(o.get("label") or ""), description=str(o.get("description") or ""))
                    for o in q.get("options") or []
                    if isinstance(o, dict)
                ],
            )
            for i, q in enumerate(questions)
        ]
        prompt = "\n".join(q.question for q in shown) or "Claude has a question"
        detail = {"parent_node_id": turn.node_of_agent(ctx.agent_id)}
        keys = frozenset([q.id for q in shown] + [q.question for q in shown])
        answer = await self._ask(turn, "user_input", prompt, detail, ctx.tool_use_id, answer_keys=keys, questions=shown)
        if answer.decision in ("decline", "cancel") or not answer.answers:
            return PermissionResultDeny(
                message=answer.message or "The user did not answer.", interrupt=answer.decision == "cancel"
            )
        answers = {}
        for i, q in enumerate(questions):  # answers are keyed by question id, or by the question itself
            value = answer.answers.get(str(i), answer.answers.get(q["question"]))
            if value is not None:
                answers[q["question"]] = value
        return PermissionResultAllow(updated_input={**tool_input, "answers": answers})

    async def _ask(
        self,
        turn: TurnTranslator,
        kind: str,
        prompt: str,
        detail: dict[str, Any],
        native_ref: str | None,
        answer_keys: frozenset[str] | None = None,
        *,
        description: str | None = None,
        command: str | None = None,
        cwd: str | None = None,
        files: list[FileEdit] | None = None,
        questions: list[Question] | None = None,
    ) -> Response:
        request_id, node_id = turn.turn.ids.next("req"), turn.turn.ids.next("node")
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        if answer_keys is not None:
            self._questions[request_id] = answer_keys
        try:
            await turn.sink.event(
                pe.RequestOpened(
                    request_id=request_id,
                    node_id=node_id,
                    kind=kind,
                    prompt=prompt,
                    detail=detail,
                    native_ref=native_ref,
                    parent_id=detail.pop("parent_node_id", None),
                    description=description,
                    command=command,
                    cwd=cwd,
                    files=files or [],
                    questions=questions or [],
                )
            )
            return await future  # the CLI cancels this wait when the turn is interrupted
        finally:
            self._pending.pop(request_id, None)
            self._questions.pop(request_id, None)

    def respond(self, request_id: str, response: Response) -> None:
        future = self._pending.get(request_id)
        if future is None or future.done():
            raise Unsupported(f"request {request_id} is not live (its Claude Code callback is gone)")
        if response.decision is None and response.answers is None and response.message is None:
            raise ValueError("a response needs a decision, answers or a message")
        keys = self._questions.get(request_id)
        # Refused before it reaches the CLI, whose callback keeps waiting: an answer to a question that was not
        # asked would otherwise be dropped, and the agent told the user chose nothing.
        unknown = sorted(set(response.answers or ()) - keys) if keys is not None else []
        if unknown:
            raise ValueError(f"no such question: {', '.join(unknown)}")
        future.set_result(response)

    def abandon(self) -> None:
        """The process is gone: every waiting callback is cancelled, so its request cannot be answered."""
        for future in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()
        self._questions.clear()
