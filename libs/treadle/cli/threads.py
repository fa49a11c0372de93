"""The thread commands: create, list and show threads, send them messages (steer, switch provider), watch their
events. Each prints for people, or JSON with ``--output json``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..client import ApiError, AsyncTreadle, MessageAccepted
from . import prompt
from .config import api_client
from .errors import UsageError
from .exits import RunNotCompleted
from .live import Tail, stream_run
from .output import as_json, builtins, emit, json_line
from .render import TODO_MARK, console, files_text, print_run, short, status_text, took, when


async def cmd_threads_create(args: argparse.Namespace) -> int:
    async with api_client(args) as client:
        created = await client.create_thread(
            title=args.title,
            provider=args.provider,
            model=args.model,
            runtime_mode=args.runtime_mode,
            workspace=args.workspace,
            idempotency_key=args.idempotency_key,
        )
    emit(
        args,
        created,
        lambda c: console.print(Text.assemble(("✓ ", "green"), "created thread ", (c["thread_id"], "bold"))),
    )
    return 0


async def cmd_threads_list(args: argparse.Namespace) -> int:
    async with api_client(args) as client:
        page = await client.list_threads(limit=args.limit, cursor=args.cursor, q=args.search, archived=args.archived)
        items = [t async for t in page] if args.all else page.items
    if as_json(args):
        json_line({"items": items, "next_cursor": None if args.all else page.next_cursor})
        return 0
    threads = builtins(items)
    if not threads:
        console.print(
            "[dim]no thread's title matches[/]" if args.search else "[dim]no threads yet: `treadle threads create`[/]"
        )
        return 0
    table = Table(box=None, header_style="bold dim", pad_edge=False)
    table.add_column("thread", no_wrap=True)  # ids are for copying: never cut them
    for col in ("title", "provider", "runs", "last run", "last activity"):
        table.add_column(col)
    for t in threads:
        table.add_row(
            Text(t["id"], style="bold"),
            Text(t.get("title") or "") + Text(" (archived)" if t.get("archived") else "", "dim"),
            t.get("provider", ""),
            str(t.get("runs", 0)),
            status_text(t.get("last_run_status")),
            when(t.get("last_activity_at") or t.get("created_at")),
        )
    console.print(table)
    if page.next_cursor and not args.all:
        again = " --search ..." if args.search else ""  # a cursor continues only the search it was made for
        console.print(f"[dim]more:{again} --cursor {page.next_cursor} (or --all)[/]")
    return 0


async def cmd_threads_show(args: argparse.Namespace) -> int:
    async with api_client(args) as client:
        view = await client.get_thread(args.thread, runs=args.runs)
    if as_json(args):
        json_line(view)
        return 0
    doc = builtins(view)
    t = doc["thread"]
    console.print(Text.assemble((t["id"], "bold"), "  ", (t.get("title") or "(untitled)", "bold cyan")))
    console.print(
        f"[dim]provider[/] {escape(t['provider'])}{' / ' + escape(t['model']) if t.get('model') else ''}"
        f"  [dim]mode[/] {t.get('runtime_mode')}  [dim]workspace[/] {escape(t['workspace'])}"
        f"  [dim]created[/] {when(t.get('created_at'))} by {escape(t.get('created_by', ''))}"
        f"  [dim]seq[/] {doc.get('seq')}"
    )
    ckpts = {c["id"]: c for c in doc.get("checkpoints", [])}
    if doc.get("runs"):
        table = Table(title="runs", title_justify="left", title_style="bold", box=None, header_style="dim")
        for col in ("#", "run", "status", "attempts", "mode", "took", "ckpt"):
            table.add_column(col, no_wrap=col == "run")
        for r in doc["runs"]:
            attempts = Text(", ").join(status_text(a["status"]) for a in r.get("attempts", []))
            ckpt = ckpts.get(r.get("checkpoint_id") or "")
            status = status_text(r["status"]) + Text(f" {r['error']}" if r.get("error") else "", "red")
            table.add_row(
                str(r["ordinal"]),
                r["id"],
                status,
                attempts,
                r.get("mode", ""),
                took(r.get("started_at"), r.get("ended_at")),
                f"{ckpt['scope']}/{ckpt['ordinal']}" if ckpt else "-",
            )
        console.print(table)
    if doc.get("messages"):
        console.print("[bold]messages[/]")
        for m in doc["messages"]:
            style = {"user": "bold green", "assistant": "bold cyan"}.get(m["role"], "bold")
            line = Text.assemble((f"  {m['role']:>9} › ", style), short(m.get("text", ""), 400))
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
        console.print(
            Text.assemble(
                ("? ", "yellow"),
                (r["kind"], "bold"),
                f" {r['id']} ",
                r.get("prompt", ""),
                (f' (the model says: "{r["description"]}")' if r.get("description") else "", "dim"),
                (" waiting for a response", "yellow"),
            )
        )
    if ckpts:
        console.print("[bold]checkpoints[/]")
        for c in ckpts.values():
            # Two lines each: the full ref is what `git diff` wants, and it does not fit in a table column.
            changes = Text("unchanged", "dim") if c.get("unchanged") else files_text(c.get("files", []))
            console.print(
                Text.assemble(
                    (f"  {c['scope']}/{c['ordinal']:<3} ", "bold"),
                    (f"{c.get('kind', ''):<9}", ""),
                    status_text(c.get("status")),
                    "  ",
                    ((c.get("commit") or "-")[:12], "dim"),
                    "  ",
                    changes,
                )
            )
            if c.get("ref"):
                console.print(Text(f"    {c['ref']}", style="dim"), soft_wrap=True)
    if doc.get("activity"):
        console.print("[bold]activity[/]")
        for a in doc["activity"][-args.activity :]:
            console.print(
                Text.assemble(
                    (f"  {when(a['at'])} ", "dim"), (f"{a['kind']:<22}", "cyan"), short(a.get("summary", ""), 70)
                )
            )
    return 0


def _load_script(path: str | None) -> dict[str, Any] | None:
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
        raise UsageError(f'script {path} must be a JSON object with "steps"')
    return script


def _send(
    client: AsyncTreadle, args: argparse.Namespace, script: dict[str, Any] | None, **fixed: object
) -> Awaitable[MessageAccepted]:
    options = {
        "mode": getattr(args, "mode", None),
        "provider": getattr(args, "provider", None),
        "model": getattr(args, "model", None),
        "script": script,
        "target_run_id": getattr(args, "target_run", None),
        "clean_context": True if getattr(args, "clean_context", False) else None,
        "merge_back_from": getattr(args, "merge_back_from", None),
        "idempotency_key": args.idempotency_key,
        **fixed,
    }
    return client.send_message(args.thread, args.text, **options)


def _accepted(accepted: dict[str, Any]) -> None:
    console.print(
        Text.assemble(
            ("✓ ", "green"),
            "message ",
            (accepted["message_id"], "bold"),
            " → run ",
            (accepted["run_id"], "bold"),
            f" ({accepted['disposition']})",
        )
    )


async def cmd_send(args: argparse.Namespace, **fixed: object) -> int:
    """``send`` (and ``steer``, ``switch``: the same operation with their mode or provider fixed)."""
    script = _load_script(args.script)
    async with api_client(args) as client:
        if not args.wait:
            emit(args, await _send(client, args, script, **fixed), _accepted)
            return 0
        seq = (await client.list_runs(args.thread, limit=1)).seq or 0  # not the whole thread: it costs its length
        if not as_json(args):
            console.print(Text.assemble(("  you › ", "bold green"), args.text))
        accepted, _ = await stream_run(
            client,
            args.thread,
            seq,
            lambda: _send(client, args, script, **fixed),
            args.timeout,
            allow_input=not args.no_input,
            show=not as_json(args),
        )
        run = await client.wait_run(accepted.run_id, timeout=args.timeout)
    emit(args, run, print_run)
    if run.status != "completed":
        raise RunNotCompleted(f"run {run.id} {run.status}" + (f": {run.error}" if run.error else ""))
    return 0


async def cmd_steer(args: argparse.Namespace) -> int:
    """Steer the active run (L3.2/L3.3): natively when the provider can, else by restarting it."""
    return await cmd_send(args, mode="restart_active" if args.restart else "steer_active")


async def cmd_switch(args: argparse.Namespace) -> int:
    """Send the next message to another provider (L5): the thread's context goes with it as a handoff."""
    return await cmd_send(args, provider=args.to)


async def cmd_watch(args: argparse.Namespace) -> int:
    async with api_client(args) as client:
        await client.list_runs(args.thread, limit=1)  # a clear 404 before streaming
        quiet = as_json(args)
        if not quiet:
            console.print(f"[dim]watching {escape(args.thread)} · Ctrl-C to stop[/]")
        tail = Tail()
        lost = False

        def retrying(error: ApiError | None) -> None:
            nonlocal lost
            if not lost and not quiet:  # say it once per outage, not on every retry
                tail.note(f"stream lost ({error.message if error else 'closed by the gateway'}); reconnecting…")
            lost = True

        interactive = sys.stdin.isatty() and not args.no_input
        stream = client.stream_events(args.thread, args.after, live=not quiet, on_retry=retrying)
        async for event in stream:
            if lost and not quiet:
                tail.note("reconnected")
            lost = False
            if quiet:
                json_line({"id": event.id, "event": event.event, "data": event.json().get("data")})
            else:
                tail.add(event)
            if event.event == "request.opened" and interactive:
                await prompt.answer_pending(client, args.thread, event.json()["data"]["request_id"], allow_input=True)
    return 0
