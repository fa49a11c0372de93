"""One Claude Code turn, translated message by message into Treadle's provider events.

Claude Code streams a turn as SDK messages: raw API stream events (text deltas), whole assistant
messages (text, thinking, tool calls), user messages (tool results), task messages (subagents) and a
final ``ResultMessage``. Everything a subagent says carries ``parent_tool_use_id``, the id of the
``Agent`` call that started it, so its events land under that call's node.
"""

from __future__ import annotations

from typing import Any, Literal

from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TaskNotificationMessage,
    TaskStartedMessage,
    TaskUpdatedMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from treadle.core import provider_events as pe
from treadle.core.plans.model import TodoItem

from ..base import Turn, TurnSink

SUBAGENT_TOOLS = frozenset({"Agent", "Task"})
# Tools whose effect Treadle shows as something other than a tool node: the todo list, a question
# request, a proposed plan.
ARTIFACT_TOOLS = frozenset({"TodoWrite", "AskUserQuestion", "ExitPlanMode"})
INTERRUPTED_REASONS = frozenset({"aborted_streaming", "aborted_tools"})
TASK_ENDED = frozenset({"completed", "failed", "killed", "stopped"})
MAX_OUTPUT_CHARS = 8000
_TODO_STATUSES: dict[Any, Literal["pending", "in_progress", "completed"]] = {
    "pending": "pending",
    "in_progress": "in_progress",
    "completed": "completed",
}


def tool_title(name: str, tool_input: dict[str, Any]) -> str:
    """A tool node's title: what the call acts on (its command, file, pattern or URL), the model's description
    of it only when the input names nothing else."""
    detail = (
        tool_input.get("command")
        or tool_input.get("file_path")
        or tool_input.get("pattern")
        or tool_input.get("url")
        or tool_input.get("description")
        or ""
    )
    return f"{name}: {detail}" if detail else name


def result_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"]
    return "\n".join(parts)


