"""The commands for the API's operations beyond creating, reading and messaging threads (``threads.py``): runs,
nodes, runtime requests, messages, activity, the queue, plans, checkpoints, diffs, rollbacks, forks, lineage,
handoffs and the tenant's policy. Each calls one SDK method and prints its answer for people or, with
``--output json``, as JSON.

``COMMANDS`` maps every operation id of the OpenAPI document to the command that performs it (a test checks it
covers them all, and that each command exists)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..client import AsyncPage, AsyncTreadle
from .config import api_client
from .errors import UsageError
from .exits import RunNotCompleted
from .output import as_json, builtins, emit, json_line
from .policy import policy_fields
from .render import console, files_text, print_run, short, status_text, when
from .schedules import COMMANDS as SCHEDULE_COMMANDS

COMMANDS: dict[str, str] = {
    "create_thread": "threads create",
    "list_threads": "threads list",
    "get_thread": "threads show",
    "update_thread": "threads rename",  # also `threads archive` and `threads unarchive`
    "delete_thread": "threads delete",
    "send_message": "send",  # also `steer` (mode steer_active/restart_active) and `switch` (provider)
    "get_run": "runs show",
    "list_runs": "runs list",
    "list_messages": "messages",
    "stream_events": "watch",
    "interrupt_run": "runs interrupt",
    "interrupt_node": "nodes interrupt",
    "respond": "requests answer",
    "list_requests": "requests list",
    "list_activity": "activity",
    "get_queue": "queue list",
    "reorder_queue": "queue reorder",
    "edit_queued": "queue edit",
    "cancel_queued": "queue cancel",
    "implement_plan": "plans implement",
    "list_checkpoints": "checkpoints",
    "run_diff": "runs diff",
    "thread_diff": "diff",
    "rollback_thread": "rollback",
    "rollback_node": "nodes rollback",
    "fork_thread": "fork",
    "list_handoffs": "handoffs list",
    "get_handoff": "handoffs show",
    "get_lineage": "lineage",
    "get_policy": "policy get",
    "put_policy": "policy put",
    **SCHEDULE_COMMANDS,
    "create_webhook": "webhooks create",  # cli/webhooks.py
    "list_webhooks": "webhooks list",
    "get_webhook": "webhooks show",
    "update_webhook": "webhooks update",
    "delete_webhook": "webhooks delete",
    "list_deliveries": "webhooks deliveries",
    "replay_delivery": "webhooks replay",
}


async def _call(
    args: argparse.Namespace, do: Callable[[AsyncTreadle], Awaitable[Any]], human: Callable[[Any], None]
) -> int:
    async with api_client(args) as client:
        emit(args, await do(client), human)
    return 0


async def _list(
    args: argparse.Namespace,
    do: Callable[[AsyncTreadle], Awaitable[AsyncPage[Any]]],
    columns: tuple[str, ...],
    row: Callable[[dict[str, Any]], tuple[Any, ...]],
) -> int:
    """A list command: one page (``--limit``, ``--cursor``) or every page (``--all``), as a table or JSON."""
    async with api_client(args) as client:
        page = await do(client)
        items = [item async for item in page] if args.all else page.items
    next_cursor = None if args.all else page.next_cursor
    if as_json(args):
        json_line({"items": items, "next_cursor": next_cursor, "seq": page.seq})
        return 0
    if not items:
        console.print("[dim]none[/]")
        return 0
    table = Table(box=None, header_style="bold dim", pad_edge=False)
    for col in columns:
        table.add_column(col, no_wrap=col.endswith("id"))
    for item in builtins(items):
        table.add_row(*(c if isinstance(c, Text) else Text(str(c if c is not None else "-")) for c in row(item)))
    console.print(table)
    if next_cursor:
        console.print(f"[dim]more: --cursor {next_cursor} (or --all)[/]")
    return 0


def _page(args: argparse.Namespace) -> dict[str, Any]:
    return {"limit": args.limit, "cursor": args.cursor}


def _ack(what: str) -> Callable[[dict[str, Any]], None]:
    def show(ack: dict[str, Any]) -> None:
        run = f" run {ack['run_id']}" if ack.get("run_id") else ""
        console.print(Text.assemble(("✓ ", "green"), what, run, (f" ({ack.get('disposition') or 'accepted'})", "dim")))

    return show


def _json_block(value: dict[str, Any]) -> None:
    import json

    console.print_json(json.dumps(value, default=str))


# --- runs and nodes -----------------------------------------------------------------------------------


async def cmd_runs_show(args: argparse.Namespace) -> int:
    return await _call(args, lambda c: c.get_run(args.run), print_run)


async def cmd_runs_wait(args: argparse.Namespace) -> int:
    async with api_client(args) as client:
        run = await client.wait_run(args.run, timeout=args.timeout)
    emit(args, run, print_run)
    if run.status != "completed":
        raise RunNotCompleted(f"run {run.id} {run.status}" + (f": {run.error}" if run.error else ""))
    return 0


async def cmd_runs_list(args: argparse.Namespace) -> int:
    return await _list(
        args,
        lambda c: c.list_runs(args.thread, **_page(args)),
        ("#", "run id", "status", "mode", "provider", "queued"),
        lambda r: (r["ordinal"], r["id"], status_text(r["status"]), r["mode"], r["provider"], when(r["queued_at"])),
    )


async def cmd_runs_interrupt(args: argparse.Namespace) -> int:
    return await _call(
        args,
        lambda c: c.interrupt_run(
            args.run, allow_destructive=not args.no_destructive, idempotency_key=args.idempotency_key
        ),
        _ack("interrupt asked for"),
    )


async def cmd_nodes_interrupt(args: argparse.Namespace) -> int:
    return await _call(
        args,
        lambda c: c.interrupt_node(
            args.node, allow_destructive=not args.no_destructive, idempotency_key=args.idempotency_key
        ),
        _ack("interrupt asked for"),
    )


def _print_diff(diff: dict[str, Any]) -> None:
    point = diff.get("from")
    console.print(
        f"[dim]{diff['thread_id']}[/] {point['scope'] + '/' + str(point['ordinal']) if point else 'empty'} → "
        f"{diff['to']['scope']}/{diff['to']['ordinal']}  {files_text(diff['files'])}",
        soft_wrap=True,
    )
    console.print(Text(diff["patch"]), soft_wrap=True, end="")
    if diff["truncated"]:
        console.print(f"[yellow]… cut at {diff['patch_bytes']} bytes (--max-bytes)[/]")


async def cmd_runs_diff(args: argparse.Namespace) -> int:
    return await _call(args, lambda c: c.run_diff(args.run, max_bytes=args.max_bytes), _print_diff)


async def cmd_diff(args: argparse.Namespace) -> int:
    return await _call(
        args,
        lambda c: c.thread_diff(
            args.thread, from_ordinal=args.from_ordinal, to_ordinal=args.to_ordinal, max_bytes=args.max_bytes
        ),
        _print_diff,
    )


def _print_rollback(rb: dict[str, Any]) -> None:
    target = f"run {rb['to_run_ordinal']}" if rb["kind"] == "thread" else f"node {rb['node_id']}"
    mark = ("✓ ", "green") if rb["status"] == "completed" else ("… ", "yellow")
    console.print(Text.assemble(mark, f"rollback {rb['id']} to {target}: ", status_text(rb["status"])))
    if rb.get("rolled_back_run_ids"):
        console.print(f"  rolled back: {', '.join(rb['rolled_back_run_ids'])}")
    console.print(Text.assemble("  files: ", files_text(rb.get("files", []))))
    if rb["kind"] == "node":
        console.print(f"  touches the parent's workspace: {rb['touches_parent_workspace']}")


async def cmd_rollback(args: argparse.Namespace) -> int:
    return await _call(
        args,
        lambda c: c.rollback_thread(
            args.thread, args.ordinal, interrupt_active=args.interrupt_active, idempotency_key=args.idempotency_key
        ),
        _print_rollback,
    )


async def cmd_nodes_rollback(args: argparse.Namespace) -> int:
    return await _call(
        args,
        lambda c: c.rollback_node(
            args.node, args.checkpoint, thread_id=args.thread, idempotency_key=args.idempotency_key
        ),
        _print_rollback,
    )


# --- requests, messages, activity --------------------------------------------------------------------


async def cmd_requests_list(args: argparse.Namespace) -> int:
    return await _list(
        args,
        lambda c: c.list_requests(args.thread, status=args.status, **_page(args)),
        ("request id", "kind", "status", "run id", "prompt"),
        lambda r: (r["id"], r["kind"], status_text(r["status"]), r["run_id"], short(r.get("prompt", ""), 60)),
    )


def _answers(pairs: list[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--answer takes KEY=VALUE, not {pair!r}")
        out[key] = value
    return out


async def cmd_requests_answer(args: argparse.Namespace) -> int:
    if not (args.decision or args.answer or args.message):
        raise UsageError("answer with --decision (an approval), or --answer KEY=VALUE / --message TEXT (a question)")
    return await _call(
        args,
        lambda c: c.respond(
            args.request,
            decision=args.decision,
            answers=_answers(args.answer),
            message=args.message,
            idempotency_key=args.idempotency_key,
        ),
        _ack(f"answered {args.request}"),
    )


async def cmd_messages(args: argparse.Namespace) -> int:
    return await _list(
        args,
        lambda c: c.list_messages(args.thread, **_page(args)),
        ("message id", "role", "status", "run id", "text"),
        lambda m: (m["id"], m["role"], status_text(m["status"]), m.get("run_id"), short(m.get("text", ""), 70)),
    )


async def cmd_activity(args: argparse.Namespace) -> int:
    return await _list(
        args,
        lambda c: c.list_activity(args.thread, run_id=args.run, **_page(args)),
        ("at", "kind", "run id", "summary"),
        lambda a: (when(a["at"]), a["kind"], a["run_id"], short(a.get("summary", ""), 70)),
    )


# --- the queue and plans ------------------------------------------------------------------------------


def _print_queue(queue: dict[str, Any]) -> None:
    console.print(f"[dim]active[/] {queue['active_run_id'] or '-'}")
    if not queue["queue"]:
        console.print("[dim]nothing queued[/]")
    for i, q in enumerate(queue["queue"], 1):
        console.print(Text.assemble(f"  {i}. ", (q["run_id"], "bold"), f" #{q['ordinal']} ", short(q["text"], 70)))


async def cmd_queue_list(args: argparse.Namespace) -> int:
    return await _call(args, lambda c: c.get_queue(args.thread), _print_queue)


async def cmd_queue_reorder(args: argparse.Namespace) -> int:
    return await _call(
        args,
        lambda c: c.reorder_queue(args.thread, args.runs, idempotency_key=args.idempotency_key),
        _ack("queue reordered"),
    )


async def cmd_queue_edit(args: argparse.Namespace) -> int:
    from .threads import _load_script

    script = _load_script(args.script)
    return await _call(
        args,
        lambda c: c.edit_queued(args.thread, args.run, args.text, script=script, idempotency_key=args.idempotency_key),
        _ack("queued message edited"),
    )


async def cmd_queue_cancel(args: argparse.Namespace) -> int:
    return await _call(
        args,
        lambda c: c.cancel_queued(args.thread, args.run, idempotency_key=args.idempotency_key),
        _ack("queued run cancelled"),
    )


async def cmd_threads_rename(args: argparse.Namespace) -> int:
    return await _update(args, title=args.title)


async def cmd_threads_archive(args: argparse.Namespace) -> int:
    return await _update(args, archived=True)


async def cmd_threads_unarchive(args: argparse.Namespace) -> int:
    return await _update(args, archived=False)


async def _update(args: argparse.Namespace, **change: Any) -> int:
    def show(done: dict[str, Any]) -> None:
        what = "updated" if done["changed"] else "unchanged (it already was so)"
        console.print(Text.assemble(("✓ ", "green"), "thread ", (done["thread_id"], "bold"), f" {what}"))

    return await _call(
        args, lambda c: c.update_thread(args.thread, idempotency_key=args.idempotency_key, **change), show
    )


async def cmd_threads_delete(args: argparse.Namespace) -> int:
    """Deleting erases the thread's data for good: asked on a terminal, else only with ``--yes``."""
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("deleting a thread erases its data for good: pass --yes to confirm")
        answer = input(f"delete thread {args.thread} and erase its events, workspace checkpoints and views? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            console.print("[dim]not deleted[/]")
            return 0

    def show(done: dict[str, Any]) -> None:
        console.print(Text.assemble(("✓ ", "green"), "deleted thread ", (done["thread_id"], "bold")))

    return await _call(args, lambda c: c.delete_thread(args.thread, idempotency_key=args.idempotency_key), show)


async def cmd_plans_implement(args: argparse.Namespace) -> int:
    def show(done: dict[str, Any]) -> None:
        console.print(
            Text.assemble(
                ("✓ ", "green"), f"plan {done['plan_id']} → run ", (done["run_id"], "bold"), f" of {done['thread_id']}"
            )
        )

    return await _call(
        args, lambda c: c.implement_plan(args.plan, as_=args.as_, idempotency_key=args.idempotency_key), show
    )


# --- checkpoints, forks, lineage, handoffs ----------------------------------------------------------


async def cmd_checkpoints(args: argparse.Namespace) -> int:
    return await _list(
        args,
        lambda c: c.list_checkpoints(args.thread, **_page(args)),
        ("checkpoint id", "scope/#", "kind", "status", "commit", "files"),
        lambda k: (
            k["id"],
            f"{k['scope']}/{k['ordinal']}" + (" (stale)" if k.get("stale") else ""),
            k["kind"],
            status_text(k["status"]),
            (k.get("commit") or "-")[:12],
            files_text(k.get("files", [])),
        ),
    )


async def cmd_fork(args: argparse.Namespace) -> int:
    sources = [("run", args.run), ("node", args.node), ("provider_thread", args.provider_thread)]
    chosen = [(kind, value) for kind, value in sources if value]
    if len(chosen) != 1:
        raise UsageError("fork from exactly one of --run, --node, --provider-thread")
    (kind, source), *_ = chosen

    def show(forked: dict[str, Any]) -> None:
        console.print(
            Text.assemble(
                ("✓ ", "green"), "forked ", (forked["thread_id"], "bold"), f" from {forked['parent_thread_id']}"
            )
        )

    return await _call(
        args,
        lambda c: c.fork_thread(
            args.thread,
            kind,  # type: ignore[arg-type]  # one of the three literals above
            source,
            turn=args.turn,
            title=args.title,
            on_active="refuse" if args.refuse_if_active else None,
            idempotency_key=args.idempotency_key,
        ),
        show,
    )


def _print_lineage(view: dict[str, Any]) -> None:
    def node(n: dict[str, Any], depth: int) -> None:
        mark = "→ " if n["thread_id"] == view["thread_id"] else "  "
        console.print(
            f"{'  ' * depth}{mark}[bold]{n['thread_id']}[/] {escape(n['title'] or '')} [dim]{n['provider']} · {n['runs']} run(s)[/]"
        )
        for child in n["children"]:
            node(child, depth + 1)

    node(view["tree"], 0)


async def cmd_lineage(args: argparse.Namespace) -> int:
    return await _call(args, lambda c: c.get_lineage(args.thread), _print_lineage)


async def cmd_handoffs_list(args: argparse.Namespace) -> int:
    return await _list(
        args,
        lambda c: c.list_handoffs(args.thread, **_page(args)),
        ("handoff id", "run id", "strategy", "to", "chars"),
        lambda h: (h["id"], h["run_id"], h["strategy"], h["to_provider"], len(h.get("text", ""))),
    )


async def cmd_handoffs_show(args: argparse.Namespace) -> int:
    def show(h: dict[str, Any]) -> None:
        console.print(
            f"[bold]{h['id']}[/] {h['strategy']} → {h['to_provider']} [dim]run {h['run_id']} #{h.get('run_ordinal')}[/]"
        )
        console.print(Text(h["text"]), soft_wrap=True)

    return await _call(args, lambda c: c.get_handoff(args.handoff), show)


# --- the tenant's policy over the API (admins) -------------------------------------------------------


async def cmd_policy_get(args: argparse.Namespace) -> int:
    return await _call(args, lambda c: c.get_policy(), _json_block)


async def cmd_policy_put(args: argparse.Namespace) -> int:
    return await _call(
        args,
        lambda c: c.put_policy(allowed_modes=args.modes, **policy_fields(args)),
        _json_block,
    )
