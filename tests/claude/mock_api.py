"""A mock of the Anthropic Messages API on 127.0.0.1 for driving the real Claude Code CLI offline.

Stateless by design: every answer is derived from the request itself. The scenario is picked by a
``#tag`` in the latest user prompt; the step within it is the number of assistant messages after that
prompt (so tool loops end on their own: step 0 calls the tool, step 1 answers the tool result). A
task notification (the CLI's injected turn when a background subagent ends) always gets a short closing text.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stream:
    """One streamed assistant message made of content blocks (text, thinking, tool_use dicts)."""

    blocks: list[dict[str, Any]]
    delay: float = 0.0  # pause between text words (a slow stream)


@dataclass
class Failure:
    status: int
    message: str
    kind: str = "invalid_request_error"


@dataclass
class Conversation:
    """What a scenario sees of one request."""

    body: dict[str, Any]
    prompt: str  # text of the latest user prompt (not a tool result)
    step: int  # assistant messages since that prompt
    tool_results: list[dict[str, Any]]  # tool_result blocks of the last user message
    last_text: str = ""  # every text of the last user message, system reminders included

    def result_text(self) -> str:
        parts = []
        for block in self.tool_results:
            content = block.get("content")
            if isinstance(content, list):
                parts.extend(c.get("text", "") for c in content if isinstance(c, dict))
            elif content is not None:
                parts.append(str(content))
        return " ".join(parts)


Scenario = Callable[[Conversation], Stream | Failure]


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool(name: str, tool_input: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def _tool_then_reply(name: str, tool_input: dict[str, Any], reply: str) -> Scenario:
    def play(conv: Conversation) -> Stream:
        if conv.step == 0:
            return Stream(
                [text(f"Calling {name}."), tool(name, tool_input, f"toolu_{name.lower()}_{len(conv.body['messages'])}")]
            )
        return Stream([text(f"{reply} {conv.result_text()}")])

    return play


def _echo(conv: Conversation) -> Stream:
    return Stream([text(f"Mock Claude heard: {conv.prompt.strip()[-200:]}")])


def _thinking(conv: Conversation) -> Stream:
    return Stream(
        [{"type": "thinking", "thinking": "The user wants a greeting; keep it short."}, text("Hello after thinking.")]
    )


def _slow(conv: Conversation) -> Stream:
    return Stream([text(" ".join(f"word{i:03d}" for i in range(300)))], delay=0.1)


def _steady(conv: Conversation) -> Stream:
    return Stream([text(" ".join(f"part{i:02d}" for i in range(30)))], delay=0.1)


def _error(conv: Conversation) -> Failure:
    return Failure(400, "mock refuses this request (scenario #error)")


def _subagent(background: bool) -> Scenario:
    agent = {
        "description": "Say hi",
        "prompt": "#sub please say hi",
        "subagent_type": "general-purpose",
        "run_in_background": background,
    }
    return _tool_then_reply("Agent", agent, "The agent answered:")


def _sub(conv: Conversation) -> Stream:
    """The subagent's own conversation: one Bash call (needs approval), then its hand-back text."""
    if conv.step == 0:
        return Stream(
            [
                text("Subagent running a command."),
                tool(
                    "Bash",
                    {"command": "echo from-sub > sub.txt && cat sub.txt", "description": "Write sub.txt"},
                    "toolu_sub_bash",
                ),
            ]
        )
    return Stream([text(f"subagent says hi ({conv.result_text().strip()})")])


def _plan(conv: Conversation) -> Stream:
    if conv.step == 0:
        return Stream([tool("EnterPlanMode", {}, "toolu_enter_plan")])
    if conv.step == 1:
        return Stream([tool("ExitPlanMode", {"plan": "1. Write plan.txt\n2. Run the tests"}, "toolu_plan")])
    return Stream([text(f"Plan handed over. {conv.result_text()}")])


