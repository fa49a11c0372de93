"""What an idle stack costs: CPU per second of every worker, nats-server and redis-server while nothing runs
(pull loops waiting, lease heartbeats, host heartbeats). Not part of CI.

    .venv/bin/python bench/idle.py [--seconds 30] [--replicas 1]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import tempfile
from pathlib import Path

from sampling import Procs

from treadle.cli.stack import Stack


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args()
    options = {"replicas": args.replicas} if "replicas" in inspect.signature(Stack.__init__).parameters else {}
    with tempfile.TemporaryDirectory() as tmp:
        async with Stack(Path(tmp), on_output=lambda name, line: None, **options) as stack:
            await stack.wait_ready()
            await asyncio.sleep(5)  # let start-up work (stream creation, first claims) finish before measuring
            procs = Procs(stack)
            before = procs.cpu()
            await asyncio.sleep(args.seconds)  # the measured idle interval
            after = procs.cpu()
    print(f"idle CPU over {args.seconds:g}s (ms of CPU per second)")
    total = 0.0
    for name in sorted(before):
        if name == "bench-client":
            continue
        ms = (after[name] - before[name]) * 1000 / args.seconds
        total += ms
        print(f"  {name:14} {ms:6.2f}")
    print(f"  {'total':14} {total:6.2f}")


if __name__ == "__main__":
    asyncio.run(main())
