"""``treadle webhooks …``: a tenant's webhook endpoints and their deliveries, through the API, for its admins
(docs/webhooks.md). The secret is printed once, by ``create``."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from .config import api_client
from .output import as_json, builtins, emit, json_line
from .render import console


async def _call(args: argparse.Namespace, op: str, *a: Any, **kw: Any) -> int:
    async with api_client(args) as client:
        emit(args, await getattr(client, op)(*a, **kw), _block)
    return 0


def _block(value: dict[str, Any]) -> None:
    import json

    console.print_json(json.dumps(value, default=str))


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    console.print(table)


async def cmd_create(args: argparse.Namespace) -> int:
    return await _call(
        args,
        "create_webhook",
        args.url,
        args.events,
        threads=args.threads,
        secret=args.secret,
        description=args.description or "",
    )


async def cmd_list(args: argparse.Namespace) -> int:
    async with api_client(args) as client:
        found = await client.list_webhooks()
    if as_json(args):
        json_line(found)
        return 0
    items = builtins(found)["items"]
    rows = [(h["id"], h["url"], ",".join(h["events"]), "yes" if h["enabled"] else "no") for h in items]
    _table("webhooks", ("id", "url", "events", "enabled"), rows)
    return 0


async def cmd_show(args: argparse.Namespace) -> int:
    return await _call(args, "get_webhook", args.webhook_id)


async def cmd_update(args: argparse.Namespace) -> int:
    return await _call(
        args,
        "update_webhook",
        args.webhook_id,
        url=args.url,
        events=args.events,
        threads=args.threads,
        secret=args.secret,
        description=args.description,
        enabled=args.enabled,
    )


async def cmd_delete(args: argparse.Namespace) -> int:
    return await _call(args, "delete_webhook", args.webhook_id)


async def cmd_deliveries(args: argparse.Namespace) -> int:
    async with api_client(args) as client:
        found = await client.list_deliveries(args.webhook_id, status=args.status, limit=args.limit)
    if as_json(args):
        json_line(found)
        return 0
    rows = [
        (
            d["id"],
            d["event_type"],
            d["thread"],
            d["seq"],
            d["status"],
            d["attempts"],
            d["error"] or d["response_status"],
        )
        for d in builtins(found)["items"]
    ]
    _table("deliveries", ("id", "event", "thread", "seq", "status", "attempts", "last"), rows)
    return 0


async def cmd_replay(args: argparse.Namespace) -> int:
    return await _call(args, "replay_delivery", args.webhook_id, args.delivery_id)


def _fields(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument(
        "--event",
        dest="events",
        action="append",
        required=required,
        metavar="TYPE",
        help="an event type to send (run.completed, run.failed, request.opened, thread.created, … or *); repeat",
    )
    p.add_argument("--thread", dest="threads", action="append", metavar="THREAD_ID", help="only this thread; repeat")
    p.add_argument("--secret", help="the signing secret (default: Treadle makes one, printed once)")
    p.add_argument("--description")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], api: argparse.ArgumentParser) -> None:
    hooks = sub.add_parser("webhooks", help="signed webhooks of your tenant (admin)").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create = hooks.add_parser("create", parents=[api], help="register an endpoint; prints its secret once")
    create.add_argument("url")
    _fields(create, required=True)
    create.set_defaults(func=cmd_create)
    hooks.add_parser("list", parents=[api], help="your tenant's endpoints").set_defaults(func=cmd_list)
    show = hooks.add_parser("show", parents=[api], help="one endpoint")
    show.add_argument("webhook_id")
    show.set_defaults(func=cmd_show)
    update = hooks.add_parser("update", parents=[api], help="change an endpoint")
    update.add_argument("webhook_id")
    update.add_argument("--url")
    _fields(update, required=False)
    on = update.add_mutually_exclusive_group()
    on.add_argument("--enable", dest="enabled", action="store_const", const=True, default=None)
    on.add_argument("--disable", dest="enabled", action="store_const", const=False)
    update.set_defaults(func=cmd_update)
    delete = hooks.add_parser("delete", parents=[api], help="delete an endpoint")
    delete.add_argument("webhook_id")
    delete.set_defaults(func=cmd_delete)
    deliveries = hooks.add_parser("deliveries", parents=[api], help="an endpoint's deliveries, newest first")
    deliveries.add_argument("webhook_id")
    deliveries.add_argument("--status", choices=["pending", "delivered", "failed"], help="failed: the dead letters")
    deliveries.add_argument("--limit", type=int)
    deliveries.set_defaults(func=cmd_deliveries)
    replay = hooks.add_parser("replay", parents=[api], help="send a delivered or dead-lettered delivery again")
    replay.add_argument("webhook_id")
    replay.add_argument("delivery_id")
    replay.set_defaults(func=cmd_replay)
