"""Broker access for event consumers: ``treadle consumers create|reset|revoke|list`` (operator commands, run
where the nats-server's directory is, e.g. next to ``treadle up``) and ``treadle events tail`` (a
tenant's consumer, with nothing but its credential). The operator creates and repositions a credential's
consumer; the credential itself can only pull from it (see :mod:`treadle.ops.broker_auth`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from rich.markup import escape

from ..eventlog.subjects import EVENTS_STREAM

if TYPE_CHECKING:
    from treadle.ops.broker_auth import BrokerAuth
from .config import connect_nats, nats_url, state_dir
from .errors import UsageError
from .output import as_json, json_line
from .render import console, stderr


def _auth(args: argparse.Namespace) -> BrokerAuth:
    from treadle.ops.broker_auth import BrokerAuth

    directory = Path(args.nats_dir) if args.nats_dir else state_dir(args) / "nats"
    if not (directory / "auth").is_dir():
        raise UsageError(
            f"{directory} is not the directory of a Treadle nats-server (no auth/ in it): pass "
            "--nats-dir, or run `treadle up` first"
        )
    return BrokerAuth(directory)


def _address(service_url: str) -> str:
    """The broker URL without the service user's credentials (every node of a cluster)."""
    from treadle.runtime import broker_urls

    try:
        return broker_urls.address(service_url)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


async def _reload(auth: BrokerAuth, args: argparse.Namespace) -> None:
    if args.no_reload:
        stderr.print("[yellow]not reloaded:[/] the server applies it at its next reload")
        return
    try:
        await asyncio.to_thread(auth.reload)
    except (OSError, ValueError, TimeoutError) as exc:
        raise UsageError(f"could not reload nats-server: {exc}") from None


async def _audit(args: argparse.Namespace, **record: Any) -> None:
    from treadle.ops import audit

    async with connect_nats(nats_url(args)) as nc:
        await audit.record(nc.jetstream(), **record)


async def cmd_consumers_create(args: argparse.Namespace) -> int:
    from treadle.ops import audit, tenant_consumers
    from treadle.ops.tenant_events import filters_of

    auth = _auth(args)
    service_url = nats_url(args)
    url = args.broker_url or _address(service_url)
    try:  # bad input fails before anything is issued
        tenant_consumers.config("tc_check", args.tenant, from_seq=args.from_seq, type_=args.type)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    async with connect_nats(service_url) as nc:  # first: an unreachable broker fails before anything is issued
        try:
            issued = auth.issue(args.tenant, url)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        try:
            js = nc.jetstream()
            consumer = await tenant_consumers.create(
                js, issued.consumer, args.tenant, from_seq=args.from_seq, type_=args.type
            )
            await _reload(auth, args)
            await audit.record(
                js,
                tenant=args.tenant,
                action="broker_credential.created",
                target=issued.user,
                details={"consumer": issued.consumer, "filter": " ".join(filters_of(consumer))},
            )
        except BaseException:
            auth.revoke(issued.user)  # not handed out, so not left behind either
            with contextlib.suppress(Exception):
                await nc.jetstream().delete_consumer(EVENTS_STREAM, issued.consumer)
            raise
    document = msgspec.json.format(msgspec.json.encode(issued), indent=2).decode() + "\n"
    if args.out:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(document)
        stderr.print(
            f"[green]✓[/] consumer credential {issued.user} for tenant {escape(args.tenant)} written to "
            f"{escape(args.out)}"
        )
    else:
        stderr.print(f"[green]✓[/] consumer credential {issued.user} for tenant {escape(args.tenant)}:")
        sys.stdout.write(document)
    return 0


