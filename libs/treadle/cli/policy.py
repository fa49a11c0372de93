"""``treadle policy``: an operator sets or reads a tenant's policy directly in NATS (admins use the API)."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from .config import connect_nats, nats_url
from .errors import UsageError
from .render import stderr

MODES = ["approval_required", "auto_accept_edits", "full_access"]
QUOTAS = (
    "max_threads",
    "max_queued_runs",
    "max_delegation_depth",
    "max_children_per_run",
    "max_running_children",
    "max_disk_bytes",
    "max_disk_files",
    "max_schedules",
)


def add_policy_fields(parser: argparse.ArgumentParser) -> None:
    """What ``policy set`` (the operator's) and ``policy put`` (an admin's) both replace: the whole policy, so a
    field left out is the deployment's default."""
    parser.add_argument(
        "--allow-mode",
        action="append",
        dest="modes",
        metavar="MODE",
        choices=MODES,
        help="a runtime mode the tenant may use (repeat; default: approval_required, auto_accept_edits)",
    )
    parser.add_argument("--max-threads", type=int)
    parser.add_argument("--max-queued-runs", type=int, help="queued runs per thread")
    parser.add_argument("--max-delegation-depth", type=int, help="how deep a delegated task's own task may go")
    parser.add_argument("--max-children-per-run", type=int, help="tasks one run may delegate")
    parser.add_argument("--max-running-children", type=int, help="the tenant's delegated tasks not yet finished")
    parser.add_argument("--max-disk-bytes", type=int, help="what its workspaces and runtime homes may hold")
    parser.add_argument("--max-disk-files", type=int, help="files (inodes) its workspaces and runtime homes may hold")
    parser.add_argument("--max-schedules", type=int, help="its schedules (docs/schedules.md; default 100)")
    parser.add_argument(
        "--cascade-interrupts",
        action=argparse.BooleanOptionalAction,
        help="an interrupted run interrupts its async tasks (default: the deployment's setting)",
    )


def policy_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The quotas and the cascade setting as given (None: not given)."""
    return {name: getattr(args, name) for name in (*QUOTAS, "cascade_interrupts")}


async def cmd_policy_set(args: argparse.Namespace) -> int:
    from nats.js.errors import BucketNotFoundError

    from treadle.core.errors import DomainError
    from treadle.core.policy import DEFAULT_MODES, TenantPolicy
    from treadle.ops.audit import _operator
    from treadle.ops.policies import PolicyStore

    url = nats_url(args)
    wanted = TenantPolicy(allowed_modes=tuple(dict.fromkeys(args.modes or DEFAULT_MODES)), **policy_fields(args))
    async with connect_nats(url) as nc:
        try:
            stored = await PolicyStore(nc.jetstream()).put(args.tenant, wanted, actor=_operator())
        except BucketNotFoundError:
            raise UsageError(f"NATS at {url} has no treadle-policies bucket: is Treadle running on it?") from None
        except (ValueError, DomainError) as exc:
            raise UsageError(str(exc)) from None
    stderr.print(f"[green]✓[/] policy of {args.tenant} set")
    print(msgspec.json.encode(stored).decode())
    return 0


async def cmd_policy_show(args: argparse.Namespace) -> int:
    from treadle.ops.policies import PolicyStore

    async with connect_nats(nats_url(args)) as nc:
        print(msgspec.json.encode(await PolicyStore(nc.jetstream()).get(args.tenant)).decode())
    return 0
