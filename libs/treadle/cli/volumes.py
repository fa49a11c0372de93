"""``treadle volumes list|drain|forget``: the workspace volumes (workspace nodes) new threads are placed on.
Operator commands: they use the service credentials (TREADLE_NATS_*)."""

from __future__ import annotations

import argparse

import msgspec

from .config import connect_nats, nats_url
from .errors import UsageError


def _volume(text: str) -> str:
    from treadle.core.ids import is_token

    if not is_token(text):
        raise argparse.ArgumentTypeError(f"a volume name is a token ([A-Za-z0-9_-], 1..64 characters), not {text!r}")
    return text


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.1f}"


async def cmd_list(args: argparse.Namespace) -> int:
    from treadle.core.placement import placeable
    from treadle.runtime.volumes import Volumes

    async with connect_nats(nats_url(args)) as nc:
        volumes, _ = await Volumes(nc.jetstream()).read()
    if getattr(args, "output", "text") == "json" or args.json:
        print(msgspec.json.encode([{**msgspec.structs.asdict(v), "placeable": placeable(v)} for v in volumes]).decode())
        return 0
    print("volume\tcheckpoints\thosts\tsessions\tdisk_free_gib\tworkspaces\tstate")
    for v in volumes:
        state = "draining" if v.draining else "placeable" if placeable(v) else "not placeable"
        live = "live" if v.checkpoints else "gone"
        print(f"{v.name}\t{live}\t{v.hosts}\t{v.live}/{v.capacity}\t{_gib(v.disk_free)}\t{v.workspaces}\t{state}")
    return 0


async def cmd_drain(args: argparse.Namespace) -> int:
    from treadle.runtime.volumes import drain

    async with connect_nats(nats_url(args)) as nc:
        await drain(nc.jetstream(), args.volume, draining=not args.off)
    print(f"volume {args.volume} {'takes new threads again' if args.off else 'takes no new threads'}")
    return 0


async def cmd_forget(args: argparse.Namespace) -> int:
    from treadle.ops import rehoming

    async with connect_nats(nats_url(args)) as nc:
        try:
            moved = await rehoming.forget(nc, args.volume)
        except (rehoming.StillLive, rehoming.NoVolumeLeft) as exc:
            raise UsageError(str(exc)) from None
    for m in moved:
        print(msgspec.json.encode(m).decode())
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], nats_: argparse.ArgumentParser) -> None:
    volumes = sub.add_parser("volumes", help="workspace volumes (nodes) threads live on").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = volumes.add_parser("list", parents=[nats_], help="every announced volume: liveness, load, state")
    listing.add_argument("--json", action="store_true", help="as JSON")
    listing.set_defaults(func=cmd_list)
    drain = volumes.add_parser("drain", parents=[nats_], help="place no new thread on VOLUME (its threads stay)")
    drain.add_argument("volume", type=_volume, metavar="VOLUME")
    drain.add_argument("--off", action="store_true", help="take the mark off: VOLUME takes new threads again")
    drain.set_defaults(func=cmd_drain)
    forget = volumes.add_parser(
        "forget", parents=[nats_], help="VOLUME is gone: move its threads to live volumes (thread.moved)"
    )
    forget.add_argument("volume", type=_volume, metavar="VOLUME")
    forget.set_defaults(func=cmd_forget)
