"""The ``treadle`` command: run the embedded stack (``treadle up``) and talk to a running one.

Expected failures (the API said no, nothing is listening, bad input) end with one red line (a JSON error with
``--output json``) and an exit code of their kind (``exits``), never a traceback. The base install (``pip install
treadle``) is the client: the commands that run or administer the server import its dependencies when they run,
and without them say which extra to install.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys

from rich.markup import escape

from ..client import ApiError
from . import check, completion, consumers, dead_letters, exits, volumes, webhooks
from .admin import (
    cmd_backup,
    cmd_projections_rebuild,
    cmd_restore,
    cmd_schemas,
    cmd_tokens_create,
    cmd_tokens_revoke,
)
from .config import DEFAULT_API
from .errors import UsageError, describe
from .output import as_json, json_line
from .parsers import add_api_parsers, add_policy_api_parsers
from .policy import add_policy_fields, cmd_policy_set, cmd_policy_show
from .render import stderr
from .schedules import add_schedule_parsers
from .up import cmd_up

# The top-level modules of the server extra's packages (pyproject.toml): a command that cannot import one needs it
SERVER_MODULES = frozenset(
    (
        "nats redis hiredis pydantic pydantic_settings uvloop prometheus_client litestar uvicorn httptools bcrypt mcp "
        "opentelemetry"
    ).split()
)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("treadle")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument(
        "-o",
        "--output",
        choices=["text", "json"],
        default=argparse.SUPPRESS,  # the top-level option's value stands unless given here
        help="text for people (default) or JSON for scripts",
    )
    state = argparse.ArgumentParser(add_help=False, parents=[out])
    state.add_argument(
        "--state-dir", help="where `treadle up` keeps its state (default: $TREADLE_STATE_DIR or .treadle)"
    )
    api = argparse.ArgumentParser(add_help=False, parents=[state])
    api.add_argument("--api", help=f"gateway URL (default: $TREADLE_API_URL, <state-dir>/api-url, {DEFAULT_API})")
    api.add_argument("--token", help="bearer token (default: $TREADLE_TOKEN, <state-dir>/dev-token)")
    nats_ = argparse.ArgumentParser(add_help=False, parents=[state])
    nats_.add_argument("--nats-url", help="NATS URL (default: $TREADLE_NATS_URL, <state-dir>/nats-url)")

    parser = argparse.ArgumentParser(
        prog="treadle",
        description="Treadle: orchestration backend for coding agents.",
        epilog="exit codes: " + "; ".join(f"{code} {what}" for code, what in exits.TABLE),
    )
    parser.add_argument("--version", action="version", version=f"treadle {version()}")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text", help="text (default) or json")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", parents=[state], help="run the whole stack locally (NATS, Redis, eight workers)")
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
        "--workspace-nodes",
        type=int,
        default=1,
        metavar="N",
        help="run N workspace nodes (volumes node-1..node-N, each its own directory, checkpoint service and "
        "provider hosts); new threads are placed across them (default 1: volume local)",
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
        help="run N replicas each of coordinator, supervisor, projector and webhooks, sharing the thread "
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
    volumes.add_parser(sub, nats_)

    policy = sub.add_parser("policy", help="tenant policies").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    pset = policy.add_parser("set", parents=[nats_], help="replace a tenant's policy (audited)")
    pset.add_argument("--tenant", required=True)
    add_policy_fields(pset)
    pset.set_defaults(func=cmd_policy_set)
    pshow = policy.add_parser("show", parents=[nats_], help="a tenant's policy as JSON")
    pshow.add_argument("--tenant", required=True)
    pshow.set_defaults(func=cmd_policy_show)

    add_api_parsers(sub, api)
    add_policy_api_parsers(policy, api)
    add_schedule_parsers(sub, api)
    webhooks.add_parser(sub, api)

    projections = sub.add_parser("projections", help="Redis read models").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    rebuild = projections.add_parser("rebuild", parents=[nats_], help="replay the event log into Redis")
    rebuild.add_argument("--redis-url", help="Redis URL (default: $TREADLE_REDIS_URL, <state-dir>/redis-url)")
    rebuild.set_defaults(func=cmd_projections_rebuild)
    check.add_parser(sub, nats_)

    # the durable state (docs/operations.md): JetStream's snapshots of every stream, KV bucket and object store
    bk = sub.add_parser("backup", parents=[nats_], help="snapshot the event log, KV buckets and object store")
    bk.add_argument("directory", help="a new or empty directory")
    bk.set_defaults(func=cmd_backup)
    rs = sub.add_parser("restore", parents=[nats_], help="restore a backup into a broker that has none of it")
    rs.add_argument("directory", help="what `treadle backup` wrote")
    rs.set_defaults(func=cmd_restore)

    schemas = sub.add_parser("schemas", parents=[out], help="regenerate schemas/ from the code")
    schemas.add_argument("--check", action="store_true", help="only report files that are out of date")
    schemas.set_defaults(func=cmd_schemas)
    comp = sub.add_parser("completion", help='print a shell completion script: eval "$(treadle completion bash)"')
    comp.add_argument("shell", choices=["bash", "zsh"])
    comp.set_defaults(func=completion.cmd_completion)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = asyncio.run(args.func(args))
        return code
    except (ApiError, UsageError, TimeoutError, exits.NeedsInput, exits.RunNotCompleted) as exc:
        code = exits.code_for(exc)
        if as_json(args):
            _json_error(exc, code)
        else:
            stderr.print(f"[red]error:[/] {escape(describe(exc))}", soft_wrap=True)
        return code
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
        return exits.FAILED
    except KeyboardInterrupt:
        return 0 if getattr(args, "interrupt_ok", False) else exits.INTERRUPTED
    except BrokenPipeError:
        # `treadle … | head`: the reader left. Point stdout at /dev/null so the exit-time flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _json_error(exc: BaseException, code: int) -> None:
    """The failure as one JSON line on stderr: stdout stays what a successful command prints, or nothing."""
    error = {"code": type(exc).__name__, "message": describe(exc), "exit": code}
    if isinstance(exc, ApiError):
        error.update(code=exc.code, status=exc.status, message=exc.message, details=exc.details)
    with contextlib.redirect_stdout(sys.stderr):
        json_line({"error": error})


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
