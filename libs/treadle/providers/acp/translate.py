"""One ACP prompt turn as Treadle sees it: ``session/update`` notifications and permission requests of a turn,
normalised into provider events. The translator owns the turn's id maps (ACP tool call ids → Treadle nodes,
the open assistant message) and nothing else; it never talks to the process."""

from __future__ import annotations

import difflib
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from treadle.core import provider_events as pe
from treadle.core.plans.model import TodoItem
from treadle.core.requests.model import FileEdit, action_prompt, clipped_diff

from ..base import Turn

_TODO: dict[str, Literal["pending", "in_progress", "completed"]] = {
    "pending": "pending",
    "in_progress": "in_progress",
    "completed": "completed",
}
# ACP tool kinds -> Treadle approval kinds
_REQUEST_KIND = {"execute": "command", "edit": "file_change", "delete": "file_change", "move": "file_change"}
_READS = {"read", "search", "fetch"}
MAX_PROMPT_CHARS = 2000
_STOPS = {
    "end_turn": "completed",
    "cancelled": "interrupted",
    "max_tokens": "completed",
    "max_turn_requests": "completed",
}


@dataclass
class LiveRequest:
    """A permission request waiting for the user: the agent's callback id and the options it offered."""

    rpc_id: int | str
    options: list[dict[str, Any]]


@dataclass
class Outcome:
    events: list[pe.AnyBody] = field(default_factory=list)
    text: list[tuple[str, str]] = field(default_factory=list)  # (message id, chunk)
    text_done: list[tuple[str, str]] = field(default_factory=list)  # (message id, full text)
    opened: list[tuple[str, LiveRequest]] = field(default_factory=list)


