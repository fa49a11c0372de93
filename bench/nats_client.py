"""Client CPU per message of a worker at low load, which writes and receives one message per loop turn:
nats-py as it is ("stock") against the connection ``runtime.worker.connect`` makes ("treadle": writes at the end
of the turn and replies taken by the read loop, ``eventlog/nats_patches.py``).

- ``publish``: publish one message per turn to a subject this client subscribes to (a plain callback in both
  modes), until all came back: the cost of writing.
- ``request``: ``request`` round trips to a responder in another process (stock nats-py): writing the request
  and taking the reply.

A nats-server of its own; each mode runs in a fresh process, alternating, so a busy machine slows both alike.

    .venv/bin/python bench/nats_client.py [--n 20000] [--pairs 4]
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

from treadle.eventlog import nats_patches  # noqa: E402
from treadle.ops.servers import NatsServer  # noqa: E402

MODES = ("stock", "treadle")


async def publishes(nc, n: int) -> None:
    done, seen = asyncio.Event(), 0

    async def count(_msg) -> None:
        nonlocal seen
        seen += 1
        if seen == n:
            done.set()

    await nc.subscribe("bench.writes", cb=count)
    await nc.flush()
    for _ in range(n):
        await nc.publish("bench.writes", b"x" * 64)
        await asyncio.sleep(0)
    await done.wait()


async def requests(nc, n: int) -> None:
    for _ in range(n):
        await nc.request("bench.ask", b"x" * 64, timeout=5)


async def one(url: str, mode: str, kind: str, n: int) -> float:
    """µs of this process's CPU per message (``kind``: publishes or requests)."""
    if mode == "treadle":
        nats_patches.install()
    nc = await nats.connect(url)
    started = time.process_time()
    await (publishes if kind == "publish" else requests)(nc, n)
    spent = time.process_time() - started
    await nc.close()
    return spent / n * 1e6


async def respond(url: str) -> None:
    nc = await nats.connect(url)

    async def answer(msg) -> None:
        await msg.respond(b"ok")

    await nc.subscribe("bench.ask", cb=answer)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.get_running_loop().create_future()


def measure(url: str, mode: str, kind: str, n: int) -> float:
    argv = [sys.executable, __file__, "--one", mode, "--kind", kind, "--url", url, "--n", str(n)]
    return float(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats")
        await server.start()
        responder = subprocess.Popen(
            [sys.executable, __file__, "--respond", "--url", server.url], stdout=subprocess.PIPE, text=True
        )
        try:
            assert responder.stdout is not None and responder.stdout.readline().strip() == "ready"
            for kind in ("publish", "request"):
                results: dict[str, list[float]] = {mode: [] for mode in MODES}
                for _ in range(args.pairs):
                    for mode in MODES:
                        results[mode].append(await asyncio.to_thread(measure, server.url, mode, kind, args.n))
                for mode, values in results.items():
                    print(f"{kind:8} {mode:8} {statistics.median(values):6.1f} µs per message {sorted(values)}")
        finally:
            responder.kill()
            await server.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--kind", choices=["publish", "request"], help=argparse.SUPPRESS)
    p.add_argument("--respond", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.respond:
        uvloop.run(respond(a.url))
    elif a.one:
        print(f"{uvloop.run(one(a.url, a.one, a.kind, a.n)):.2f}")
    else:
        uvloop.run(main(a))
