"""The ``treadle`` command: run the embedded stack (``treadle up``) and talk to a running one.

API commands find the gateway and a token from flags, then the environment (TREADLE_API_URL,
TREADLE_TOKEN), then the files ``treadle up`` leaves in its state directory. Expected failures (the API
said no, nothing is listening, bad input) end with one red line and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ..client.http import TERMINAL, ApiError, SseEvent, TreadleClient, follow

console = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)

DEFAULT_API = "http://127.0.0.1:8700"
DEV_TENANT = DEV_USER = "dev"


class UsageError(Exception):
    """A mistake the user can fix; shown as one line."""


# --- where things are -------------------------------------------------------------------------------


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir or os.environ.get("TREADLE_STATE_DIR") or ".treadle")


def _setting(flag: str | None, env: str, args: argparse.Namespace, file: str) -> str | None:
    if flag:
        return flag
    if os.environ.get(env):
        return os.environ[env]
    path = _state_dir(args) / file
    return path.read_text().strip() if path.is_file() else None


def _client(args: argparse.Namespace) -> TreadleClient:
    api = _setting(args.api, "TREADLE_API_URL", args, "api-url") or DEFAULT_API
    token = _setting(args.token, "TREADLE_TOKEN", args, "dev-token")
    if not token:
        raise UsageError("no API token: pass --token, set TREADLE_TOKEN, or run `treadle up` (it writes "
                         f"{_state_dir(args) / 'dev-token'})")
    return TreadleClient(api, token)


def _nats_url(args: argparse.Namespace) -> str:
    # No fallback to nats://127.0.0.1:4222: that may well be somebody else's NATS.
    url = _setting(args.nats_url, "TREADLE_NATS_URL", args, "nats-url")
    if not url:
        raise UsageError("no NATS URL: pass --nats-url, set TREADLE_NATS_URL, or run `treadle up`")
    return url


@contextlib.asynccontextmanager
async def _nats(url: str):
    import nats

    async def quiet(exc: Exception) -> None:  # connect() raises; no need to also log every attempt
        pass

    try:
        # nats-py 2.16 retries an unreachable server forever when allow_reconnect=False; one attempt fails fast.
        nc = await asyncio.wait_for(nats.connect(url, connect_timeout=3, max_reconnect_attempts=1,
                                                 reconnect_time_wait=0.1, error_cb=quiet, name="treadle-cli"), 10)
    except Exception as exc:
        raise UsageError(f"cannot connect to NATS at {url}: {exc or exc.__class__.__name__}") from None
    try:
        yield nc
    finally:
        await nc.close()


# --- rendering helpers --------------------------------------------------------------------------------

STATUS_STYLE = {"completed": "green", "running": "cyan", "starting": "cyan", "queued": "blue", "waiting": "yellow",
                "failed": "red", "interrupted": "yellow", "cancelled": "dim", "rolled_back": "magenta",
                "streaming": "cyan", "incomplete": "yellow", "pending": "yellow", "resolved": "green", "lost": "red"}
TODO_MARK = {"pending": ("☐", "dim"), "in_progress": ("◐", "yellow"), "completed": ("☑", "green")}


def _status(status: str | None) -> Text:
    return Text(status or "-", style=STATUS_STYLE.get(status or "", ""))


def _when(value: str | None) -> str:
    return _dt(value).strftime("%H:%M:%S") if value else "-"


def _dt(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _took(start: str | None, end: str | None) -> str:
    return f"{(_dt(end) - _dt(start)).total_seconds():.2f}s" if start and end else "-"


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _files(files: list[dict]) -> Text:
    out = Text()
    for i, f in enumerate(files):
        if i:
            out.append(", ")
        out.append(f["path"], style="bold")
        out.append(f" {f['change']} +{f.get('added', 0)}/-{f.get('removed', 0)}", style="dim")
    return out or Text("no changes", style="dim")


def summarise(event: str, data: dict) -> str:
    """One line about a durable event, for humans."""
    d = data
    match event:
        case "thread.created":
            return f"{d.get('title') or '(untitled)'} · {d.get('provider')} · workspace {d.get('workspace')}"
        case "message.created":
            return f"{d.get('role')}: {_short(d.get('text', ''), 60)}"
        case "message.delta" | "message.completed":
            return f"{d.get('message_id')} +{len(d.get('text', ''))} chars"
        case "run.queued":
            return f"{d.get('run_id')} #{d.get('ordinal')} {d.get('disposition')} on {d.get('provider')}"
        case "node.started":
            return f"{d.get('kind')} {d.get('title', '')}".strip()
        case "node.completed":
            return f"{d.get('status', 'completed')} {_short(d.get('output') or '', 50)}".strip()
        case "plan.updated":
            return f"{d.get('kind')} ({len(d.get('items', []))} items)"
        case "checkpoint.captured":
            return (f"{d.get('scope', 'root')}/{d.get('ordinal')} {d.get('kind', 'run')} "
                    f"{(d.get('commit') or '')[:10]} {len(d.get('files', []))} file(s)").strip()
        case "provider.attached":
            return f"{d.get('provider')} session {d.get('session_id')} on {d.get('host_id')}"
        case "request.opened":
            return f"{d.get('kind')}: {_short(d.get('prompt', ''), 60)}"
        case "run.warning":
            return d.get("message", "")
        case _:
            return " ".join(str(d[k]) for k in ("run_id", "status", "reason", "error") if d.get(k))


# --- one run, live --------------------------------------------------------------------------------------


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
            m = self._item(d["message_id"], _Message)
            if not m.live:
                m.text += d["text"]
        elif kind == "message.completed":
            m = self._item(d["message_id"], _Message)
            m.text, m.done = d["text"], True
        elif kind == "node.started":
            self._items[d["node_id"]] = {"kind": d["kind"], "title": d.get("title", ""), "status": "running",
                                         "input": d.get("input")}
        elif kind == "node.completed" and d["node_id"] in self._items:
            self._items[d["node_id"]].update(status=d.get("status", "completed"), output=d.get("output"))
        elif kind == "request.opened":
            self._items[d["request_id"]] = {"kind": d["kind"], "title": d.get("prompt", ""), "status": "waiting"}
        elif kind == "request.resolved" and d["request_id"] in self._items:
            self._items[d["request_id"]]["status"] = d.get("status", "resolved")
        elif kind == "plan.updated":
            self._items[d["plan_id"]] = {"plan": d.get("kind"), "text": d.get("text", ""), "items": d.get("items", [])}
        elif kind == "run.warning":
            self._items[f"warning{event.id}"] = {"warning": d.get("message", "")}
        elif kind in ("run.queued", "run.dispatched", "run.started"):
            self.status = {"run.queued": "queued", "run.dispatched": "starting", "run.started": "running"}[kind]
        elif kind.startswith("run.") and kind.split(".")[1] in TERMINAL:
            self.status, self.error = kind.split(".")[1], d.get("error")
            self.done.set()

    def _item(self, key: str, factory: type) -> Any:
        return self._items.setdefault(key, factory())

    def __rich__(self) -> Group:
        elapsed = f"{time.monotonic() - self._began:.1f}s"
        title = Text.assemble(("run ", "bold"), (self.run_id or "…", "bold"), " · ", _status(self.status),
                              (f" · {elapsed} · {self._count} events", "dim"))
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
        mark = {"completed": ("✓", "green"), "resolved": ("✓", "green"), "running": ("…", "cyan"),
                "waiting": ("?", "yellow")}.get(status, ("✗", "red"))
        out = Text.assemble(("  ", ""), mark, " ", (item["kind"], "bold"), " ", item["title"])
        if item.get("input") and not all(str(v) in item["title"] for v in item["input"].values()):
            out.append(" " + _short(json.dumps(item["input"]), 60), style="dim")
        if item.get("output"):
            out.append(" → " + _short(item["output"], 60), style="dim")
        if status == "waiting":
            out.append(" (waiting for a response)", style="yellow")
        return out


async def stream_run(client: TreadleClient, thread_id: str, since: int, start: Callable[[], Awaitable[dict]],
                     timeout: float) -> tuple[dict, RunView]:
    """Follow the thread's events after ``since``, call ``start`` (which sends the message) once the stream is
    subscribed so no delta is missed, and render the run it returns until that run ends."""
    view = RunView()
    connected = asyncio.Event()

    async def pump() -> None:
        async with contextlib.aclosing(client.events(thread_id, since, connected=connected)) as events:
            async for event in events:
                view.add(event)
                if view.done.is_set():
                    return

    with Live(view, console=console, refresh_per_second=12, transient=False):
        reader = asyncio.create_task(pump())
        try:
            opened = asyncio.create_task(connected.wait())
            await asyncio.wait([opened, reader], return_when=asyncio.FIRST_COMPLETED)
            opened.cancel()
            if reader.done():
                reader.result()  # the stream failed to open: raise why
                raise ApiError(0, "stream_closed", "the event stream ended before it started")
            accepted = await start()
            view.follow_run(accepted["run_id"])  # may already end it: its events can beat the HTTP reply
            ended = asyncio.create_task(view.done.wait())
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.wait([reader, ended], return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
            if not view.done.is_set():
                reader.result()
                raise ApiError(0, "stream_closed", "the event stream ended before the run did")
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
    if not console.is_terminal:
        console.print()  # rich ends the final render of a non-terminal Live without a newline
    return accepted, view


def print_run(run: dict) -> None:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim")
    table.add_column()
    table.add_row("run", Text.assemble((run["id"], "bold"), f" #{run['ordinal']} on {run['provider']}"))
    table.add_row("status", _status(run["status"]) + (Text(f" · {run['error']}", "red") if run.get("error") else ""))
    attempts = ", ".join(f"{a['number']}:{a['status']}" for a in run.get("attempts", []))
    table.add_row("attempts", attempts or "-")
    table.add_row("took", _took(run.get("started_at"), run.get("ended_at")))
    ckpt = run.get("checkpoint")
    if ckpt:
        table.add_row("checkpoint", Text.assemble((ckpt.get("ref") or "-", "bold"), f" ({ckpt['status']})"))
        table.add_row("commit", ckpt.get("commit") or "-")
        table.add_row("files", _files(ckpt.get("files", [])))
    console.print(table)


# --- treadle up --------------------------------------------------------------------------------------


class WorkerOutput:
    """Worker output with a coloured name per worker. Only warnings and errors (and the traceback lines after
    them) unless verbose: a healthy stack is quiet."""

    _RECORD = re.compile(r"^(?:\d{4}-\d\d-\d\d[ T][\d:,.]+ )?(DEBUG|INFO|WARNING|ERROR|CRITICAL):? ")
    _LOUD = {"WARNING": "yellow", "ERROR": "red", "CRITICAL": "bold red"}
    _COLOURS = ["cyan", "magenta", "green", "blue", "bright_cyan", "bright_magenta"]

    def __init__(self, out: Console, verbose: bool) -> None:
        self._out, self._verbose = out, verbose
        self._showing: dict[str, str | None] = {}  # worker -> style of the record being shown, None when hidden
        self._colour: dict[str, str] = {}

    def __call__(self, name: str, line: str) -> None:
        record = self._RECORD.match(line)
        if record:
            level = record.group(1)
            self._showing[name] = self._LOUD.get(level, "") if self._verbose or level in self._LOUD else None
        elif line.startswith("Traceback"):
            self._showing[name] = "red"  # a crash outside logging (an import error, say)
        elif name not in self._showing:
            self._showing[name] = "" if self._verbose else None
        style = self._showing[name]
        if style is None:
            return
        colour = self._colour.setdefault(name, self._COLOURS[len(self._colour) % len(self._COLOURS)])
        self._out.print(Text.assemble((f"{name:>13} │ ", colour), (line, style)), soft_wrap=True)


DEMO_TEXT = "Write a hello-world script and run it."
DEMO_SCRIPT = {"steps": [
    {"type": "todo", "items": [{"text": "Write hello.py", "status": "in_progress"}, {"text": "Run it"}]},
    {"type": "text", "text": "Sure: I'll write a tiny script that greets you, then run it.", "chunk": 4,
     "delay_ms": 35},
    {"type": "write_file", "path": "hello.py", "content": 'print("Hello from Treadle!")\n'},
    {"type": "todo", "items": [{"text": "Write hello.py", "status": "completed"},
                               {"text": "Run it", "status": "in_progress"}]},
    {"type": "tool", "name": "shell", "input": {"command": "python hello.py"}, "output": "Hello from Treadle!",
     "delay_ms": 600},
    {"type": "todo", "items": [{"text": "Write hello.py", "status": "completed"},
                               {"text": "Run it", "status": "completed"}]},
    {"type": "text", "text": "Done. hello.py prints a greeting, and Treadle checkpointed the workspace after this "
                             "run, so the change can be diffed or rolled back.", "chunk": 5, "delay_ms": 25},
]}


async def run_demo(api_url: str, token: str, state: Path) -> str:
    """Create a thread, send one scripted message and show the run live; returns the thread id."""
    console.rule("[bold]demo")
    async with TreadleClient(api_url, token) as client:
        thread = await client.create_thread(title="Treadle demo")
        thread_id = thread["thread_id"]
        console.print(Text.assemble(("thread ", "dim"), (thread_id, "bold"), ("  (scripted provider)", "dim")))
        console.print(Text.assemble(("  you › ", "bold green"), DEMO_TEXT))
        accepted, _ = await stream_run(client, thread_id, thread["seq"],
                                       lambda: client.send(thread_id, DEMO_TEXT, script=DEMO_SCRIPT), timeout=60)
        run = await client.wait_run(accepted["run_id"], timeout=30)
    console.print()
    print_run(run)
    hello = state.resolve() / "workspaces" / DEV_TENANT / "threads" / thread_id / "hello.py"
    if hello.is_file():
        console.print(Text.assemble(("workspace file ", "dim"), str(hello)), soft_wrap=True)
    console.rule()
    return thread_id


def _print_access(api: str, token: str, state: Path, thread_id: str | None) -> None:
    console.print()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    grid.add_row("API", Text(api, style="bold"))
    grid.add_row("OpenAPI", f"{api}/schema/openapi.json")
    grid.add_row("dev token", Text.assemble((token, "bold"), (f"  (tenant {DEV_TENANT}; saved in "
                                                              f"{state / 'dev-token'})", "dim")))
    console.print(grid)
    thread = thread_id or "<thread id>"
    here = "" if state == Path(".treadle") else f" --state-dir {state}"
    auth = '-H "Authorization: Bearer $TREADLE_TOKEN"'
    create = [] if thread_id else [f"curl -s -X POST {auth} -H 'Content-Type: application/json' "
                                   f"-d '{{\"title\": \"first\"}}' {api}/v1/threads"]
    console.print("\n[dim]try:[/]")
    for line in (f"export TREADLE_TOKEN={token}",
                 f"curl -s {auth} {api}/v1/threads",
                 *create,
                 f"curl -s -X POST {auth} -H 'Content-Type: application/json' -d '{{\"text\": \"hello\"}}' "
                 f"{api}/v1/threads/{thread}/messages",
                 f"curl -sN {auth} {api}/v1/threads/{thread}/events",
                 f"treadle threads show {thread}{here}",
                 f"treadle send {thread} 'hello again' --wait{here}"):
        console.print("  " + escape(line), soft_wrap=True)


async def _dev_token(nats_url: str, state: Path) -> tuple[str, bool]:
    """The dev token from the last ``up`` if it still resolves (the KV lives in the state dir), else a new one."""
    from treadle.runtime.tokens import TokenStore

    path = state / "dev-token"
    async with _nats(nats_url) as nc:
        store = TokenStore(nc.jetstream())
        if path.is_file():
            old = path.read_text().strip()
            found = await store.resolve(old)
            if found is not None and found.tenant == DEV_TENANT:
                return old, True
        token = await store.create(DEV_TENANT, DEV_USER)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token, False


def _ignore_cancelled(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    # Ctrl-C during start-up cancels Stack.wait_ready's wait_for(gather(...)), and Python 3.11 then reports the
    # gather's CancelledError as "never retrieved": noise, not news.
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def cmd_up(args: argparse.Namespace) -> int:
    from ..runtime.servers import ServerNotFound
    from .stack import Stack

    state = _state_dir(args)
    if not _port_free(args.port):
        raise UsageError(f"port {args.port} is in use (another `treadle up`?); pick one with --port")
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    loop.add_signal_handler(signal.SIGTERM, main.cancel)
    loop.set_exception_handler(_ignore_cancelled)
    stack = Stack(state, gateway_port=args.port, on_output=WorkerOutput(console, args.verbose))
    began = time.monotonic()
    try:
        with console.status("starting nats-server, redis-server and 6 workers…"):
            try:
                await stack.start()
            except ServerNotFound as exc:
                raise UsageError(str(exc)) from None
            except TimeoutError:
                raise UsageError("the workers did not all become ready within 60s; `treadle up --verbose` shows "
                                 "their output") from None
        console.print(f"[green]✓[/] stack up in {time.monotonic() - began:.1f}s · state in {escape(str(state))}")
        for name, value in (("nats-url", stack.nats_url), ("redis-url", stack.redis_url), ("api-url", stack.api_url)):
            (state / name).write_text(value + "\n")
        token, reused = await _dev_token(stack.nats_url, state)
        console.print(f"[green]✓[/] dev token {'reused' if reused else 'created'} (tenant {DEV_TENANT}, "
                      f"user {DEV_USER})")
        thread_id = None
        if args.demo:
            try:
                thread_id = await run_demo(stack.api_url, token, state)
            except (ApiError, TimeoutError) as exc:
                stderr.print(f"[red]demo failed:[/] {escape(_describe(exc))}")
        _print_access(stack.api_url, token, state, thread_id)
        console.print("\n[dim]serving · Ctrl-C to stop[/]")
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        main.uncancel()  # Ctrl-C or SIGTERM: the normal way to stop, not an error
    finally:
        # A second Ctrl-C must not abandon the stop half way (that is what leaves processes behind).
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        stopping = asyncio.ensure_future(stack.stop())
        # The same Ctrl-C may have closed a pipe we print to (`treadle up | tee`): stopping comes first.
        with contextlib.suppress(OSError), console.status("stopping…"):
            await asyncio.shield(stopping)
        await stopping
        with contextlib.suppress(OSError):
            console.print("[green]✓[/] stopped")
    return 0


# --- API commands ----------------------------------------------------------------------------------------


async def cmd_threads_create(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        created = await client.create_thread(title=args.title, provider=args.provider, model=args.model,
                                             runtime_mode=args.runtime_mode, workspace=args.workspace)
    console.print(Text.assemble(("✓ ", "green"), "created thread ", (created["thread_id"], "bold")))
    return 0


async def cmd_threads_list(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        threads = await client.list_threads(limit=args.limit)
    if not threads:
        console.print("[dim]no threads yet: `treadle threads create`[/]")
        return 0
    table = Table(box=None, header_style="bold dim", pad_edge=False)
    table.add_column("thread", no_wrap=True)  # ids are for copying: never cut them
    for col in ("title", "provider", "runs", "last run", "created"):
        table.add_column(col)
    for t in threads:
        table.add_row(Text(t["id"], style="bold"), t.get("title") or "", t.get("provider", ""), str(t.get("runs", 0)),
                      _status(t.get("last_run_status")), _when(t.get("created_at")))
    console.print(table)
    return 0


async def cmd_threads_show(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        doc = await client.get_thread(args.thread)
    t = doc["thread"]
    console.print(Text.assemble((t["id"], "bold"), "  ", (t.get("title") or "(untitled)", "bold cyan")))
    console.print(f"[dim]provider[/] {escape(t['provider'])}{' / ' + escape(t['model']) if t.get('model') else ''}"
                  f"  [dim]mode[/] {t.get('runtime_mode')}  [dim]workspace[/] {escape(t['workspace'])}"
                  f"  [dim]created[/] {_when(t.get('created_at'))} by {escape(t.get('created_by', ''))}"
                  f"  [dim]seq[/] {doc.get('seq')}")
    ckpts = {c["id"]: c for c in doc.get("checkpoints", [])}
    if doc.get("runs"):
        table = Table(title="runs", title_justify="left", title_style="bold", box=None, header_style="dim")
        for col in ("#", "run", "status", "attempts", "mode", "took", "ckpt"):
            table.add_column(col, no_wrap=col == "run")
        for r in doc["runs"]:
            attempts = Text(", ").join(_status(a["status"]) for a in r.get("attempts", []))
            ckpt = ckpts.get(r.get("checkpoint_id") or "")
            table.add_row(str(r["ordinal"]), r["id"], _status(r["status"]) + Text(f" {r['error']}" if r.get("error") else "", "red"),
                          attempts, r.get("mode", ""), _took(r.get("started_at"), r.get("ended_at")),
                          f"{ckpt['scope']}/{ckpt['ordinal']}" if ckpt else "-")
        console.print(table)
    if doc.get("messages"):
        console.print("[bold]messages[/]")
        for m in doc["messages"]:
            style = {"user": "bold green", "assistant": "bold cyan"}.get(m["role"], "bold")
            line = Text.assemble((f"  {m['role']:>9} › ", style), _short(m.get("text", ""), 400))
            if m.get("status") != "completed":
                line.append(f" ({m.get('status')})", style="yellow")
            console.print(line)
    for plan in doc.get("plans", []):
        console.print(f"[bold]{plan['kind'].replace('_', ' ')}[/] [dim]{plan['run_id']}[/]")
        for todo in plan.get("items", []):
            mark, style = TODO_MARK.get(todo.get("status", "pending"), ("☐", ""))
            console.print(Text.assemble((f"  {mark} ", style), todo["text"]))
        if plan.get("text"):
            console.print("  " + escape(plan["text"]))
    pending = [r for r in doc.get("requests", []) if r.get("status") == "pending"]
    for r in pending:
        console.print(Text.assemble(("? ", "yellow"), (r["kind"], "bold"), f" {r['id']} ", r.get("prompt", ""),
                                    (" waiting for a response", "yellow")))
    if ckpts:
        console.print("[bold]checkpoints[/]")
        for c in ckpts.values():
            # Two lines each: the full ref is what `git diff` wants, and it does not fit in a table column.
            console.print(Text.assemble((f"  {c['scope']}/{c['ordinal']:<3} ", "bold"), (f"{c.get('kind', ''):<9}", ""),
                                        _status(c.get("status")), "  ", ((c.get("commit") or "-")[:12], "dim"), "  ",
                                        Text("unchanged", "dim") if c.get("unchanged") else _files(c.get("files", []))))
            if c.get("ref"):
                console.print(Text(f"    {c['ref']}", style="dim"), soft_wrap=True)
    if doc.get("activity"):
        console.print("[bold]activity[/]")
        for a in doc["activity"][-args.activity:]:
            console.print(Text.assemble((f"  {_when(a['at'])} ", "dim"), (f"{a['kind']:<22}", "cyan"),
                                        _short(a.get("summary", ""), 70)))
    return 0


def _load_script(path: str | None) -> dict | None:
    if path is None:
        return None
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text()
        script = json.loads(raw)
    except OSError as exc:
        raise UsageError(f"cannot read script {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"script {path} is not JSON: {exc}") from None
    if not isinstance(script, dict):
        raise UsageError(f"script {path} must be a JSON object with \"steps\"")
    return script


async def cmd_send(args: argparse.Namespace) -> int:
    script = _load_script(args.script)
    async with _client(args) as client:
        def start() -> Awaitable[dict]:
            return client.send(args.thread, args.text, mode=args.mode, provider=args.provider, script=script,
                               idempotency_key=args.idempotency_key)

        if not args.wait:
            accepted = await start()
            console.print(Text.assemble(("✓ ", "green"), "message ", (accepted["message_id"], "bold"), " → run ",
                                        (accepted["run_id"], "bold"), f" ({accepted['disposition']})"))
            return 0
        doc = await client.get_thread(args.thread)
        console.print(Text.assemble(("  you › ", "bold green"), args.text))
        accepted, _ = await stream_run(client, args.thread, doc["seq"], start, args.timeout)
        run = await client.wait_run(accepted["run_id"], timeout=args.timeout)
    print_run(run)
    if run["status"] != "completed":
        raise UsageError(f"run {run['id']} {run['status']}" + (f": {run['error']}" if run.get("error") else ""))
    return 0


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
        if event.event == "message.completed":
            # The last durable delta may stop short of the end (the tail comes with the completion).
            printed = self._printed.get(d["message_id"], "")
            if d["text"].startswith(printed):
                self._text(d["message_id"], d["text"][len(printed):])
            elif self._open != d["message_id"]:
                self._text(d["message_id"], d["text"])
        self._end()
        console.print(Text(f"#{event.id:<6} {event.event:<20} {summarise(event.event, d)}", style="dim"),
                      soft_wrap=True)

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


async def cmd_watch(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        await client.get_thread(args.thread)  # a clear 404 before streaming
        console.print(f"[dim]watching {escape(args.thread)} · Ctrl-C to stop[/]")
        tail = Tail()
        lost = False

        def retrying(error: ApiError | None) -> None:
            nonlocal lost
            if not lost:  # say it once per outage, not on every retry
                tail.note(f"stream lost ({error.message if error else 'closed by the gateway'}); reconnecting…")
            lost = True

        async for event in follow(client, args.thread, args.after, live=True, on_retry=retrying):
            if lost:
                tail.note("reconnected")
                lost = False
            tail.add(event)
    return 0


# --- operator commands -----------------------------------------------------------------------------------


async def cmd_tokens_create(args: argparse.Namespace) -> int:
    from nats.js.errors import BucketNotFoundError

    from treadle.runtime.tokens import TokenStore

    url = _nats_url(args)
    async with _nats(url) as nc:
        try:
            token = await TokenStore(nc.jetstream()).create(args.tenant, args.user, args.role)
        except BucketNotFoundError:
            raise UsageError(f"NATS at {url} has no treadle-tokens bucket: is Treadle running on it?") from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    stderr.print(f"[green]✓[/] token for {escape(args.tenant)}/{escape(args.user)} ({escape(args.role)}):")
    print(token)  # alone on stdout, so TOKEN=$(treadle tokens create …) works
    return 0


async def cmd_projections_rebuild(args: argparse.Namespace) -> int:
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    from treadle.projections.rebuild import rebuild
    from treadle.projections.store import ProjectionStore

    redis_url = _setting(args.redis_url, "TREADLE_REDIS_URL", args, "redis-url")
    if not redis_url:
        raise UsageError("no Redis URL: pass --redis-url, set TREADLE_REDIS_URL, or run `treadle up`")
    redis = Redis.from_url(redis_url)
    try:
        async with _nats(_nats_url(args)) as nc:
            with console.status("replaying TREADLE_EVENTS…"):
                count = await rebuild(nc, ProjectionStore(redis))
    except RedisError as exc:
        raise UsageError(f"Redis at {redis_url}: {exc}") from None
    finally:
        await redis.aclose()
    console.print(f"[green]✓[/] rebuilt {count} thread projection{'s' if count != 1 else ''}")
    return 0


async def cmd_schemas(args: argparse.Namespace) -> int:
    from . import schemas

    return schemas.main(["--check"] if args.check else [])


# --- argument parsing ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument("--state-dir", help="where `treadle up` keeps its state (default: $TREADLE_STATE_DIR or .treadle)")
    api = argparse.ArgumentParser(add_help=False, parents=[state])
    api.add_argument("--api", help=f"gateway URL (default: $TREADLE_API_URL, <state-dir>/api-url, {DEFAULT_API})")
    api.add_argument("--token", help="bearer token (default: $TREADLE_TOKEN, <state-dir>/dev-token)")
    nats_ = argparse.ArgumentParser(add_help=False, parents=[state])
    nats_.add_argument("--nats-url", help="NATS URL (default: $TREADLE_NATS_URL, <state-dir>/nats-url)")

    parser = argparse.ArgumentParser(prog="treadle", description="Treadle: orchestration backend for coding agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", parents=[state], help="run the whole stack locally (NATS, Redis, six workers)")
    up.add_argument("--port", type=int, default=8700, help="gateway port (default 8700)")
    up.add_argument("--demo", action=argparse.BooleanOptionalAction, default=True,
                    help="run a short live demo once the stack is up (default: on)")
    up.add_argument("-v", "--verbose", action="store_true", help="show every worker log line, not only warnings")
    up.set_defaults(func=cmd_up, interrupt_ok=True)

    tokens = sub.add_parser("tokens", help="API tokens").add_subparsers(dest="action", required=True, metavar="ACTION")
    create = tokens.add_parser("create", parents=[nats_], help="create a token (printed on stdout)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--user", required=True)
    create.add_argument("--role", default="member")
    create.set_defaults(func=cmd_tokens_create)

    threads = sub.add_parser("threads", help="app threads").add_subparsers(dest="action", required=True, metavar="ACTION")
    tc = threads.add_parser("create", parents=[api], help="create a thread")
    tc.add_argument("--title")
    tc.add_argument("--provider", help="scripted (default), codex or claude")
    tc.add_argument("--model")
    tc.add_argument("--runtime-mode", choices=["approval_required", "auto_accept_edits", "full_access"])
    tc.add_argument("--workspace", help="workspace path relative to the tenant's workspace root")
    tc.set_defaults(func=cmd_threads_create)
    tl = threads.add_parser("list", parents=[api], help="list threads, newest first")
    tl.add_argument("--limit", type=int, default=50)
    tl.set_defaults(func=cmd_threads_list)
    ts = threads.add_parser("show", parents=[api], help="a thread's runs, messages, checkpoints and activity")
    ts.add_argument("thread")
    ts.add_argument("--activity", type=int, default=20, help="how many activity lines (default 20)")
    ts.set_defaults(func=cmd_threads_show)

    send = sub.add_parser("send", parents=[api], help="send a message to a thread (starts or queues a run)")
    send.add_argument("thread")
    send.add_argument("text")
    send.add_argument("--mode", default="auto", help="dispatch mode (default auto)")
    send.add_argument("--provider")
    send.add_argument("--script", metavar="FILE.json", help="scripted-provider script ('-' for stdin)")
    send.add_argument("--idempotency-key")
    send.add_argument("--wait", action="store_true", help="stream the run live and wait for it to end")
    send.add_argument("--timeout", type=float, default=300, help="seconds to wait with --wait (default 300)")
    send.set_defaults(func=cmd_send)

    watch = sub.add_parser("watch", parents=[api], help="stream a thread's events live")
    watch.add_argument("thread")
    watch.add_argument("--after", type=int, default=0, metavar="SEQ", help="start after this stream sequence")
    watch.set_defaults(func=cmd_watch, interrupt_ok=True)

    projections = sub.add_parser("projections", help="Redis read models").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    rebuild = projections.add_parser("rebuild", parents=[nats_], help="replay the event log into Redis")
    rebuild.add_argument("--redis-url", help="Redis URL (default: $TREADLE_REDIS_URL, <state-dir>/redis-url)")
    rebuild.set_defaults(func=cmd_projections_rebuild)

    schemas = sub.add_parser("schemas", help="regenerate schemas/ from the code")
    schemas.add_argument("--check", action="store_true", help="only report files that are out of date")
    schemas.set_defaults(func=cmd_schemas)
    return parser


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        if exc.status == 0:
            return f"{exc.message} (is `treadle up` running? --api / TREADLE_API_URL)"
        text = f"{exc.message} ({exc.code}, HTTP {exc.status})"
        problems = exc.details.get("problems") if isinstance(exc.details, dict) else None
        if problems:
            text += ": " + "; ".join(_short(json.dumps(p) if not isinstance(p, str) else p, 120) for p in problems)
        return text
    if isinstance(exc, TimeoutError):
        return f"timed out{': ' + str(exc) if str(exc) else ''}"
    return str(exc)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(args.func(args))
    except (ApiError, UsageError, TimeoutError) as exc:
        stderr.print(f"[red]error:[/] {escape(_describe(exc))}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 0 if getattr(args, "interrupt_ok", False) else 130
    except BrokenPipeError:
        # `treadle … | head`: the reader left. Point stdout at /dev/null so the exit-time flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