class TurnTranslator:
    def __init__(self, turn: Turn, cwd: str) -> None:
        self.turn = turn
        self.cwd = cwd
        self._message: tuple[str, list[str]] | None = None  # the open assistant message: id, its chunks
        self._thought: tuple[str, list[str]] | None = None  # the open reasoning node: id, its chunks
        self._nodes: dict[str, str] = {}  # ACP tool call id -> Treadle node id
        self._calls: dict[str, dict[str, Any]] = {}  # ACP tool call id -> what is known of it (merged updates)
        self._plan_id: str | None = None

    # --- session/update ---------------------------------------------------------------------------

    def update(self, update: dict[str, Any]) -> Outcome:
        out = Outcome()
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            self._close_thought(out)
            chunk = _text(update.get("content"))
            if chunk:
                if self._message is None:
                    self._message = (self.turn.ids.next("msg"), [])
                self._message[1].append(chunk)
                out.text.append((self._message[0], chunk))
        elif kind == "agent_thought_chunk":
            self._close_message(out)
            chunk = _text(update.get("content"))
            if chunk:
                if self._thought is None:
                    node = self.turn.ids.next("node")
                    self._thought = (node, [])
                    out.events.append(
                        pe.ToolStarted(
                            node_id=node, parent_id=self.turn.root_node_id, kind="reasoning", title="reasoning"
                        )
                    )
                self._thought[1].append(chunk)
        elif kind in ("tool_call", "tool_call_update"):
            self._close_message(out)
            self._close_thought(out)
            self._tool(update, out)
        elif kind == "plan":
            self._close_thought(out)
            if self._plan_id is None:
                self._plan_id = self.turn.ids.next("plan")
            items = [
                TodoItem(text=str(e.get("content") or ""), status=_TODO.get(e.get("status") or "", "pending"))
                for e in update.get("entries") or []
                if isinstance(e, dict)
            ]
            out.events.append(
                pe.PlanUpdated(plan_id=self._plan_id, kind="todo_list", node_id=self.turn.root_node_id, items=items)
            )
        # user_message_chunk (a loaded session's replay), usage, commands, modes, config: nothing to report
        return out

    def _tool(self, update: dict[str, Any], out: Outcome) -> None:
        call_id = str(update.get("toolCallId") or "")
        known = self._calls.setdefault(call_id, {})
        known.update({k: v for k, v in update.items() if v not in (None, [], {}) or k == "status"})
        node = self._nodes.get(call_id)
        if node is None:
            node = self._nodes[call_id] = self.turn.ids.next("node")
            out.events.append(
                pe.ToolStarted(
                    node_id=node,
                    parent_id=self.turn.root_node_id,
                    title=str(known.get("title") or known.get("kind") or "tool"),
                    input=_tool_input(known),
                )
            )
        status = update.get("status")
        if status in ("completed", "failed"):
            out.events.append(pe.ToolCompleted(node_id=node, status=status, output=_tool_output(known)))
            self._nodes[call_id] = node  # a later update of a finished call changes nothing
            self._calls[call_id]["done"] = True

    def _close_message(self, out: Outcome) -> None:
        if self._message is not None:
            message_id, chunks = self._message
            out.text_done.append((message_id, "".join(chunks)))
            self._message = None

    def _close_thought(self, out: Outcome) -> None:
        if self._thought is not None:
            node, chunks = self._thought
            out.events.append(pe.ToolCompleted(node_id=node, output="".join(chunks)))
            self._thought = None

    def finish(self, stop_reason: str | None, error: str | None = None) -> Outcome:
        """The prompt's answer: close what is open, then the turn's terminal status (L2.3)."""
        out = Outcome()
        if stop_reason != "cancelled":  # a cut-off message stays open: the finalization marks it incomplete
            self._close_message(out)
        self._close_thought(out)
        for call_id, node in self._nodes.items():  # a call the agent never finished (cancelled turn)
            if not self._calls.get(call_id, {}).get("done"):
                out.events.append(pe.ToolCompleted(node_id=node, status="cancelled"))
        if error is not None:
            out.events.append(pe.TurnCompleted(status="failed", error=error))
        elif stop_reason == "refusal":
            out.events.append(pe.TurnCompleted(status="failed", error="the agent refused to continue"))
        else:
            status = _STOPS.get(stop_reason or "", "completed")
            if stop_reason in ("max_tokens", "max_turn_requests"):
                out.events.append(pe.Warning(message=f"the agent stopped: {stop_reason}"))
            out.events.append(pe.TurnCompleted(status=status))
        return out

    # --- session/request_permission ---------------------------------------------------------------

    def permission(self, rpc_id: int | str, params: dict[str, Any]) -> Outcome:
        """A permission request as a Treadle approval in the one request shape: the exact ``command`` and its
        ``cwd``, or the ``files`` with a diff each (paths relative to the workspace: the host's own path is
        never shown), the model's words as ``description``, and the agent's options as they were offered."""
        out = Outcome()
        call = dict(params.get("toolCall") or {})
        call_id = str(call.get("toolCallId") or "")
        known = {**self._calls.get(call_id, {}), **{k: v for k, v in call.items() if v not in (None, [], {})}}
        options = offered_options(params)
        acp_kind = known.get("kind") or "other"
        kind = _REQUEST_KIND.get(acp_kind, "file_read" if acp_kind in _READS else "command")
        given = known.get("rawInput")
        raw: dict[str, Any] = given if isinstance(given, dict) else {}
        title = str(known.get("title") or "")
        detail: dict[str, Any] = {"tool": acp_kind, "title": title, "options": options}
        if call_id in self._nodes:
            detail["tool_node_id"] = self._nodes[call_id]
        opened = pe.RequestOpened(
            request_id=self.turn.ids.next("req"),
            node_id=self.turn.ids.next("node"),
            kind=kind,
            detail=detail,
            native_ref=call_id or str(rpc_id),
            description=_description(known, raw),
        )
        command = _command(raw) if acp_kind == "execute" or kind == "command" else None
        paths, diffs = _changes(known, raw, self._shown)
        if command is not None:
            opened.command = command
            opened.cwd = self._shown(str(raw.get("cwd") or self.cwd))
            opened.prompt = action_prompt(command=command, cwd=None if opened.cwd == "." else opened.cwd)
        elif paths:
            if kind == "file_change":
                opened.files = [FileEdit(path=p, diff=clipped_diff(diffs.get(p, ""))) for p in paths]
                opened.prompt = action_prompt(files=opened.files)
            else:
                detail["paths"] = paths
                opened.prompt = _clip("Read " + ", ".join(paths))
        else:  # an agent's own tool (an MCP tool, a fetch): the tool and what it acts on
            opened.prompt = _clip(" ".join(filter(None, [title or acp_kind, _target(raw)])) or "tool call")
        out.events.append(opened)
        out.opened.append((opened.request_id, LiveRequest(rpc_id=rpc_id, options=options)))
        return out

    def _shown(self, path: str) -> str:
        """``path`` relative to the workspace (``.`` for the workspace itself); a path outside it whole, without
        ``..`` (what it names, not how the model spelt it)."""
        if not path.startswith("/"):
            return path
        whole = os.path.normpath(path)
        rel = os.path.relpath(whole, self.cwd)
        return whole if rel == ".." or rel.startswith("../") else rel


_CODEX_MCP_ASK = re.compile(r'Allow the (.+) MCP server to run tool "(.+)"\?')