SCENARIOS: dict[str, Scenario] = {
    "text": _echo,
    "think": _thinking,
    "slow": _slow,  # 30 s: only ever interrupted
    "steady": _steady,  # 3 s
    "error": _error,
    "bash": _tool_then_reply(
        "Bash",
        {"command": "echo hi > bash.txt && cat bash.txt", "description": "Write hi to bash.txt"},
        "The command printed:",
    ),
    # a command the model describes as something else entirely (issue 25)
    "liar": _tool_then_reply("Bash", {"command": "rm -rf ~/notes", "description": "List the files"}, "Done:"),
    "edit": _tool_then_reply(
        "Edit",
        {"file_path": "{cwd}/notes.md", "old_string": "colour: red\n", "new_string": "colour: blue\n"},
        "Edit said:",
    ),
    "python": _tool_then_reply(
        "Bash", {"command": "python3 -c 'print(6 * 7)'", "description": "Compute 6 * 7"}, "Python printed:"
    ),
    "write": _tool_then_reply(
        "Write", {"file_path": "{cwd}/written.txt", "content": "written by claude\n"}, "Write said:"
    ),
    "ask": _tool_then_reply(
        "AskUserQuestion",
        {
            "questions": [
                {
                    "question": "Which color do you prefer?",
                    "header": "Color",
                    "multiSelect": False,
                    "options": [
                        {"label": "Blue", "description": "like the sea"},
                        {"label": "Red", "description": "like fire"},
                    ],
                }
            ]
        },
        "Noted:",
    ),
    "todo": _tool_then_reply(
        "TodoWrite",
        {
            "todos": [
                {"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
                {"content": "Write the fix", "status": "in_progress", "activeForm": "Writing the fix"},
                {"content": "Run the tests", "status": "pending", "activeForm": "Running the tests"},
            ]
        },
        "Todos:",
    ),
    # issue 21: the orchestrator's MCP tool, as Claude Code names a tool of the http server "treadle"
    "orchestrator": _tool_then_reply("mcp__treadle__capabilities", {}, "Orchestrator said:"),
    "subagent": _subagent(background=False),
    "background": _subagent(background=True),
    "sub": _sub,
    "plan": _plan,
}
_TAG = re.compile(r"#([a-z]+)\b")
# Searched in JSON text: the path ends at the escaped newline (or quote) after it.
_CWD = re.compile(r"(?:Primary working directory|Working directory|cwd):\s*([^\s\\\"]+)", re.I)


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]


def _said_by_user(text: str) -> bool:
    """Text of a user message that the user wrote, not the harness (reminders, interruption notes)."""
    text = text.lstrip()
    return bool(text) and not text.startswith(("<system-reminder>", "[Request interrupted"))


def _is_prompt(message: dict[str, Any]) -> bool:
    """A user message with the user's own text. The CLI merges a prompt into the message that carries the
    tool result of an interrupted call, so a tool result alone does not make it a tool loop step."""
    content = message["content"]
    if isinstance(content, str):
        return True
    return any(_said_by_user(t) for t in _texts(content))


def conversation(body: dict[str, Any]) -> Conversation:
    messages = body.get("messages", [])
    prompt_at = max((i for i, m in enumerate(messages) if m.get("role") == "user" and _is_prompt(m)), default=0)
    prompt_msg = messages[prompt_at] if messages else {"content": ""}
    prompt = "\n".join(t for t in _texts(prompt_msg["content"]) if _said_by_user(t))
    step = sum(1 for m in messages[prompt_at + 1 :] if m.get("role") == "assistant")
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {"content": []})
    content = last_user["content"] if isinstance(last_user["content"], list) else []
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return Conversation(
        body=body, prompt=prompt, step=step, tool_results=results, last_text="\n".join(_texts(last_user["content"]))
    )


def pick(conv: Conversation) -> Stream | Failure:
    if "<task-notification>" in conv.last_text or "background-task event" in conv.last_text:
        return Stream([text("The background agent finished.")])
    tags = _TAG.findall(conv.prompt)  # the CLI merges a prompt into a failed one's message: the last tag wins
    scenario = SCENARIOS.get(tags[-1], _echo) if tags else _echo
    return scenario(conv)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    conversation: Conversation | None = None


