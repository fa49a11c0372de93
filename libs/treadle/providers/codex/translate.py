"""One Codex turn as Treadle sees it: app-server notifications and server requests of a turn, normalised
into provider events. The translator owns the turn's id maps (Codex item ids → Treadle node and message
ids) and nothing else; it never talks to the process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from treadle.core import provider_events as pe
from treadle.core.plans.model import TodoItem
from treadle.core.requests.model import FileEdit, Question, QuestionOption, action_prompt, clipped_diff

from ..base import Turn

_TODO_STATUS: dict[str, Literal["pending", "in_progress", "completed"]] = {
    "pending": "pending",
    "inProgress": "in_progress",
    "completed": "completed",
}
_ITEM_STATUS = {"completed": "completed", "failed": "failed", "declined": "cancelled", "inProgress": "running"}


@dataclass
class LiveRequest:
    """A server request waiting for the user; ``rpc_id`` is Codex's callback id."""

    rpc_id: int | str
    kind: str  # command | file_change | user_input
    question_ids: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    """What one message of the turn means: events to report, text to stream, and whether the turn ended."""

    events: list[pe.AnyBody] = field(default_factory=list)
    text: list[tuple[str, str]] = field(default_factory=list)  # (message id, chunk) live deltas
    text_done: list[tuple[str, str]] = field(default_factory=list)  # (message id, full text)
    opened: list[tuple[str, LiveRequest]] = field(default_factory=list)
    finished: pe.TurnCompleted | None = None