def mcp_call_of(params: dict[str, Any]) -> tuple[str, str] | None:
    """(server, tool) when a permission request asks to call an MCP tool, as the agent names them; None for
    any other call. Read from what the agent itself writes, never from the model's words: claude-agent-acp
    titles the call with Claude Code's tool name ``mcp__<server>__<tool>`` (kind ``other``: a command's or a
    task's title is the model's text, and has another kind); codex-acp asks as Codex's MCP tool-call
    elicitation, the server in ``server_name`` and the tool in Codex's own question."""
    call = _dict(params.get("toolCall"))
    raw = _dict(call.get("rawInput"))
    request = _dict(raw.get("request"))
    meta = _dict(request.get("_meta"))
    if meta.get("codex_approval_kind") == "mcp_tool_call" and isinstance(raw.get("server_name"), str):
        asked = _CODEX_MCP_ASK.fullmatch(str(request.get("message") or ""))
        if asked and asked.group(1) == raw["server_name"]:
            return raw["server_name"], asked.group(2)
        return None
    title = str(call.get("title") or "")
    if call.get("kind") == "other" and title.startswith("mcp__"):
        server, sep, tool = title.removeprefix("mcp__").partition("__")
        if sep and server and tool:
            return server, tool
    return None


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def offered_options(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The options of a permission request: ``{id, label, kind}`` each, as the agent offered them."""
    return [
        {"id": str(o.get("optionId")), "label": str(o.get("name") or o.get("optionId")), "kind": o.get("kind")}
        for o in params.get("options") or []
        if isinstance(o, dict) and o.get("optionId") is not None
    ]


def _text(content: object) -> str:
    if isinstance(content, dict) and content.get("type") == "text":
        return str(content.get("text") or "")
    return ""


def _tool_input(call: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": call.get("kind")}
    if call.get("rawInput"):
        data["input"] = call["rawInput"]
    locations = [loc.get("path") for loc in call.get("locations") or [] if isinstance(loc, dict)]
    if locations:
        data["paths"] = locations
    return data


def _tool_output(call: dict[str, Any]) -> str | None:
    texts = []
    for item in call.get("content") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "content":
            texts.append(_text(item.get("content")))
        elif item.get("type") == "diff":
            texts.append(_diff(item))
    joined = "\n".join(t for t in texts if t)
    if joined:
        return joined
    raw = call.get("rawOutput")
    if isinstance(raw, dict):
        raw = raw.get("formatted_output") or raw.get("aggregated_output") or raw.get("stdout")
    return str(raw) if raw else None


def _command(raw: dict[str, Any]) -> str | None:
    command = raw.get("command")
    if isinstance(command, list) and command:
        words = [str(w) for w in command]
        if len(words) == 3 and words[1] in ("-lc", "-c") and words[0].endswith("sh"):
            return words[2]  # without the agent's `bash -lc` wrapper: what the shell runs
        return shlex.join(words)
    if isinstance(command, str) and command:
        return command
    return None


def _changes(
    call: dict[str, Any], raw: dict[str, Any], shown: Callable[[str], str]
) -> tuple[list[str], dict[str, str]]:
    """The paths a call touches as ``shown`` writes them, and the diff of each the agent showed."""
    paths: list[str] = []
    diffs: dict[str, str] = {}
    for item in call.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "diff" and item.get("path"):
            path = shown(str(item["path"]))
            if path not in paths:
                paths.append(path)
            diffs[path] = diffs.get(path, "") + _diff({**item, "path": path})
    for loc in call.get("locations") or []:
        if isinstance(loc, dict) and loc.get("path") and shown(str(loc["path"])) not in paths:
            paths.append(shown(str(loc["path"])))
    for key in ("file_path", "path", "notebook_path"):
        if isinstance(raw.get(key), str) and raw[key] and shown(raw[key]) not in paths:
            paths.append(shown(raw[key]))
    if not diffs and isinstance(raw.get("content"), str) and paths:
        diffs[paths[0]] = _diff({"path": paths[0], "oldText": None, "newText": raw["content"]})
    return paths, diffs


def _target(raw: dict[str, Any]) -> str:
    """What a tool that is neither a command nor a file acts on, from its input."""
    for key in ("url", "query", "pattern"):
        if isinstance(value := raw.get(key), str) and value:
            return value
    return ""


def _clip(text: str) -> str:
    return text if len(text) <= MAX_PROMPT_CHARS else text[: MAX_PROMPT_CHARS - 1] + "…"


def _diff(item: dict[str, Any]) -> str:
    path = str(item.get("path") or "file")
    old = str(item.get("oldText") or "").splitlines(keepends=True)
    new = str(item.get("newText") or "").splitlines(keepends=True)
    before = path if item.get("oldText") is not None else "/dev/null"
    return "".join(difflib.unified_diff(old, new, before, path))


def _description(call: dict[str, Any], raw: dict[str, Any]) -> str | None:
    """What the model said the call is for: secondary to the action itself (issue 25)."""
    for key in ("description", "reason", "justification"):
        if isinstance(value := raw.get(key), str) and value:
            return value
    texts = [
        _text(i.get("content")) for i in call.get("content") or [] if isinstance(i, dict) and i.get("type") == "content"
    ]
    return "\n".join(t for t in texts if t) or None
