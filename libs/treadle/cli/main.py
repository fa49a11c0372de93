"""The ``treadle`` command: run the embedded stack (``treadle up``) and talk to a running one.

Expected failures (the API said no, nothing is listening, bad input) end with one red line and exit code 1, never
a traceback. The base install (``pip install treadle``) is the client: the commands that run or administer the
server import its dependencies when they run, and without them say which extra to install.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from rich.markup import escape

from ..client.http import ApiError
from . import check, consumers, dead_letters
from .admin import cmd_projections_rebuild, cmd_schemas, cmd_tokens_create, cmd_tokens_revoke
from .config import DEFAULT_API
from .errors import UsageError, describe
from .policy import cmd_policy_set, cmd_policy_show
from .render import stderr
from .threads import cmd_send, cmd_threads_create, cmd_threads_list, cmd_threads_show, cmd_watch
from .up import cmd_up

# The top-level modules of the server extra's packages (pyproject.toml): a command that cannot import one needs it
SERVER_MODULES = frozenset(
    (
        "nats redis hiredis pydantic pydantic_settings uvloop prometheus_client litestar uvicorn httptools bcrypt "
        "opentelemetry"
    ).split()
)


def build_parser() -> argparse.ArgumentParser:
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument(
        "--state-dir", help="where `treadle up` keeps its state (default: $TREADLE_STATE_DIR or .treadle)"
    )
    api = argparse.ArgumentParser(add_help=False, parents=[state])
    api.add_argument("--api", help=f"gateway URL (default: $TREADLE_API_URL, <state-dir>/api-url, {DEFAULT_API})")
    api.add_argument("--token", help="bearer token (default: $TREADLE_TOKEN, <state-dir>/dev-token)")
    nats_ = argparse.ArgumentParser(add_help=False, parents=[state])
    nats_.add_argument("--nats-url", help="NATS URL (default: $TREADLE_NATS_URL, <state-dir>/nats-url)")

    parser = argparse.ArgumentParser(prog="treadle", description="Treadle: orchestration backend for coding agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", parents=[state], help="run the whole stack locally (NATS, Redis, six workers)")
    up.add_argument("--port", type=int, default=8700, help="gateway port (default 8700)")
    up.add_argument(
        "--demo",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run a short live demo once the stack is up (default: on)",
    )
    up.add_argument("-v", "--verbose", action="store_true", help="show every worker log line, not only warnings")
    up.add_argument(
        "--provider-hosts",
        type=int,
        default=1,
        metavar="N",
        help="run N provider hosts (host-1..host-N) sharing the placement queue group (default 1)",
    )
    up.add_argument(
        "--nats-cluster",
        type=int,
        default=1,
        metavar="N",
        help="run NATS as a JetStream cluster of N nodes (3 or more; streams and buckets R3) instead "
        "of one server (default 1)",
    )
    up.add_argument(
        "--replicas",
        type=int,
        default=1,
        metavar="N",
        help="run N replicas each of coordinator, supervisor and projector, sharing the thread "
        "partitions by lease (default 1)",
    )
    up.set_defaults(func=cmd_up, interrupt_ok=True, extra="embedded")  # the server and a nats-server binary

    tokens = sub.add_parser("tokens", help="API tokens").add_subparsers(dest="action", required=True, metavar="ACTION")
    create = tokens.add_parser("create", parents=[nats_], help="create a token (printed on stdout)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--user", required=True)
    create.add_argument(
        "--role",
        default="member",
        choices=["admin", "member"],
        help="admin: tokens, consumers, policy; member: threads (default)",
    )
    create.set_defaults(func=cmd_tokens_create)
    revoke = tokens.add_parser("revoke", parents=[nats_], help="revoke a token (the token itself, or --id)")
    revoke.add_argument("token", nargs="?", help="the bearer token")
    revoke.add_argument("--id", help="the token's id (printed by `tokens create`)")
    revoke.set_defaults(func=cmd_tokens_revoke)
    consumers.add_parsers(sub, nats_)
    dead_letters.add_parser(sub, nats_)

    policy = sub.add_parser("policy", help="tenant policies").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    pset = policy.add_parser("set", parents=[nats_], help="replace a tenant's policy (audited)")
    pset.add_argument("--tenant", required=True)
    pset.add_argument(
        "--allow-mode",
        action="append",
        dest="modes",
        metavar="MODE",
        choices=["approval_required", "auto_accept_edits", "full_access"],
        help="a runtime mode the tenant may use (repeat; default: approval_required, auto_accept_edits)",
    )
    pset.add_argument("--max-threads", type=int)
    pset.add_argument("--max-queued-runs", type=int, help="queued runs per thread")
    pset.set_defaults(func=cmd_policy_set)
    pshow = policy.add_parser("show", parents=[nats_], help="a tenant's policy as JSON")
    pshow.add_argument("--tenant", required=True)
    pshow.set_defaults(func=cmd_policy_show)

    threads = sub.add_parser("threads", help="app threads").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
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
        dest="action", required=True, metavar="ACTION"
    )
    rebuild = projections.add_parser("rebuild", parents=[nats_], help="replay the event log into Redis")
    rebuild.add_argument("--redis-url", help="Redis URL (default: $TREADLE_REDIS_URL, <state-dir>/redis-url)")
    rebuild.set_defaults(func=cmd_projections_rebuild)
    check.add_parser(sub, nats_)

    schemas = sub.add_parser("schemas", help="regenerate schemas/ from the code")
    schemas.add_argument("--check", action="store_true", help="only report files that are out of date")
    schemas.set_defaults(func=cmd_schemas)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(args.func(args))
    except (ApiError, UsageError, TimeoutError) as exc:
        stderr.print(f"[red]error:[/] {escape(describe(exc))}", soft_wrap=True)
        return 1
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc, args)
        if extra is None:  # not an optional dependency: a broken install or a bug, shown as such
            raise
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        stderr.print(
            f"[red]error:[/] `treadle {escape(command)}` needs the {extra} dependencies, which this install lacks "
            f"(no module named {escape(repr(exc.name))}): pip install 'treadle\\[{extra}]'",
            soft_wrap=True,
        )
        return 1
    except KeyboardInterrupt:
        return 0 if getattr(args, "interrupt_ok", False) else 130
    except BrokenPipeError:
        # `treadle … | head`: the reader left. Point stdout at /dev/null so the exit-time flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def missing_extra(exc: ModuleNotFoundError, args: argparse.Namespace) -> str | None:
    """The extra that installs a module a command could not import (None: not an optional dependency)."""
    module = (exc.name or "").partition(".")[0]
    if module == "claude_agent_sdk":
        return "claude"
    if module in SERVER_MODULES:
        return getattr(args, "extra", "server")  # `up` names the embedded extra, which includes the server
    return None


if __name__ == "__main__":
    sys.exit(main())
