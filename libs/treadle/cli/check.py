"""``treadle check``: the event log's invariants, and every Redis projection against a replay of the log.

Reads only: NATS (TREADLE_EVENTS) and Redis. Exit status 0 when everything holds, 1 with a report of each
problem otherwise (``--json``: the report as one JSON object on stdout either way).
"""

from __future__ import annotations

import argparse
import contextlib

import msgspec
from rich.markup import escape

from .config import connect_nats, nats_url, setting
from .errors import UsageError
from .render import console


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], nats_: argparse.ArgumentParser) -> None:
    check = sub.add_parser(
        "check", parents=[nats_], help="verify the event log's invariants and that Redis matches a replay of it"
    )
    check.add_argument("--redis-url", help="Redis URL (default: $TREADLE_REDIS_URL, <state-dir>/redis-url)")
    check.add_argument("--tenant", help="check one tenant's threads only")
    check.add_argument(
        "--settle",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a projection may lag behind the log before it counts as a problem (default 10)",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=cmd_check)


async def cmd_check(args: argparse.Namespace) -> int:
    from redis.exceptions import RedisError

    from treadle.projections.check import check_projections

    from ..projections.connect import redis_client

    redis_url = setting(args.redis_url, "TREADLE_REDIS_URL", args, "redis-url")
    if not redis_url:
        raise UsageError("no Redis URL: pass --redis-url, set TREADLE_REDIS_URL, or run `treadle up`")
    if args.settle < 0:
        raise UsageError("--settle must be 0 or more seconds")
    args.json = args.json or getattr(args, "output", "text") == "json"
    redis = redis_client(redis_url)
    try:
        async with connect_nats(nats_url(args)) as nc:
            status = contextlib.nullcontext() if args.json else console.status("replaying TREADLE_EVENTS…")
            with status:
                report = await check_projections(nc, redis, args.tenant, settle=args.settle)
    except RedisError as exc:
        raise UsageError(f"Redis at {redis_url}: {exc}") from None
    finally:
        await redis.aclose()
    if args.json:
        print(msgspec.json.encode({"ok": report.ok, **msgspec.structs.asdict(report)}).decode())
    elif report.ok:
        console.print(f"[green]✓[/] {escape(report.summary())}")
    else:
        head, *lines = report.summary(limit=200).splitlines()
        console.print(f"[red]✗[/] {escape(head)}", soft_wrap=True)
        for line in lines:
            console.print(escape(line), soft_wrap=True)
    return 0 if report.ok else 1
