"""``treadle schedules create|list|show|update|delete|pause|resume``: schedules through the API
(docs/schedules.md). ``--thread THREAD`` acts on a thread's schedules; without it, on the tenant's (a new thread
per firing; ``list`` then shows every schedule of the tenant)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from .config import api_client
from .output import emit
from .render import console

COMMANDS: dict[str, str] = {
    "create_thread_schedule": "schedules create",
    "create_tenant_schedule": "schedules create",
    "list_thread_schedules": "schedules list",
    "list_tenant_schedules": "schedules list",
    "get_thread_schedule": "schedules show",
    "get_schedule": "schedules show",
    "update_thread_schedule": "schedules update",
    "update_schedule": "schedules update",
    "delete_thread_schedule": "schedules delete",
    "delete_schedule": "schedules delete",
    "pause_thread_schedule": "schedules pause",
    "pause_schedule": "schedules pause",
    "resume_thread_schedule": "schedules resume",
    "resume_schedule": "schedules resume",
}
_FIELDS = ("cron", "timezone", "interval_seconds", "provider", "model", "mode", "on_active", "title", "runtime_mode")


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in _FIELDS if getattr(args, name, None) is not None}


def _block(value: Any) -> None:
    console.print_json(json.dumps(value, default=str))


def _table(value: dict[str, Any]) -> None:
    table = Table("schedule", "thread", "when", "next", "fired", "skipped", "last")
    for s in value["schedules"]:
        when = s["cron"] and f"{s['cron']} ({s['timezone']})" or f"every {s['interval_seconds']}s"
        next_at = "paused" if s["paused"] else str(s["next_at"])
        thread = s["thread_id"] or "(new per firing)"
        table.add_row(
            s["schedule_id"], thread, when, next_at, str(s["fired"]), str(s["skipped"]), s["last_outcome"] or ""
        )
    console.print(table)


async def cmd_schedules(args: argparse.Namespace) -> int:
    thread, action = args.thread, args.action
    async with api_client(args) as c:
        if action == "create":
            fields = {**_fields(args), **({"paused": True} if args.paused else {})}
            value: Any = await (
                c.create_thread_schedule(thread, args.text, **fields)
                if thread
                else c.create_tenant_schedule(args.text, **fields)
            )
        elif action == "list":
            value = await (c.list_thread_schedules(thread) if thread else c.list_tenant_schedules())
            emit(args, value, _table)
            return 0
        elif action == "show":
            sid, count = args.schedule, args.count
            value = await (
                c.get_thread_schedule(thread, sid, count=count) if thread else c.get_schedule(sid, count=count)
            )
        elif action == "update":
            fields = {**_fields(args), **({"text": args.text} if args.text is not None else {})}
            sid = args.schedule
            value = await (
                c.update_thread_schedule(thread, sid, **fields) if thread else c.update_schedule(sid, **fields)
            )
        elif action == "delete":
            value = await (
                c.delete_thread_schedule(thread, args.schedule) if thread else c.delete_schedule(args.schedule)
            )
        else:
            paused = action == "pause"
            if thread:
                value = await (
                    c.pause_thread_schedule(thread, args.schedule)
                    if paused
                    else c.resume_thread_schedule(thread, args.schedule)
                )
            else:
                value = await (c.pause_schedule(args.schedule) if paused else c.resume_schedule(args.schedule))
    emit(args, value, _block)
    return 0


def _timing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cron", help="5 fields: minute hour day month weekday, e.g. '0 9 * * mon'")
    parser.add_argument("--timezone", help="IANA zone the cron expression is read in (default UTC)")
    parser.add_argument("--interval-seconds", dest="interval_seconds", type=int, help="every N seconds (60 at least)")
    parser.add_argument("--provider")
    parser.add_argument("--model")
    parser.add_argument("--mode", help="dispatch mode of the message (default auto)")
    parser.add_argument("--on-active", dest="on_active", choices=("skip", "queue", "dispatch"))
    parser.add_argument("--title", help="a tenant schedule's new threads' title")
    parser.add_argument("--runtime-mode", dest="runtime_mode", help="a tenant schedule's new threads' runtime mode")


def add_schedule_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], api: argparse.ArgumentParser
) -> None:
    group = sub.add_parser("schedules", help="messages sent on a clock").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    scope = argparse.ArgumentParser(add_help=False)
    scope.add_argument("--thread", help="a thread's schedules (default: the tenant's)")
    create = group.add_parser("create", parents=[api, scope], help="schedule a message")
    create.add_argument("text")
    _timing(create)
    create.add_argument("--paused", action="store_true", help="create it paused")
    group.add_parser("list", parents=[api, scope], help="schedules (all the tenant's without --thread)")
    show = group.add_parser("show", parents=[api, scope], help="a schedule and its next firing times")
    show.add_argument("schedule")
    show.add_argument("--count", type=int, help="how many next firing times (1..50)")
    update = group.add_parser("update", parents=[api, scope], help="change a schedule")
    update.add_argument("schedule")
    update.add_argument("--text")
    _timing(update)
    for name, help in (("delete", "delete a schedule"), ("pause", "pause its firings"), ("resume", "resume it")):
        group.add_parser(name, parents=[api, scope], help=help).add_argument("schedule")
    for parser in group.choices.values():
        parser.set_defaults(func=cmd_schedules)