async def cmd_consumers_reset(args: argparse.Namespace) -> int:
    """Recreate credentials' consumers: one at a chosen position, or (``--all``, e.g. after upgrading from
    credentials that created their own, possibly push, consumers) every one as a pull consumer where it was."""
    from treadle.ops import audit, tenant_consumers
    from treadle.ops.tenant_events import filters_of

    auth = _auth(args)
    if args.all == bool(args.credential):
        raise UsageError("name one credential, or pass --all")
    if args.all and (args.from_seq is not None or args.type):
        raise UsageError("--from-seq and --type are for one credential")
    if args.all:
        creds = auth.credentials()
    else:
        cred = auth.credential(args.credential)
        if cred is None:
            raise UsageError(f"no consumer credential {args.credential}")
        creds = [cred]
    async with connect_nats(nats_url(args)) as nc:
        js = nc.jetstream()
        for cred in creds:
            try:
                consumer = await tenant_consumers.reset(
                    js,
                    cred.consumer,
                    cred.tenant,
                    from_seq=args.from_seq,
                    type_=args.type,
                    keep_type=not args.all_types,
                )
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            await audit.record(
                js,
                tenant=cred.tenant,
                action="broker_credential.reset",
                target=cred.id,
                details={
                    "consumer": cred.consumer,
                    "filter": " ".join(filters_of(consumer)),
                    "from_seq": str(consumer.opt_start_seq or 1),
                },
            )
            if as_json(args):
                json_line(
                    {
                        "id": cred.id,
                        "tenant": cred.tenant,
                        "from_seq": consumer.opt_start_seq or 1,
                        "filter": filters_of(consumer),
                    }
                )
                continue
            console.print(
                f"[green]✓[/] consumer of {cred.id} (tenant {escape(cred.tenant)}) now starts at stream "
                f"sequence {consumer.opt_start_seq or 1}, filter {escape(' '.join(filters_of(consumer)))}"
            )
    return 0


async def cmd_consumers_revoke(args: argparse.Namespace) -> int:
    auth = _auth(args)
    gone = auth.revoke(args.credential)
    if gone is None:
        raise UsageError(f"no consumer credential {args.credential}")
    await _reload(auth, args)  # the server closes the credential's connections during the reload
    async with connect_nats(nats_url(args)) as nc:
        from nats.js.errors import NotFoundError

        from ..eventlog import streams  # imports nats: loaded with the command (nats is in the server extra)

        with contextlib.suppress(NotFoundError):
            # Revoking must not stop between the reload and this clean-up because a node was just lost.
            await streams.settled(lambda: nc.jetstream().delete_consumer(EVENTS_STREAM, gone.consumer))
    await _audit(args, tenant=gone.tenant, action="broker_credential.revoked", target=gone.id)
    if as_json(args):
        json_line({"revoked": gone.id, "tenant": gone.tenant})
        return 0
    console.print(f"[green]✓[/] revoked {gone.id} (tenant {escape(gone.tenant)}); its consumer is deleted")
    return 0


async def cmd_broker_init(args: argparse.Namespace) -> int:
    from treadle.ops.broker_auth import BrokerAuth

    directory = Path(args.nats_dir)
    password = os.environ.get(args.password_env) if args.password_env else None
    if args.password_env and not password:
        raise UsageError(f"${args.password_env} is empty")
    service = BrokerAuth(directory).init(password)
    if as_json(args):
        json_line({"auth_conf": str(directory / "auth.conf"), "user": service.user})
        return 0
    console.print(
        f"[green]✓[/] {escape(str(directory / 'auth.conf'))} written (include it from the nats-server "
        f"config); workers connect as TREADLE_NATS_USER={service.user} with "
        f"{'$' + args.password_env if args.password_env else 'the password in auth/service.json'}"
    )
    return 0


async def cmd_consumers_list(args: argparse.Namespace) -> int:
    creds = _auth(args).credentials()
    if as_json(args):
        json_line({"items": [{"id": c.id, "tenant": c.tenant, "created_at": c.created_at} for c in creds]})
        return 0
    for cred in creds:
        print(f"{cred.id}\t{cred.tenant}\t{cred.created_at}")
    return 0