@dataclass
class MockMessagesApi:
    """``async with MockMessagesApi() as api: api.url`` serves until the block ends."""

    host: str = "127.0.0.1"
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    cwd_hint: str = ""  # substituted for ``{cwd}`` in tool inputs when the request does not reveal it

    async def __aenter__(self) -> MockMessagesApi:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def prompts(self) -> list[str]:
        """The prompt of every main-model request seen, in order."""
        return [s.conversation.prompt for s in self.seen if s.conversation is not None]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):  # kept alive after a stream, as the real API does
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the CLI hung up (an interrupt closes the stream mid-answer)
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; True when the connection stays open for the next."""
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, target, _ = head[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in head[1:] if ":" in h)}
        raw = b""
        if "content-length" in headers:
            raw = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await reader.readline()).strip() or b"0", 16)
                if size == 0:
                    await reader.readline()
                    break
                raw += await reader.readexactly(size)
                await reader.readline()
        body = json.loads(raw) if raw else None
        path = target.split("?", 1)[0]
        seen = Seen(method, target, headers, body)
        self.seen.append(seen)
        if method != "POST" or path != "/v1/messages" or not isinstance(body, dict):
            writer.write(
                b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"
                b"connection: close\r\n\r\n{}"
            )
            await writer.drain()
            return False
        seen.conversation = conv = conversation(body)
        answer = pick(conv)
        if isinstance(answer, Failure):
            payload = json.dumps({"type": "error", "error": {"type": answer.kind, "message": answer.message}}).encode()
            writer.write(
                f"HTTP/1.1 {answer.status} Error\r\ncontent-type: application/json\r\n"
                f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            return False
        await self._stream(writer, body, answer)
        return True

    def _cwd(self, body: dict[str, Any]) -> str:
        blob = json.dumps(body.get("system", "")) + json.dumps(body.get("messages", [])[:3])
        found = _CWD.search(blob)
        return found.group(1).rstrip(",.") if found else self.cwd_hint

    async def _stream(self, writer: asyncio.StreamWriter, body: dict[str, Any], answer: Stream) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        model = body.get("model", "claude-mock")
        usage = {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        await self._send(
            writer,
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_mock_{len(self.seen)}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                },
            },
        )
        await self._send(writer, "ping", {"type": "ping"})
        stop = "end_turn"
        for index, block in enumerate(answer.blocks):
            if block["type"] == "text":
                await self._send(
                    writer,
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                )
                words = block["text"].split(" ")
                for i, word in enumerate(words):
                    piece = word if i == len(words) - 1 else word + " "
                    await self._send(
                        writer,
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
                    )
                    if answer.delay:
                        await asyncio.sleep(answer.delay)  # the scenario's pacing: a slow model
            elif block["type"] == "thinking":
                await self._send(
                    writer,
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                    },
                )
                await self._send(
                    writer,
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": block["thinking"]},
                    },
                )
                await self._send(
                    writer,
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": "mock-signature"},
                    },
                )
            else:
                stop = "tool_use"
                tool_input = json.loads(json.dumps(block["input"]).replace("{cwd}", self._cwd(body)))
                await self._send(
                    writer,
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
                )
                await self._send(
                    writer,
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(tool_input)},
                    },
                )
            await self._send(writer, "content_block_stop", {"type": "content_block_stop", "index": index})
        await self._send(
            writer,
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
        await self._send(writer, "message_stop", {"type": "message_stop"})
        writer.write(b"0\r\n\r\n")  # the stream's end; the connection stays for the next request
        await writer.drain()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, name: str, data: dict[str, Any]) -> None:
        if writer.is_closing():  # the CLI hung up mid-stream (an interrupt): uvloop refuses the write otherwise
            raise ConnectionResetError("the client closed the stream")
        event = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
