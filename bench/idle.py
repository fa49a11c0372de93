"""What an idle stack costs: CPU per second of every worker, nats-server and redis-server while nothing runs
(pull loops waiting, lease heartbeats, host heartbeats). Not part of CI.

    .venv/bin/python bench/idle.py [--seconds 30] [--replicas 1] [--census]

``--census``: a wiretap on ``>`` over the interval (a process of its own, so its CPU and the broker's work
for it are in the numbers: compare censuses with censuses), and the messages per second by kind.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import inspect
import tempfile
from pathlib import Path

from sampling import Procs
from turn_hops import kind_of
from wiretap import Wiretap

from treadle.cli.stack import Stack


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--census", action="store_true", help="count the broker's messages by kind")
    args = parser.parse_args()
    options = {"replicas": args.replicas} if "replicas" in inspect.signature(Stack.__init__).parameters else {}
    with tempfile.TemporaryDirectory() as tmp:
        async with Stack(Path(tmp), on_output=lambda name, line: None, **options) as stack:
            await stack.wait_ready()
            await asyncio.sleep(5)  # let start-up work (stream creation, first claims) finish before measuring
            procs = Procs(stack)
            tap = await Wiretap.start(stack.nats_url) if args.census else None
            before = procs.cpu()
            await asyncio.sleep(args.seconds)  # the measured idle interval
            after = procs.cpu()
            records = await tap.stop() if tap is not None else []
    print(f"idle CPU over {args.seconds:g}s (ms of CPU per second)")
    total = 0.0
    for name in sorted(before):
        if name == "bench-client":
            continue
        ms = (after[name] - before[name]) * 1000 / args.seconds
        total += ms
        print(f"  {name:14} {ms:6.2f}")
    print(f"  {'total':14} {total:6.2f}")
    if records:
        counts = collections.Counter(kind_of(subject) for _, subject, *_ in records)
        print("broker messages per second, by kind")
        for kind, count in counts.most_common():
            print(f"  {count / args.seconds:7.2f}  {kind}")


if __name__ == "__main__":
    asyncio.run(main())
