"""``treadle policy``: an operator sets or reads a tenant's policy directly in NATS (admins use the API)."""

from __future__ import annotations

import argparse

import msgspec

from .config import connect_nats, nats_url
from .errors import UsageError
from .render import stderr


async def cmd_policy_set(args: argparse.Namespace) -> int:
    from nats.js.errors import BucketNotFoundError

    from treadle.core.errors import DomainError
    from treadle.core.policy import DEFAULT_MODES, TenantPolicy
    from treadle.ops.audit import _operator
    from treadle.ops.policies import PolicyStore

    url = nats_url(args)
    wanted = TenantPolicy(
        allowed_modes=tuple(dict.fromkeys(args.modes or DEFAULT_MODES)),
        max_threads=args.max_threads,
        max_queued_runs=args.max_queued_runs,
    )
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
