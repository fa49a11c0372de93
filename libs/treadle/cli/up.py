"""``treadle up``: the whole stack on this machine, a short live demo, and how to reach it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..client import ApiError, AsyncTreadle
from .config import DEV_TENANT, DEV_USER, connect_nats, state_dir
from .errors import UsageError, describe
from .live import stream_run
from .render import console, print_run, stderr


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
DEMO_SCRIPT = {
    "steps": [
        {"type": "todo", "items": [{"text": "Write hello.py", "status": "in_progress"}, {"text": "Run it"}]},
        {
            "type": "text",
            "text": "Sure: I'll write a tiny script that greets you, then run it.",
            "chunk": 4,
            "delay_ms": 35,
        },
        {"type": "write_file", "path": "hello.py", "content": 'print("Hello from Treadle!")\n'},
        {
            "type": "todo",
            "items": [{"text": "Write hello.py", "status": "completed"}, {"text": "Run it", "status": "in_progress"}],
        },
        {
            "type": "tool",
            "name": "shell",
            "input": {"command": "python hello.py"},
            "output": "Hello from Treadle!",
            "delay_ms": 600,
        },
        {
            "type": "todo",
            "items": [{"text": "Write hello.py", "status": "completed"}, {"text": "Run it", "status": "completed"}],
        },
        {
            "type": "text",
            "text": "Done. hello.py prints a greeting, and Treadle checkpointed the workspace after this "
            "run, so the change can be diffed or rolled back.",
            "chunk": 5,
            "delay_ms": 25,
        },
    ]
}


async def run_demo(api_url: str, token: str, state: Path) -> str:
    """Create a thread, send one scripted message and show the run live; returns the thread id."""
    console.rule("[bold]demo")
    async with AsyncTreadle(api_url, token) as client:
        thread = await client.create_thread(title="Treadle demo")
        thread_id = thread.thread_id
        console.print(Text.assemble(("thread ", "dim"), (thread_id, "bold"), ("  (scripted provider)", "dim")))
        console.print(Text.assemble(("  you › ", "bold green"), DEMO_TEXT))
        accepted, _ = await stream_run(
            client,
            thread_id,
            thread.seq,
            lambda: client.send_message(thread_id, DEMO_TEXT, script=DEMO_SCRIPT),
            timeout=60,
        )
        run = await client.wait_run(accepted.run_id, timeout=30)
    console.print()
    print_run(msgspec.to_builtins(run))
    hello = state.resolve() / "workspaces" / DEV_TENANT / "threads" / thread_id / "hello.py"
    if hello.is_file():
        console.print(Text.assemble(("workspace file ", "dim"), str(hello)), soft_wrap=True)
    console.rule()
    return thread_id


def cli_command(executable: Path, path_finds: str | None, cwd: Path) -> str:
    """How another shell calls this ``treadle``: its bare name when that shell's PATH finds this very one, else
    its path (relative when under the working directory: ``.venv/bin/treadle`` after ``make run``)."""
    here = executable.parent / "treadle"
    if path_finds is not None and Path(path_finds).resolve() == here.resolve():
        return "treadle"
    absolute = here.absolute()
    return str(absolute.relative_to(cwd)) if absolute.is_relative_to(cwd) else str(absolute)


def _print_access(api: str, token: str, state: Path, thread_id: str | None) -> None:
    console.print()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    grid.add_row("API", Text(api, style="bold"))
    grid.add_row("OpenAPI", f"{api}/schema/openapi.json  (interactive: {api}/schema/reference)")
    console_url = f"{api}/#/t/{thread_id}" if thread_id else f"{api}/"
    grid.add_row("console", Text.assemble((console_url, "bold"), ("  (sign in with the dev token)", "dim")))
    grid.add_row(
        "dev token", Text.assemble((token, "bold"), (f"  (tenant {DEV_TENANT}; saved in {state / 'dev-token'})", "dim"))
    )
    console.print(grid)
    thread = thread_id or "<thread id>"
    here = "" if state == Path(".treadle") else f" --state-dir {state}"
    auth = '-H "Authorization: Bearer $TREADLE_TOKEN"'
    create = (
        []
        if thread_id
        else [
            f"curl -s -X POST {auth} -H 'Content-Type: application/json' -d '{{\"title\": \"first\"}}' {api}/v1/threads"
        ]
    )
    cwd = Path.cwd()
    treadle = cli_command(Path(sys.executable), shutil.which("treadle"), cwd)
    console.print("\n[dim]try:[/]")
    for line in (
        f"export TREADLE_TOKEN={token}",
        f"curl -s {auth} {api}/v1/threads",
        *create,
        f"curl -s -X POST {auth} -H 'Content-Type: application/json' -d '{{\"text\": \"hello\"}}' "
        f"{api}/v1/threads/{thread}/messages",
        f"curl -sN {auth} {api}/v1/threads/{thread}/events",
        f"{treadle} threads show {thread}{here}",
        f"{treadle} send {thread} 'hello again' --wait{here}",
    ):
        console.print("  " + escape(line), soft_wrap=True)
    activate = Path(treadle).parent / "activate"
    console.print(
        f"\n[dim]the CLI from another shell, in {escape(str(cwd))}:[/] {escape(treadle)} threads list"
        + (f"  [dim](or first[/] source {escape(str(activate))}[dim])[/]" if treadle != "treadle" else ""),
        soft_wrap=True,
    )


async def _dev_token(nats_url: str, state: Path) -> tuple[str, bool]:
    """The dev token from the last ``up`` if it still resolves (the KV lives in the state dir), else a new one."""
    from treadle.ops.tokens import TokenStore

    path = state / "dev-token"
    async with connect_nats(nats_url) as nc:
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


def _ignore_cancelled(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Ctrl-C during start-up cancels Stack.wait_ready's wait_for(gather(...)), and Python 3.11 then reports the
    # gather's CancelledError as "never retrieved": noise, not news.
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)


def gateway_port_free(host: str, port: int) -> bool:
    """Whether the gateway could bind ``host:port`` now. Probed as uvicorn binds (SO_REUSEADDR): connections
    of a stack stopped a moment ago (TIME_WAIT) do not hold the port, a listener does."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError:
            return False
    return True


