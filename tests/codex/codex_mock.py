"""A mock of the OpenAI Responses API on 127.0.0.1, for driving the real ``codex`` binary in tests.

Each test registers a scenario per prompt: ``mock.on("prompt", reply1, reply2, ...)``. A request is
matched by the text of the last user message in its input; the n-th reply answers the request that
carries n-1 tool outputs after that message, so a scenario reads as the conversation it plays. A prompt
without a scenario gets a short echo. Every request is recorded; CONNECT (a proxy trap for anything that
would leave the host) is answered 403 and recorded too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from treadle.providers.base import RECOVERY_NOTE

# --- steps of one reply -------------------------------------------------------------------------


@dataclass
class Text:
    text: str
    chunks: int = 3


@dataclass
class Reasoning:
    summary: str
    text: str = ""


@dataclass
class Exec:
    """An ``exec_command`` call; ``escalate`` asks to leave the sandbox (always an approval)."""

    cmd: str
    escalate: bool = False
    justification: str | None = None  # what the model says the command does (with escalate)


@dataclass
class Patch:
    """An ``apply_patch`` call adding ``path`` with ``content``."""

    path: str
    content: str


@dataclass
class PlanUpdate:
    explanation: str
    steps: list[tuple[str, str]]


@dataclass
class Ask:
    """A ``request_user_input`` call with one question."""

    question_id: str
    question: str
    options: list[str]


@dataclass
class ToolSearch:
    """A ``tool_search`` call (run by codex itself): it answers with the deferred MCP tools matching ``query``,
    each a function inside a namespace the model then calls (``McpCall``)."""

    query: str
    limit: int = 8


@dataclass
class McpCall:
    """A call of an MCP tool as Codex 0.171 expects it once ``tool_search`` loaded it: a ``function_call`` whose
    ``namespace`` is the server's (``mcp__<server>__``) and whose ``name`` is the tool's own."""

    namespace: str
    name: str
    args: dict[str, Any]


@dataclass
class Stall:
    """Keep the stream open without finishing it until the client goes away."""


@dataclass
class Break:
    """Close the connection in the middle of the stream."""


@dataclass
class Failed:
    message: str


@dataclass
class HttpError:
    status: int = 500
    message: str = "mock backend is down"


Step = Text | Reasoning | Exec | Patch | PlanUpdate | Ask | ToolSearch | McpCall | Stall | Break | Failed | HttpError


@dataclass
class Seen:
    """One request as the mock received it."""

    prompt: str
    tool_outputs: list[dict[str, Any]]
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class MockResponses:
    scenarios: dict[str, list[Any]] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    connects: list[str] = field(default_factory=list)
    stalled: int = 0  # streams currently held open by a Stall step
    _server: asyncio.AbstractServer | None = None
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    port: int = 0
    _open: set[Any] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def on(self, prompt: str, *replies: list[Step] | Callable[[list[dict[str, Any]]], list[Step]]) -> None:
        """A reply is its steps, or a function of the tool outputs so far that gives them (an id one tool
        returned, passed to the next)."""
        self.scenarios[prompt] = [r if callable(r) else list(r) for r in replies]

    def prompts(self) -> list[str]:
        return [r.prompt for r in self.requests]

    async def start(self) -> MockResponses:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=64 * 1024 * 1024)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def drop_connections(self) -> None:
        """Close every open connection, as a real API does with idle ones: the next request needs a new one."""
        for writer in list(self._open):
            writer.transport.abort()

    async def stop(self) -> None:
        for writer in list(self._open):
            writer.transport.abort()
        if self._server:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    # --- HTTP ---------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line:
            return False
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = h.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if method == "CONNECT":
            self.connects.append(target)
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return False
        body = await self._body(reader, headers)
        if method != "POST" or not target.endswith("/responses"):
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return True
        request = json.loads(body)
        prompt, outputs = _last_prompt(request.get("input", []))
        self.requests.append(Seen(prompt=prompt, tool_outputs=outputs, body=request, headers=headers))
        replies = self.scenarios.get(prompt)
        reply = replies[min(len(outputs), len(replies) - 1)] if replies else [Text(f"echo: {prompt}")]
        steps = reply(outputs) if callable(reply) else reply
        return await self._reply(reader, writer, steps)

    @staticmethod
    async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await reader.readline()).strip(), 16)
                if size == 0:
                    await reader.readline()
                    return b"".join(parts)
                parts.append(await reader.readexactly(size))
                await reader.readline()
        return await reader.readexactly(int(headers.get("content-length", "0")))

    async def _reply(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, steps: list[Step]) -> bool:
        first = steps[0] if steps else None
        if isinstance(first, HttpError):
            payload = json.dumps({"error": {"message": first.message, "type": "server_error"}}).encode()
            writer.write(
                f"HTTP/1.1 {first.status} Mock Error\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"  # a real API keeps the connection for the next request
        )
        response_id = f"resp_{next(self._ids)}"
        self._event(writer, "response.created", {"response": {"id": response_id, "status": "in_progress"}})
        for step in steps:
            if isinstance(step, Stall):
                await writer.drain()
                self.stalled += 1
                try:
                    await _until_closed(reader)
                finally:
                    self.stalled -= 1
                return False
            if isinstance(step, Break):
                await writer.drain()
                writer.transport.abort()
                return False
            if isinstance(step, Failed):
                self._event(
                    writer,
                    "response.failed",
                    {
                        "response": {
                            "id": response_id,
                            "status": "failed",
                            "error": {"code": "server_error", "message": step.message},
                        }
                    },
                )
                writer.write(_LAST_CHUNK)
                await writer.drain()
                return False
            for name, data in self._items(step):
                self._event(writer, name, data)
                await writer.drain()
        usage = {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 5},
            "total_tokens": 120,
        }
        self._event(
            writer, "response.completed", {"response": {"id": response_id, "status": "completed", "usage": usage}}
        )
        writer.write(_LAST_CHUNK)
        await writer.drain()
        return True

    def _items(self, step: Step):
        n = next(self._ids)
        if isinstance(step, Text):
            item_id = f"msg_{n}"
            yield (
                "response.output_item.added",
                {
                    "output_index": 0,
                    "item": {
                        "type": "message",
                        "role": "assistant",
                        "id": item_id,
                        "status": "in_progress",
                        "content": [],
                    },
                },
            )
            size = max(1, -(-len(step.text) // step.chunks))
            for i in range(0, len(step.text), size):
                yield (
                    "response.output_text.delta",
                    {"item_id": item_id, "output_index": 0, "content_index": 0, "delta": step.text[i : i + size]},
                )
            yield (
                "response.output_item.done",
                {
                    "output_index": 0,
                    "item": {
                        "type": "message",
                        "role": "assistant",
                        "id": item_id,
                        "status": "completed",
                        "content": [{"type": "output_text", "text": step.text, "annotations": []}],
                    },
                },
            )
        elif isinstance(step, Reasoning):
            item_id = f"rs_{n}"
            yield (
                "response.output_item.added",
                {"output_index": 0, "item": {"type": "reasoning", "id": item_id, "summary": []}},
            )
            yield (
                "response.reasoning_summary_part.added",
                {
                    "item_id": item_id,
                    "output_index": 0,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""},
                },
            )
            yield (
                "response.reasoning_summary_text.delta",
                {"item_id": item_id, "output_index": 0, "summary_index": 0, "delta": step.summary},
            )
            if step.text:
                yield (
                    "response.reasoning_text.delta",
                    {"item_id": item_id, "output_index": 0, "content_index": 0, "delta": step.text},
                )
            yield (
                "response.output_item.done",
                {
                    "output_index": 0,
                    "item": {
                        "type": "reasoning",
                        "id": item_id,
                        "summary": [{"type": "summary_text", "text": step.summary}],
                        "content": [{"type": "reasoning_text", "text": step.text}] if step.text else None,
                    },
                },
            )
        elif isinstance(step, Exec):
            args: dict[str, Any] = {"cmd": step.cmd}
            if step.escalate:
                args |= {
                    "sandbox_permissions": "require_escalated",
                    "justification": step.justification or f"needs to run {step.cmd}",
                }
            yield from self._call(n, "exec_command", args)
        elif isinstance(step, Patch):
            lines = "".join(f"+{line}\n" for line in step.content.splitlines())
            patch = f"*** Begin Patch\n*** Add File: {step.path}\n{lines}*** End Patch"
            yield (
                "response.output_item.done",
                {
                    "output_index": 0,
                    "item": {
                        "type": "custom_tool_call",
                        "id": f"ctc_{n}",
                        "call_id": f"call_patch_{n}",
                        "name": "apply_patch",
                        "input": patch,
                        "status": "completed",
                    },
                },
            )
        elif isinstance(step, PlanUpdate):
            yield from self._call(
                n,
                "update_plan",
                {"explanation": step.explanation, "plan": [{"step": s, "status": st} for s, st in step.steps]},
            )
        elif isinstance(step, Ask):
            question = {
                "id": step.question_id,
                "header": step.question_id.title()[:12],
                "question": step.question,
                "options": [{"label": o, "description": f"option {o}"} for o in step.options],
            }
            yield from self._call(n, "request_user_input", {"questions": [question]})
        elif isinstance(step, ToolSearch):
            search = {"query": step.query, "limit": step.limit}
            item = {"type": "tool_search_call", "id": f"ts_{n}", "call_id": f"call_search_{n}", "execution": "client"}
            yield ("response.output_item.done", {"output_index": 0, "item": {**item, "arguments": search}})
        elif isinstance(step, McpCall):
            yield from self._call(n, step.name, step.args, namespace=step.namespace)

    @staticmethod
    def _call(n: int, name: str, args: dict[str, Any], namespace: str | None = None):
        item = {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{name}_{n}",
            "name": name,
            "arguments": json.dumps(args),
            "status": "completed",
        }
        if namespace is not None:
            item["namespace"] = namespace
        yield ("response.output_item.done", {"output_index": 0, "item": item})

    @staticmethod
    def _event(writer: asyncio.StreamWriter, name: str, data: dict[str, Any]) -> None:
        event = f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))


_LAST_CHUNK = b"0\r\n\r\n"


async def _until_closed(reader: asyncio.StreamReader) -> None:
    """Hold a stalled stream open until the client hangs up (interrupt, steer) or the mock stops."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass


def _last_prompt(items: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The text of the last user message (skipping codex's own context blocks) and the tool outputs after it.
    Treadle's recovery note asks to carry on with the request before it: the mock plays that request again."""
    prompt, outputs = "", []
    for item in items:
        if item.get("type") == "message" and item.get("role") == "user":
            texts = [c.get("text", "") for c in item.get("content") or [] if c.get("type") == "input_text"]
            texts = [t for t in texts if not t.lstrip().startswith("<")]
            if texts:
                prompt, outputs = (prompt if texts[-1] == RECOVERY_NOTE else texts[-1]), []
        elif item.get("type") in ("function_call_output", "custom_tool_call_output", "tool_search_output"):
            outputs.append(item)
    return prompt, outputs