class TurnTranslator:
    def __init__(self, turn: Turn, sink: TurnSink) -> None:
        self.turn = turn
        self.sink = sink
        self.finished = False
        self.result: ResultMessage | None = None
        self.api_error: str | None = None  # what the CLI said about a failed API call
        self.session_id: str | None = None
        self._nodes: dict[str, str] = {}  # tool_use id -> node id
        self._quiet: set[str] = set()  # tool_use ids shown as artifacts, whose results are not nodes
        self._tasks: dict[str, str] = {}  # Claude task id -> tool_use id of the Agent call
        self._background: dict[str, str] = {}  # background task id -> tool_use id, while it runs
        self._ended: dict[str, tuple[str, str]] = {}  # task id -> (tool_use id, status): ended, summary to come
        self.entered_plan_mode = False  # the agent switched the session to plan mode during this turn
        self._streams: dict[str | None, tuple[str, str, list[str]]] = {}  # parent -> (message id, node id, parts)
        # parent -> texts the CLI reported whole, (message id, node id, text), until the API message's end says
        # whether the model finished them: an interrupt makes the CLI report a cut-off block as a whole one
        self._said: dict[str | None, list[tuple[str, str, str]]] = {}
        self._todo_plans: dict[str, str] = {}  # node id -> plan id of its todo list

    # --- where things go ----------------------------------------------------------------------------

    def node_of(self, parent_tool_use_id: str | None) -> str:
        """The node a message belongs to: a subagent's node, or the turn's root."""
        if parent_tool_use_id:
            return self._nodes.get(parent_tool_use_id, self.turn.root_node_id)
        return self.turn.root_node_id

    def node_of_agent(self, agent_id: str | None) -> str:
        """The node of the subagent a permission request comes from (the CLI names it by task id)."""
        return self.node_of(self._tasks.get(agent_id or ""))

    def tool_node(self, tool_use_id: str | None) -> str | None:
        return self._nodes.get(tool_use_id or "")

    @property
    def background_running(self) -> list[str]:
        return list(self._background)

    # --- the stream ---------------------------------------------------------------------------------

    async def feed(self, message: Any) -> bool:
        """Translate one SDK message; True once the turn is over."""
        if isinstance(message, StreamEvent):
            await self._stream_event(message)
        elif isinstance(message, AssistantMessage):
            await self._assistant(message)
        elif isinstance(message, UserMessage):
            await self._user(message)
        elif isinstance(message, TaskStartedMessage):
            self._task_started(message)
        elif isinstance(message, (TaskNotificationMessage, TaskUpdatedMessage)):
            await self._task_changed(message)
        elif isinstance(message, ResultMessage):
            self.result = message
            # A background subagent outlives the CLI's first result; the CLI reports its end in a turn of
            # its own, and Treadle's turn lasts until then (the run covers what the agent started).
            return not self._background
        elif isinstance(message, SystemMessage) and message.subtype == "init":
            self.session_id = message.data.get("session_id")
        return False

    async def _stream_event(self, message: StreamEvent) -> None:
        event = message.event
        kind = event.get("type")
        key = message.parent_tool_use_id
        if kind == "content_block_start":
            await self._settle(key, finished=True)  # the model went on to its next block: the last one is whole
            if event.get("content_block", {}).get("type") == "text":
                self._streams[key] = (self.turn.ids.next("msg"), self.node_of(key), [])
        elif kind == "message_delta":
            # The API's message ends with a stop reason; the CLI's own end of an interrupted stream has none.
            await self._settle(key, finished=event.get("delta", {}).get("stop_reason") is not None)
        elif kind == "content_block_delta" and event.get("delta", {}).get("type") == "text_delta":
            stream = self._streams.get(key)
            if stream is not None and event["delta"].get("text"):
                stream[2].append(event["delta"]["text"])
                await self.sink.text(stream[0], stream[1], event["delta"]["text"])

    async def _assistant(self, message: AssistantMessage) -> None:
        parent = message.parent_tool_use_id
        if message.error is not None and parent is None:
            # A synthetic message that carries an API failure: the turn's error, not a reply.
            self.api_error = " ".join(b.text for b in message.content if isinstance(b, TextBlock)) or message.error
            return
        for block in message.content:
            if isinstance(block, TextBlock):
                await self._text(parent, block.text)
            elif isinstance(block, ThinkingBlock) and block.thinking:
                node = self.turn.ids.next("node")
                await self.sink.event(
                    pe.ToolStarted(node_id=node, parent_id=self.node_of(parent), kind="reasoning", title="Thinking")
                )
                await self.sink.event(pe.ToolCompleted(node_id=node, output=block.thinking[:MAX_OUTPUT_CHARS]))
            elif isinstance(block, ToolUseBlock):
                await self._tool_use(parent, block)

    async def _text(self, parent: str | None, text: str) -> None:
        stream = self._streams.pop(parent, None)
        if stream is not None:
            self._said.setdefault(parent, []).append((stream[0], stream[1], text))  # whole once its message ends
        elif text:
            await self.sink.text_done(self.turn.ids.next("msg"), self.node_of(parent), text)

    async def _settle(self, parent: str | None, finished: bool) -> None:
        """Complete the texts of ``parent``'s message the model finished. A cut-off one stays open: the run's
        end closes it as incomplete with what streamed, and it is not the run's answer (L3.4)."""
        for message_id, node, text in self._said.pop(parent, []):
            if finished:
                await self.sink.text_done(message_id, node, text)

    async def _tool_use(self, parent: str | None, block: ToolUseBlock) -> None:
        where = self.node_of(parent)
        if block.name == "EnterPlanMode":
            self.entered_plan_mode = True
        if block.name in ARTIFACT_TOOLS:
            self._quiet.add(block.id)
            if block.name == "TodoWrite":
                await self._todos(where, block.input)
            elif block.name == "ExitPlanMode":
                await self.sink.event(
                    pe.PlanUpdated(
                        plan_id=self.turn.ids.next("plan"),
                        kind="proposed_plan",
                        node_id=where,
                        text=str(block.input.get("plan", "")),
                    )
                )
            return  # AskUserQuestion becomes a user_input request when the CLI asks for it
        node = self.turn.ids.next("node")
        self._nodes[block.id] = node
        if block.name in SUBAGENT_TOOLS:
            title = block.input.get("description") or block.input.get("subagent_type") or "subagent"
            await self.sink.event(
                pe.ToolStarted(node_id=node, parent_id=where, kind="subagent", title=str(title), input=block.input)
            )
        else:
            await self.sink.event(
                pe.ToolStarted(
                    node_id=node, parent_id=where, title=tool_title(block.name, block.input), input=block.input
                )
            )

    async def _todos(self, node: str, tool_input: dict[str, Any]) -> None:
        items = []
        for todo in tool_input.get("todos") or []:
            if isinstance(todo, dict) and todo.get("content"):
                status = _TODO_STATUSES.get(todo.get("status"), "pending")
                items.append(TodoItem(text=str(todo["content"]), status=status))
        plan_id = self._todo_plans.setdefault(node, self.turn.ids.next("plan"))
        await self.sink.event(pe.PlanUpdated(plan_id=plan_id, kind="todo_list", node_id=node, items=items))

    async def _user(self, message: UserMessage) -> None:
        if not isinstance(message.content, list):
            return
        for block in message.content:
            if not isinstance(block, ToolResultBlock) or block.tool_use_id in self._quiet:
                continue
            node = self._nodes.get(block.tool_use_id)
            if node is None or block.tool_use_id in self._background.values():
                continue  # unknown, or a background agent that was only launched: it ends with its task
            await self.sink.event(
                pe.ToolCompleted(
                    node_id=node,
                    status="failed" if block.is_error else "completed",
                    output=result_text(block.content)[:MAX_OUTPUT_CHARS],
                )
            )

    def _task_started(self, message: TaskStartedMessage) -> None:
        if message.tool_use_id:
            self._tasks[message.task_id] = message.tool_use_id
            if message.data.get("is_backgrounded"):
                self._background[message.task_id] = message.tool_use_id

    async def _task_changed(self, message: TaskNotificationMessage | TaskUpdatedMessage) -> None:
        """A background agent ends with an update (its status), usually followed by a notification (its
        summary, which becomes the node's output). The update alone lets the turn end."""
        status = message.status
        if status not in TASK_ENDED:
            return
        tool_use_id = self._background.pop(message.task_id, None)
        if tool_use_id is not None:
            self._ended[message.task_id] = (tool_use_id, status)
        if isinstance(message, TaskNotificationMessage) and message.task_id in self._ended:
            await self._close_task(message.task_id, message.summary)

    async def _close_task(self, task_id: str, summary: str | None) -> None:
        tool_use_id, status = self._ended.pop(task_id)
        await self.sink.event(
            pe.ToolCompleted(
                node_id=self._nodes[tool_use_id],
                status="completed" if status == "completed" else "failed",
                output=(summary or f"background agent {status}")[:MAX_OUTPUT_CHARS],
            )
        )

    # --- the end ------------------------------------------------------------------------------------

    async def close_open(self) -> None:
        """An ended background agent whose summary never came is closed without one. Text the model never
        finished (interrupted, or the process died mid-answer) is left open on purpose: the run's end closes it
        as incomplete, with what streamed."""
        self._streams.clear()
        self._said.clear()
        for task_id in list(self._ended):
            await self._close_task(task_id, None)

    def completion(self, interrupt_requested: bool) -> pe.TurnCompleted:
        """The turn's terminal status. ``subtype`` alone says little: an API failure is a "success" with
        ``is_error``; an interrupt ends with ``error_during_execution`` and an aborted terminal reason."""
        result = self.result
        if result is None:
            return pe.TurnCompleted(
                status="failed", error=self.api_error or "Claude Code ended the turn without a result"
            )
        if result.terminal_reason in INTERRUPTED_REASONS or (interrupt_requested and result.is_error):
            return pe.TurnCompleted(status="interrupted")
        if result.is_error or result.subtype != "success" or result.api_error_status is not None:
            detail = self.api_error or "; ".join(result.errors or []) or (result.result or "").strip() or result.subtype
            if result.api_error_status is not None and str(result.api_error_status) not in detail:
                detail = f"API error {result.api_error_status}: {detail}"
            return pe.TurnCompleted(status="failed", error=detail)
        return pe.TurnCompleted(status="completed")