async def cmd_up(args: argparse.Namespace) -> int:
    from ..ops.servers import ServerNotFound
    from ..runtime.settings import GatewaySettings  # here, not at the top: pydantic is in the server extra
    from .stack import Stack

    state = state_dir(args)
    host = GatewaySettings().host  # where the gateway will listen (TREADLE_GATEWAY_HOST)
    if not gateway_port_free(host, args.port):
        raise UsageError(f"port {args.port} on {host} is in use (another `treadle up`?); pick one with --port")
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    loop.add_signal_handler(signal.SIGTERM, main.cancel)
    loop.set_exception_handler(_ignore_cancelled)
    if args.provider_hosts < 1:
        raise UsageError("--provider-hosts must be at least 1")
    if args.nats_cluster != 1 and args.nats_cluster < 3:
        raise UsageError("--nats-cluster is 1 (one server) or at least 3 nodes (a quorum must survive a loss)")
    if args.replicas < 1:
        raise UsageError("--replicas must be at least 1")
    if args.workspace_nodes < 1:
        raise UsageError("--workspace-nodes must be at least 1")
    stack = Stack(
        state,
        gateway_port=args.port,
        on_output=WorkerOutput(console, args.verbose),
        provider_hosts=args.provider_hosts,
        nats_cluster=args.nats_cluster,
        replicas=args.replicas,
        workspace_nodes=args.workspace_nodes,
    )
    began = time.monotonic()
    try:
        broker = "nats-server" if args.nats_cluster == 1 else f"a {args.nats_cluster}-node NATS cluster"
        with console.status(f"starting {broker}, redis-server and 8 workers…"):
            try:
                await stack.start()
            except ServerNotFound as exc:
                raise UsageError(str(exc)) from None
            except TimeoutError:
                raise UsageError(
                    "the workers did not all become ready within 60s; `treadle up --verbose` shows their output"
                ) from None
        console.print(f"[green]✓[/] stack up in {time.monotonic() - began:.1f}s · state in {escape(str(state))}")
        if args.nats_cluster > 1:
            console.print(
                f"[green]✓[/] NATS cluster of {args.nats_cluster} nodes, streams and buckets R3: "
                f"{escape(stack.nats_address)}",
                soft_wrap=True,
            )
        for name, value in (("nats-url", stack.nats_url), ("redis-url", stack.redis_url), ("api-url", stack.api_url)):
            (state / name).write_text(value + "\n")
        (state / "nats-url").chmod(0o600)  # it carries the service user's password
        token, reused = await _dev_token(stack.nats_url, state)
        console.print(
            f"[green]✓[/] dev token {'reused' if reused else 'created'} (tenant {DEV_TENANT}, user {DEV_USER})"
        )
        thread_id = None
        if args.demo:
            try:
                thread_id = await run_demo(stack.api_url, token, state)
            except (ApiError, TimeoutError) as exc:
                stderr.print(f"[red]demo failed:[/] {escape(describe(exc))}")
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
