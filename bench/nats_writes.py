"""Client CPU per publish when a worker writes one message per loop turn (its case at low load): nats-py's own
flusher task against ``treadle.runtime.nats_writes`` (a write at the end of the turn). A nats-server of its
own; each mode runs in a fresh process, alternating, so a busy machine slows both alike.

    .venv/bin/python bench/nats_writes.py [--n 20000] [--pairs 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "libs"), str(ROOT / "services")]

import nats  # noqa: E402
import uvloop  # noqa: E402

from treadle.ops.servers import NatsServer  # noqa: E402
from treadle.runtime import nats_writes  # noqa: E402


async def one(url: str, mode: str, n: int) -> float:
    """µs of this process's CPU per message published (one per loop turn) and delivered back to it."""
    if mode == "turn-end":
        nats_writes.install()
    nc = await nats.connect(url)
    done, seen = asyncio.Event(), 0

    async def count(_msg) -> None:
        nonlocal seen
        seen += 1
        if seen == n:
            done.set()

    await nc.subscribe("bench.writes", cb=count)
    await nc.flush()
    started = time.process_time()
    for _ in range(n):
        await nc.publish("bench.writes", b"x" * 64)
        await asyncio.sleep(0)
    await done.wait()
    spent = time.process_time() - started
    await nc.close()
    return spent / n * 1e6


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats")
        await server.start()
        try:
            results: dict[str, list[float]] = {"flusher": [], "turn-end": []}
            for _ in range(args.pairs):
                for mode in results:
                    out = subprocess.run(
                        [sys.executable, __file__, "--one", mode, "--url", server.url, "--n", str(args.n)],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    results[mode].append(float(out.stdout))
            for mode, values in results.items():
                print(f"{mode:9} {statistics.median(values):6.1f} µs per message (runs: {sorted(values)})")
        finally:
            await server.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--one", choices=["flusher", "turn-end"], help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(f"{uvloop.run(one(a.url, a.one, a.n)):.2f}")
    else:
        uvloop.run(main(a))
