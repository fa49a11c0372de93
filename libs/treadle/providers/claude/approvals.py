"""Claude Code's permission callback (``can_use_tool``) as Treadle runtime requests (L11).

The CLI asks before a tool runs; the callback opens a request through the turn's sink and waits for
``respond``. A question (``AskUserQuestion``) is a ``user_input`` request whose answers go back to the
CLI inside the tool's input. Requests are live only: once the callback is gone (the turn ended, the
process died) an answer is refused with ``Unsupported``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny, ToolPermissionContext

from treadle.core import provider_events as pe

from ..base import Response, Unsupported
from .translate import TurnTranslator, tool_title

log = logging.getLogger(__name__)

FILE_CHANGE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
FILE_READ_TOOLS = frozenset({"Read", "Glob", "Grep", "LS"})
PLAN_HANDED_OVER = (
    "The plan is now shown to the user as a proposed plan. Do not implement it in this turn: "
    "the user starts its implementation with a new message if they accept it. End your turn."
)


def request_kind(tool_name: str) -> str:
    if tool_name in FILE_CHANGE_TOOLS:
        return "file_change"
    if tool_name in FILE_READ_TOOLS:
        return "file_read"
    return "command"


class Approvals:
    def __init__(self) -> None:
        self.turn: TurnTranslator | None = None  # the playing turn; the adapter sets and clears it
        self._pending: dict[str, asyncio.Future[Response]] = {}
        # request id -> the keys its answers may use (question ids and texts); approvals have none
        self._questions: dict[str, frozenset[str]] = {}

    @property
    def pending(self) -> list[str]:
        return [r for r, f in self._pending.items() if not f.done()]

    async def can_use_tool(self, tool_name: str, tool_input: dict[str, Any], ctx: ToolPermissionContext):
        turn = self.turn
        if turn is None or turn.finished:
            return PermissionResultDeny(message="No Treadle turn is playing; the tool call was refused.")
        if tool_name == "ExitPlanMode":
            return PermissionResultDeny(message=PLAN_HANDED_OVER)  # the translator already published the plan
        if tool_name == "AskUserQuestion":
            return await self._question(turn, tool_input, ctx)
        return await self._approval(turn, tool_name, tool_input, ctx)

    async def _approval(self, turn: TurnTranslator, tool_name: str, tool_input: dict, ctx: ToolPermissionContext):
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
        prompt = ctx.title or ctx.description or tool_title(ctx.display_name or tool_name, tool_input)
        answer = await self._ask(turn, request_kind(tool_name), prompt, detail, ctx.tool_use_id)
        if answer.decision == "accept":
            return PermissionResultAllow()
        if answer.decision == "accept_for_session":
            # The CLI suggests where to keep the rule (often the workspace's .claude/settings.local.json);
            # "for this session" must not write into the user's repository, so every rule stays in memory.
            rules = [dataclasses.replace(s, destination="session") for s in ctx.suggestions]
            return PermissionResultAllow(updated_permissions=rules)
        message = answer.message or f"The user declined this {tool_name} call."
        return PermissionResultDeny(message=message, interrupt=answer.decision == "cancel")

    async def _question(self, turn: TurnTranslator, tool_input: dict, ctx: ToolPermissionContext):
        questions = [q for q in tool_input.get("questions") or [] if isinstance(q, dict) and q.get("question")]
        shown = [
            {
                "id": str(i),
                "question": q["question"],
                "header": q.get("header", ""),
                "multi_select": bool(q.get("multiSelect")),
                "options": [
                    {"label": o.get("label", ""), "description": o.get("description", "")}
                    for o in q.get("options") or []
                    if isinstance(o, dict)
                ],
            }
            for i, q in enumerate(questions)
        ]
        prompt = "\n".join(q["question"] for q in questions) or "Claude has a question"
        detail = {"questions": shown, "parent_node_id": turn.node_of_agent(ctx.agent_id)}
        keys = frozenset([q["id"] for q in shown] + [q["question"] for q in shown])
        answer = await self._ask(turn, "user_input", prompt, detail, ctx.tool_use_id, answer_keys=keys)
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
        detail: dict,
        native_ref: str | None,
        answer_keys: frozenset[str] | None = None,
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
