"""Live views of a thread's event stream: one run as it happens (``send --wait``, the ``up`` demo) and the raw
tail of ``watch``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from ..client import TERMINAL, ApiError, AsyncTreadle, MessageAccepted, SseEvent
from . import prompt
from .render import TODO_MARK, console, short, status_text, summarise


class _Message:
    def __init__(self) -> None:
        self.text, self.live, self.done = "", False, False


class RunView:
    """A run as it happens, from the thread's SSE stream: its steps in arrival order, the assistant's text as it
    streams (live deltas first, durable ones when no live delta came), and how it ended."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.status = "sending"
        self.error: str | None = None
        self.done = asyncio.Event()
        self._items: dict[str, Any] = {}
        self._early: list[SseEvent] = []  # events that arrived before we knew our run id
        self.requests: asyncio.Queue[str] = asyncio.Queue()  # ids of requests the run opened, to be answered
        self._recent: deque[str] = deque(maxlen=4)
        self._count = 0
        self._began = time.monotonic()
        self._spinner = Spinner("dots", style="cyan")

    def follow_run(self, run_id: str) -> None:
        self.run_id = run_id
        early, self._early = self._early, []
        for event in early:
            self._apply(event)

    def add(self, event: SseEvent) -> None:
        if self.run_id is None:
            self._early.append(event)
        else:
            self._apply(event)

    def _apply(self, event: SseEvent) -> None:
        body = event.json()
        if event.event == "live.delta":
            if body.get("run_id") == self.run_id:
                m = self._item(body["message_id"], _Message)
                m.live, m.text = True, m.text + body["text"]
            return
        d = body.get("data") or {}
        if d.get("run_id", self.run_id) != self.run_id:
            return  # another run of the thread
        self._count += 1
        self._recent.append(f"#{event.id} {event.event}")
        kind = event.event
        if kind == "message.delta":
            if d.get("started"):  # the run's start, carried by the turn's first text
                self.status = "running"
            m = self._item(d["message_id"], _Message)
            if not m.live:
                m.text += d["text"]
        elif kind == "message.completed":
            self._completed(d)
        elif kind == "node.started":
            self._items[d["node_id"]] = {
                "kind": d["kind"],
                "title": d.get("title", ""),
                "status": "running",
                "input": d.get("input"),
            }
        elif kind == "node.completed" and d["node_id"] in self._items:
            self._items[d["node_id"]].update(status=d.get("status", "completed"), output=d.get("output"))
        elif kind == "request.opened":
            self._items[d["request_id"]] = {"kind": d["kind"], "title": d.get("prompt", ""), "status": "waiting"}
            self.requests.put_nowait(d["request_id"])
        elif kind == "request.resolved" and d["request_id"] in self._items:
            self._items[d["request_id"]]["status"] = d.get("status", "resolved")
        elif kind == "plan.updated":
            self._items[d["plan_id"]] = {"plan": d.get("kind"), "text": d.get("text", ""), "items": d.get("items", [])}
        elif kind == "run.warning":
            self._items[f"warning{event.id}"] = {"warning": d.get("message", "")}
        elif kind in ("run.queued", "run.dispatched", "run.started"):
            self.status = {"run.queued": "queued", "run.dispatched": "starting", "run.started": "running"}[kind]
        elif _ends_run(kind):
            if d.get("message"):  # the turn's last message, carried by the run's end
                self._completed(d["message"])
            self.status, self.error = kind.split(".")[1], d.get("error")
            self.done.set()

    def _completed(self, d: dict[str, Any]) -> None:
        m = self._item(d["message_id"], _Message)
        m.text, m.done = d["text"], True

    def waiting(self, request_id: str) -> bool:
        item = self._items.get(request_id)
        return isinstance(item, dict) and item.get("status") == "waiting"

    def _item(self, key: str, factory: type) -> Any:
        return self._items.setdefault(key, factory())

    def __rich__(self) -> Group:
        elapsed = f"{time.monotonic() - self._began:.1f}s"
        title = Text.assemble(
            ("run ", "bold"),
            (self.run_id or "…", "bold"),
            " · ",
            status_text(self.status),
            (f" · {elapsed} · {self._count} events", "dim"),
        )
        if self.done.is_set():
            mark = ("✓ ", "green") if self.status == "completed" else ("✗ ", "red")
            head: Any = Text.assemble(mark, title, (f" · {self.error}" if self.error else "", "red"))
        else:
            self._spinner.update(text=title)
            head = self._spinner
        lines: list[Any] = [head]
        for item in self._items.values():
            lines.append(self._render(item))
        if self._recent:
            lines.append(Text("  events: " + " · ".join(self._recent), style="dim"))
        return Group(*lines)

    def _render(self, item: Any) -> Text:
        if isinstance(item, _Message):
            cursor = "" if item.done or self.done.is_set() else "▌"
            return Text.assemble(("  assistant › ", "bold cyan"), item.text, (cursor, "cyan"))
        if "warning" in item:
            return Text.assemble(("  ! ", "yellow"), (item["warning"], "yellow"))
        if "plan" in item:
            out = Text.assemble(("  ", ""), (item["plan"].replace("_", " "), "bold"))
            for todo in item["items"]:
                mark, style = TODO_MARK.get(todo.get("status", "pending"), ("☐", ""))
                out.append(f"\n    {mark} ", style=style)
                out.append(todo["text"], style="dim" if todo.get("status") == "completed" else "")
            if item["text"]:
                out.append("\n    " + item["text"])
            return out
        status = item["status"]
        badge = {
            "completed": ("✓", "green"),
            "resolved": ("✓", "green"),
            "running": ("…", "cyan"),
            "waiting": ("?", "yellow"),
        }.get(status, ("✗", "red"))
        out = Text.assemble(("  ", ""), badge, " ", (item["kind"], "bold"), " ", item["title"])
        if item.get("input") and not all(str(v) in item["title"] for v in item["input"].values()):
            out.append(" " + short(json.dumps(item["input"]), 60), style="dim")
        if item.get("output"):
            out.append(" → " + short(item["output"], 60), style="dim")
        if status == "waiting":
            out.append(" (waiting for a response)", style="yellow")
        return out