class TurnTranslator:
    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.native_turn_id: str | None = None
        self._messages: dict[str, str] = {}  # codex item id -> Treadle message id
        self._streamed: set[str] = set()
        self._joined: set[str] = set()  # steers (Treadle message ids) whose place in the turn was reported
        self._nodes: dict[str, str] = {}  # codex item id -> Treadle node id
        self._changes: dict[
            str, list[dict[str, Any]]
        ] = {}  # fileChange item id -> its changes, for its approval prompt
        self._edits: dict[str, list[FileEdit]] = {}  # fileChange item id -> the files it changes, with diffs
        self._commands: dict[str, str] = {}
        self._cwds: dict[str, str] = {}  # commandExecution item id -> its working directory
        self._todo_plan_id: str | None = None
        self._error: str | None = None
        self.usage: dict[str, Any] | None = None

    def mine(self, params: dict[str, Any]) -> bool:
        """A message of this turn: a message naming another turn is a leftover of an earlier one."""
        turn_id = params.get("turnId") or (params.get("turn") or {}).get("id")
        return turn_id is None or self.native_turn_id is None or turn_id == self.native_turn_id

    # --- notifications ------------------------------------------------------------------------

    def notification(self, method: str, params: dict[str, Any]) -> Outcome:
        out = Outcome()
        if method == "item/started":
            self._item_started(params.get("item") or {}, out)
        elif method == "item/completed":
            self._item_completed(params.get("item") or {}, out)
        elif method == "item/agentMessage/delta":
            message_id = self._messages.get(params.get("itemId", ""))
            if message_id and params.get("delta"):
                self._streamed.add(message_id)
                out.text.append((message_id, params["delta"]))
        elif method == "turn/plan/updated":
            if self._todo_plan_id is None:
                self._todo_plan_id = self.turn.ids.next("plan")
            items = [
                TodoItem(text=step.get("step", ""), status=_TODO_STATUS.get(step.get("status"), "pending"))
                for step in params.get("plan") or []
            ]
            out.events.append(
                pe.PlanUpdated(
                    plan_id=self._todo_plan_id,
                    kind="todo_list",
                    node_id=self.turn.root_node_id,
                    text=params.get("explanation") or "",
                    items=items,
                )
            )
        elif method == "error":
            message = ((params.get("error") or {}).get("message")) or "codex reported an error"
            if params.get("willRetry"):
                out.events.append(pe.Warning(message=message))  # L2.5: the turn goes on
            else:
                self._error = message  # the failed turn/completed repeats it
        elif method == "warning":
            message = params.get("message") or (params.get("error") or {}).get("message")
            if message:
                out.events.append(pe.Warning(message=str(message)))
        elif method == "thread/tokenUsage/updated":
            self.usage = params.get("tokenUsage")
        elif method == "turn/completed":
            turn = params.get("turn") or {}
            status = turn.get("status") or "failed"
            error = (turn.get("error") or {}).get("message") or self._error
            if status not in ("completed", "interrupted", "failed"):
                status, error = "failed", error or f"codex ended the turn with status {status!r}"
            out.finished = pe.TurnCompleted(status=status, error=error if status == "failed" else None)
        return out

    def _item_started(self, item: dict[str, Any], out: Outcome) -> None:
        kind, item_id = item.get("type"), item.get("id", "")
        if kind == "agentMessage":
            self._messages[item_id] = self.turn.ids.next("msg")
        elif kind == "userMessage":
            # The user's own text: a steer's (it carries the id Treadle gave it) says where it joined the turn
            steer = item.get("clientId")
            if isinstance(steer, str) and steer and steer not in self._joined:
                self._joined.add(steer)
                out.events.append(pe.SteerJoined(message_id=steer))
        elif kind in ("plan", "hookPrompt", "functionCallOutput"):
            return  # a proposed plan is reported whole when it completes
        elif kind == "commandExecution":
            command = _command_text(item)
            self._commands[item_id] = command
            if item.get("cwd"):
                self._cwds[item_id] = str(item["cwd"])
            self._start_node(item_id, command, {"command": command, "cwd": item.get("cwd")}, out)
        elif kind == "fileChange":
            changes = [
                {"path": c.get("path"), "kind": (c.get("kind") or {}).get("type")} for c in item.get("changes") or []
            ]
            self._changes[item_id] = changes
            self._edits[item_id] = [_file_edit(c) for c in item.get("changes") or []]
            title = "edit " + ", ".join(str(c["path"]).rsplit("/", 1)[-1] for c in changes)
            self._start_node(item_id, title, {"changes": changes}, out)
        elif kind == "reasoning":
            self._start_node(item_id, "reasoning", None, out, kind="reasoning")
        elif kind:
            self._start_node(item_id, _generic_title(item), {"type": kind}, out)

    def _start_node(
        self, item_id: str, title: str, data: dict[str, Any] | None, out: Outcome, kind: str = "tool"
    ) -> None:
        node_id = self.turn.ids.next("node")
        self._nodes[item_id] = node_id
        out.events.append(
            pe.ToolStarted(node_id=node_id, parent_id=self.turn.root_node_id, kind=kind, title=title, input=data)
        )

    def _item_completed(self, item: dict[str, Any], out: Outcome) -> None:
        kind, item_id = item.get("type"), item.get("id", "")
        if kind == "agentMessage":
            message_id = self._messages.pop(item_id, None) or self.turn.ids.next("msg")
            text = item.get("text") or ""
            if text or message_id in self._streamed:
                out.text_done.append((message_id, text))
            return
        if kind == "plan":
            text = item.get("text") or ""
            if text:
                out.events.append(
                    pe.PlanUpdated(
                        plan_id=self.turn.ids.next("plan"),
                        kind="proposed_plan",
                        node_id=self.turn.root_node_id,
                        text=text,
                    )
                )
            return
        node_id = self._nodes.pop(item_id, None)
        if node_id is None:
            return
        status = _ITEM_STATUS.get(item.get("status") or "completed", "completed")
        output: str | None = None
        if kind == "commandExecution":
            output = item.get("aggregatedOutput")
            if status == "completed" and item.get("exitCode") not in (None, 0):
                status = "failed"
            if item.get("status") == "declined":
                output = "declined: the command did not run"
        elif kind == "fileChange":
            output = "\n".join(c.get("diff") or "" for c in item.get("changes") or []) or None
            if item.get("status") == "declined":
                output = "declined: the change was not applied"
        elif kind == "reasoning":
            output = "\n".join([*(item.get("summary") or []), *(item.get("content") or [])]) or None
        out.events.append(pe.ToolCompleted(node_id=node_id, status=status, output=output))

    # --- server requests ----------------------------------------------------------------------

    def request(self, rpc_id: int | str, method: str, params: dict[str, Any]) -> Outcome | None:
        """A server request of this turn as a Treadle request, or None when Treadle cannot serve it."""
        ids, out = self.turn.ids, Outcome()
        request_id, node_id = ids.next("req"), ids.next("node")
        item_id = params.get("itemId") or ""
        # Codex's `reason` is the model's justification: the description, never the action.
        opened = pe.RequestOpened(
            request_id=request_id, node_id=node_id, kind="", description=params.get("reason") or None
        )
        if method == "item/commandExecution/requestApproval":
            opened.command = self._commands.get(item_id) or params.get("command") or ""
            opened.cwd = params.get("cwd") or self._cwds.get(item_id)
            opened.prompt = action_prompt(command=opened.command, cwd=opened.cwd)
            opened.detail = {"tool_node_id": self._nodes.get(item_id)}
            live = LiveRequest(rpc_id=rpc_id, kind="command")
        elif method == "item/fileChange/requestApproval":
            opened.files = self._edits.get(item_id, [])
            opened.prompt = action_prompt(files=opened.files) or "Change files"
            opened.detail = {"grant_root": params.get("grantRoot"), "tool_node_id": self._nodes.get(item_id)}
            live = LiveRequest(rpc_id=rpc_id, kind="file_change")
        elif method == "item/tool/requestUserInput":
            questions = params.get("questions") or []
            opened.questions = [
                Question(
                    id=str(q.get("id")),
                    header=str(q.get("header") or ""),
                    question=str(q.get("question") or ""),
                    options=[
                        QuestionOption(label=str(o.get("label") or ""), description=str(o.get("description") or ""))
                        for o in q.get("options") or []
                    ],
                    other=bool(q.get("isOther")),
                    secret=bool(q.get("isSecret")),
                )
                for q in questions
            ]
            opened.prompt = "\n".join(q.question for q in opened.questions)
            live = LiveRequest(rpc_id=rpc_id, kind="user_input", question_ids=[q.id for q in opened.questions])
        else:
            return None
        opened.kind = live.kind
        opened.native_ref = str(item_id or rpc_id)
        out.events.append(opened)
        out.opened.append((request_id, live))
        return out


def _file_edit(change: dict[str, Any]) -> FileEdit:
    """A change of a fileChange item: its path, kind (add, delete, update; a move names its target) and diff."""
    kind = change.get("kind") or {}
    move_to = kind.get("move_path") or kind.get("movePath")
    return FileEdit(
        path=str(change.get("path") or ""),
        change="move" if move_to else str(kind.get("type") or "update"),
        diff=clipped_diff(str(change.get("diff") or "")),
        move_to=str(move_to) if move_to else None,
    )


def _command_text(item: dict[str, Any]) -> str:
    actions = item.get("commandActions") or []
    if len(actions) == 1 and actions[0].get("command"):
        return str(actions[0]["command"])  # without codex's `/bin/bash -lc '…'` wrapper
    return str(item.get("command") or "")


def _generic_title(item: dict[str, Any]) -> str:
    kind = item.get("type", "tool")
    for key in ("tool", "query", "path", "name"):
        if item.get(key):
            return f"{kind}: {item[key]}"
    return str(kind)