async def cmd_events_tail(args: argparse.Namespace) -> int:
    from nats.errors import Error as NatsError
    from nats.errors import NoServersError

    from treadle.ops.tenant_events import TenantConsumerError, TenantCredential, TenantFollower

    creds_path = args.creds or os.environ.get("TREADLE_CONSUMER_CREDS")
    if not creds_path:
        raise UsageError("pass --creds FILE (from `treadle consumers create`) or set TREADLE_CONSUMER_CREDS")
    try:
        creds = TenantCredential.load(creds_path)
    except (OSError, msgspec.DecodeError) as exc:
        raise UsageError(f"cannot read credential {creds_path}: {exc}") from None
    if args.tenant and args.tenant != creds.tenant:
        raise UsageError(f"the credential is for tenant {creds.tenant}, not {args.tenant}")
    types = [args.type] if args.type else None
    seen = 0
    errors: list[Exception] = []

    async def remember(exc: Exception) -> None:  # instead of nats-py printing a traceback per attempt
        errors.append(exc)

    try:
        # One connection attempt: a refused credential fails at once, and a tail that loses its broker exits
        # (run it again: the durable consumer resumes after the last event it printed).
        async with (
            creds.connect(
                connect_timeout=3, max_reconnect_attempts=1, reconnect_time_wait=0.1, error_cb=remember
            ) as nc,
            TenantFollower(nc, creds, from_seq=args.from_seq, types=types, idle_timeout=args.idle_timeout) as events,
        ):
            async for event in events:
                line = {
                    "seq": event.seq,
                    "type": event.type,
                    "thread": event.thread,
                    "at": event.at,
                    "data": event.data,
                }
                print(msgspec.json.encode(line).decode(), flush=True)
                await events.ack(event)  # printed is handled: the next tail starts after it
                seen += 1
                if args.limit and seen >= args.limit:
                    break
    except TenantConsumerError as exc:
        raise UsageError(str(exc)) from None
    except (NatsError, ValueError, OSError) as exc:
        cause = errors[-1] if errors and isinstance(exc, NoServersError) else exc  # e.g. the auth refusal
        raise UsageError(f"{cause or type(cause).__name__}") from None
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], nats_: argparse.ArgumentParser) -> None:
    """Register ``consumers`` and ``events`` on the ``treadle`` parser."""
    broker = argparse.ArgumentParser(add_help=False, parents=[nats_])
    broker.add_argument("--nats-dir", help="the nats-server's directory (default: <state-dir>/nats)")
    broker.add_argument("--no-reload", action="store_true", help="write the server's auth file only")

    consumers = sub.add_parser("consumers", help="broker credentials for a tenant's event consumers").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create = consumers.add_parser("create", parents=[broker], help="issue a read-only credential for one tenant")
    create.add_argument("--tenant", required=True)
    create.add_argument("--out", metavar="FILE", help="write the credential here (0600) instead of stdout")
    create.add_argument("--broker-url", help="the URL consumers reach the broker at (default: the NATS URL)")
    create.add_argument("--from-seq", type=int, metavar="N", help="its consumer starts at this stream sequence")
    create.add_argument("--type", help="its consumer delivers only this event type, e.g. run.completed")
    create.set_defaults(func=cmd_consumers_create)
    reset = consumers.add_parser("reset", parents=[broker], help="recreate a credential's consumer at a position")
    reset.add_argument("credential", metavar="ID", nargs="?", help="tc_… as printed by `consumers create`/`list`")
    reset.add_argument("--all", action="store_true", help="every credential's consumer, each where it was")
    reset.add_argument(
        "--from-seq",
        type=int,
        metavar="N",
        help="start at this stream sequence (default: after the last event it acked)",
    )
    reset.add_argument("--type", help="deliver only this event type (default: the type it had)")
    reset.add_argument("--all-types", action="store_true", help="deliver every event type of the tenant again")
    reset.set_defaults(func=cmd_consumers_reset)
    revoke = consumers.add_parser("revoke", parents=[broker], help="revoke a credential and delete its consumer")
    revoke.add_argument("credential", metavar="ID", help="tc_… as printed by `consumers create`/`list`")
    revoke.set_defaults(func=cmd_consumers_revoke)
    listing = consumers.add_parser("list", parents=[broker], help="list credentials (id, tenant, created)")
    listing.set_defaults(func=cmd_consumers_list)

    broker_cmds = sub.add_parser("broker", help="the broker's authorization").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    init = broker_cmds.add_parser("init", help="write auth.conf (service user, tenant credentials) for a deployment")
    init.add_argument("--nats-dir", required=True, help="directory shared with nats-server (auth.conf goes here)")
    init.add_argument("--password-env", metavar="VAR", help="take the service password from this variable")
    init.set_defaults(func=cmd_broker_init)

    events = sub.add_parser("events", help="a tenant's durable events").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    tail = events.add_parser("tail", help="follow a tenant's events as JSON lines, resuming where it stopped")
    tail.add_argument("--creds", metavar="FILE", help="consumer credential (default: $TREADLE_CONSUMER_CREDS)")
    tail.add_argument("--tenant", help="check the credential is for this tenant")
    tail.add_argument(
        "--from-seq",
        type=int,
        metavar="N",
        help="skip ahead to this stream sequence (going back: the operator's `consumers reset`)",
    )
    tail.add_argument("--type", help="only this event type, e.g. run.completed")
    tail.add_argument("--limit", type=int, help="stop after this many events")
    tail.add_argument("--idle-timeout", type=float, help="stop after this many seconds without an event")
    tail.set_defaults(func=cmd_events_tail, interrupt_ok=True)
