"""``treadle dead-letters list|show|replay|drop``: what consumers gave up on, why, and what to do about it
(treadle.runtime.dead_letters). Operator commands: they use the service credentials (TREADLE_NATS_*)."""

from __future__ import annotations

import argparse
import base64
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from treadle.runtime.dead_letters import DeadLetter

import msgspec

from .config import connect_nats, nats_url
from .errors import UsageError


def _seq(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 2**63:
        raise argparse.ArgumentTypeError(f"a dead letter's sequence is a positive number, not {text!r}")
    return int(text)


def _record(letter: DeadLetter, with_data: bool) -> dict[str, Any]:
    out = {
        "seq": letter.seq,
        "at": letter.at,
        "consumer": letter.consumer,
        "stream": letter.stream,
        "stream_seq": letter.stream_seq,
        "subject": letter.subject,
        "failures": letter.failures,
        "reason": letter.reason,
    }
    if with_data:
        try:
            out["data"] = msgspec.json.decode(letter.data)
        except msgspec.DecodeError:
            out["data_base64"] = base64.b64encode(letter.data).decode()
    return out


async def cmd_list(args: argparse.Namespace) -> int:
    from treadle.runtime import dead_letters

    async with connect_nats(nats_url(args)) as nc:
        for letter in await dead_letters.listing(nc.jetstream(), limit=args.limit):
            print(f"{letter.seq}\t{letter.at}\t{letter.consumer}\t{letter.subject}\t{letter.reason}")
    return 0


async def _one(args: argparse.Namespace, action: str) -> int:
    from treadle.runtime import dead_letters

    async with connect_nats(nats_url(args)) as nc:
        js = nc.jetstream()
        try:
            if action == "show":
                letter = await dead_letters.show(js, args.seq)
            elif action == "drop":
                letter = await dead_letters.drop(js, args.seq)
            else:
                letter = await dead_letters.replay(nc, js, args.seq)
        except dead_letters.DeadLetterNotFound as exc:
            raise UsageError(str(exc)) from None
        except dead_letters.ReplayRefused as exc:
            raise UsageError(str(exc)) from None
    print(msgspec.json.encode(_record(letter, with_data=action == "show")).decode())
    return 0


async def cmd_show(args: argparse.Namespace) -> int:
    return await _one(args, "show")


async def cmd_replay(args: argparse.Namespace) -> int:
    return await _one(args, "replay")


async def cmd_drop(args: argparse.Namespace) -> int:
    return await _one(args, "drop")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], nats_: argparse.ArgumentParser) -> None:
    letters = sub.add_parser("dead-letters", help="messages consumers gave up on").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = letters.add_parser("list", parents=[nats_], help="seq, time, consumer, subject and reason, oldest first")
    listing.add_argument("--limit", type=int, default=100)
    listing.set_defaults(func=cmd_list)
    for name, func, text in (
        ("show", cmd_show, "one dead letter with its payload, as JSON"),
        ("replay", cmd_replay, "hand it back to its consumer (removed once accepted)"),
        ("drop", cmd_drop, "delete it"),
    ):
        one = letters.add_parser(name, parents=[nats_], help=text)
        one.add_argument("seq", type=_seq, metavar="SEQ", help="as printed by `dead-letters list`")
        one.set_defaults(func=func)