async def stream_run(
    client: AsyncTreadle,
    thread_id: str,
    since: int,
    start: Callable[[], Awaitable[MessageAccepted]],
    timeout: float,
    *,
    allow_input: bool = True,
    show: bool = True,
) -> tuple[MessageAccepted, RunView]:
    """Follow the thread's events after ``since``, call ``start`` (which sends the message) once the stream is
    subscribed so no delta is missed, and render the run it returns until that run ends (``show``: live, else
    nothing). A runtime request the run opens is asked for on the terminal (:mod:`.prompt`); with input off
    that raises NeedsInput. The stream resumes by itself if its connection drops."""
    view = RunView()
    connected = asyncio.Event()

    async def pump() -> None:
        async with contextlib.aclosing(client.stream_events(thread_id, since, connected=connected)) as events:
            async for event in events:
                view.add(event)
                if view.done.is_set():
                    return

    live = Live(view, console=console, refresh_per_second=12, transient=False) if show else None
    if live is not None:
        live.start()
    reader = asyncio.create_task(pump())
    try:
        opened = asyncio.create_task(connected.wait())
        await asyncio.wait([opened, reader], return_when=asyncio.FIRST_COMPLETED)
        opened.cancel()
        if reader.done():
            reader.result()  # the stream failed to open: raise why
            raise ApiError(0, "stream_closed", "the event stream ended before it started")
        accepted = await start()
        view.follow_run(accepted.run_id)  # may already end it: its events can beat the HTTP reply
        async with asyncio.timeout(timeout):
            while not view.done.is_set():
                ended = asyncio.create_task(view.done.wait())
                asked = asyncio.create_task(view.requests.get())
                try:
                    await asyncio.wait([reader, ended, asked], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    ended.cancel()
                    if not asked.done():
                        asked.cancel()
                if asked.done() and not asked.cancelled():
                    if not view.waiting(asked.result()):
                        continue  # answered elsewhere already
                    if live is not None:
                        live.stop()  # the prompt needs the terminal's lines to itself
                    try:
                        await prompt.answer_pending(client, thread_id, asked.result(), allow_input=allow_input)
                    finally:
                        if live is not None:
                            live.start()
                    continue
                if reader.done() and not view.done.is_set():
                    reader.result()
                    raise ApiError(0, "stream_closed", "the event stream ended before the run did")
    finally:
        if live is not None:
            live.stop()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    if show and not console.is_terminal:
        console.print()  # rich ends the final render of a non-terminal Live without a newline
    return accepted, view


class Tail:
    """The raw stream for ``treadle watch``: text appended as it arrives, every durable event a dim line."""

    def __init__(self) -> None:
        self._open: str | None = None  # the message whose text is on the current line
        self._live: set[str] = set()
        self._printed: dict[str, str] = {}

    def add(self, event: SseEvent) -> None:
        body = event.json()
        if event.event == "live.delta":
            self._live.add(body["message_id"])
            self._text(body["message_id"], body["text"])
            return
        d = body.get("data") or {}
        if event.event == "message.delta":
            if d["message_id"] not in self._live:  # history, or live deltas were lost: durable text instead
                self._text(d["message_id"], d["text"])
            return
        completed = d if event.event == "message.completed" else d.get("message") if _ends_run(event.event) else None
        if completed:  # a message's completion, or a run's end carrying its last message
            # The last durable delta may stop short of the end (the tail comes with the completion).
            printed = self._printed.get(completed["message_id"], "")
            if completed["text"].startswith(printed):
                self._text(completed["message_id"], completed["text"][len(printed) :])
            elif self._open != completed["message_id"]:
                self._text(completed["message_id"], completed["text"])
        self._end()
        console.print(
            Text(f"#{event.id:<6} {event.event:<20} {summarise(event.event, d)}", style="dim"), soft_wrap=True
        )

    def note(self, text: str) -> None:
        self._end()
        console.print(Text(text, style="yellow"), soft_wrap=True)

    def _text(self, message_id: str, text: str) -> None:
        if not text:
            return
        if self._open != message_id:
            self._end()
            console.print(Text(f"{message_id} › ", style="bold cyan"), end="")
            self._open = message_id
        self._printed[message_id] = self._printed.get(message_id, "") + text
        console.print(Text(text), end="", soft_wrap=True)

    def _end(self) -> None:
        if self._open is not None:
            console.print()
            self._open = None


def _ends_run(kind: str) -> bool:
    return kind.startswith("run.") and kind.split(".")[1] in TERMINAL
