"""Operator commands: they talk to NATS and Redis directly, not to the API."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from rich.markup import escape

from .config import connect_nats, nats_url, setting
from .errors import UsageError
from .output import as_json, json_line
from .render import console, stderr


async def cmd_tokens_create(args: argparse.Namespace) -> int:
    from nats.js.errors import BucketNotFoundError

    from treadle.ops.tokens import TokenStore

    url = nats_url(args)
    async with connect_nats(url) as nc:
        try:
            token = await TokenStore(nc.jetstream()).create(args.tenant, args.user, args.role)
        except BucketNotFoundError:
            raise UsageError(f"NATS at {url} has no treadle-tokens bucket: is Treadle running on it?") from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    from treadle.ops.tokens import token_id

    if as_json(args):
        json_line({"token": token, "id": token_id(token), "tenant": args.tenant, "user": args.user, "role": args.role})
        return 0
    stderr.print(
        f"[green]✓[/] token {token_id(token)} for {escape(args.tenant)}/{escape(args.user)} ({escape(args.role)}):"
    )
    print(token)  # alone on stdout, so TOKEN=$(treadle tokens create …) works
    return 0


async def cmd_tokens_revoke(args: argparse.Namespace) -> int:
    from nats.js.errors import BucketNotFoundError

    from treadle.ops.tokens import TokenStore, UnknownToken

    if bool(args.token) == bool(args.id):
        raise UsageError("pass either the token or --id ID")
    url = nats_url(args)
    async with connect_nats(url) as nc:
        try:
            who = await TokenStore(nc.jetstream()).revoke(args.token, id=args.id)
        except BucketNotFoundError:
            raise UsageError(f"NATS at {url} has no treadle-tokens bucket: is Treadle running on it?") from None
        except UnknownToken as exc:
            raise UsageError(str(exc)) from None
    if as_json(args):
        json_line({"revoked": True, "tenant": who.tenant, "user": who.user})
        return 0
    console.print(
        f"[green]✓[/] revoked the token of {escape(who.tenant)}/{escape(who.user)} (gateways stop "
        "accepting it within 5 s)"
    )
    return 0


async def cmd_projections_rebuild(args: argparse.Namespace) -> int:
    from redis.exceptions import RedisError

    from treadle.projections.rebuild import rebuild
    from treadle.projections.store import ProjectionStore

    from ..projections.connect import redis_client

    redis_url = setting(args.redis_url, "TREADLE_REDIS_URL", args, "redis-url")
    if not redis_url:
        raise UsageError("no Redis URL: pass --redis-url, set TREADLE_REDIS_URL, or run `treadle up`")
    redis = redis_client(redis_url)
    try:
        async with connect_nats(nats_url(args)) as nc:
            quiet = contextlib.nullcontext() if as_json(args) else console.status("replaying TREADLE_EVENTS…")
            with quiet:
                count = await rebuild(nc, ProjectionStore(redis))
    except RedisError as exc:
        raise UsageError(f"Redis at {redis_url}: {exc}") from None
    finally:
        await redis.aclose()
    if as_json(args):
        json_line({"rebuilt": count})
        return 0
    console.print(f"[green]✓[/] rebuilt {count} thread projection{'s' if count != 1 else ''}")
    return 0


async def cmd_schemas(args: argparse.Namespace) -> int:
    from . import schemas

    if not as_json(args):
        return schemas.main(["--check"] if args.check else [])
    if args.check:
        stale = schemas.check()
        json_line({"stale": stale})
        return 1 if stale else 0
    json_line({"written": [str(p) for p in schemas.write()]})
    return 0


async def cmd_backup(args: argparse.Namespace) -> int:
    from treadle.ops.backup import BackupError, backup

    return await _copy(args, backup, BackupError, "backed up")


async def cmd_restore(args: argparse.Namespace) -> int:
    from treadle.ops.backup import BackupError, restore

    return await _copy(args, restore, BackupError, "restored")


async def _copy(
    args: argparse.Namespace, step: Callable[..., Awaitable[Any]], error: type[Exception], done: str
) -> int:
    import time
    from pathlib import Path

    started = time.perf_counter()
    async with connect_nats(nats_url(args)) as nc:
        try:
            copied = await step(nc, Path(args.directory))
        except error as exc:
            raise UsageError(str(exc)) from None
    seconds = round(time.perf_counter() - started, 3)
    rows = [
        {"stream": c.stream, "bytes": c.bytes, "messages": c.messages, "seconds": round(c.seconds, 3)} for c in copied
    ]
    if as_json(args):
        json_line({"directory": args.directory, "seconds": seconds, "streams": rows})
        return 0
    for row in rows:
        console.print(
            f"  {escape(row['stream']):34} {row['messages']:>9} msgs {row['bytes']:>12} bytes {row['seconds']:>7.3f} s"
        )
    console.print(f"[green]✓[/] {done} {len(rows)} streams in {seconds:.3f} s: {escape(args.directory)}")
    return 0
