"""Client CPU per delivered message through ``runtime/consumer.py::PullConsumer`` (not run by make; issue 24).

    scripts/loopback-only.sh .venv/bin/python bench/consumer_cost.py [--n 30000] [--threads 50] [--rounds 3]
                                                  [--paced 2000] [--profile]

A nats-server of its own (free port, temp dir). ``--n`` events with the headers and payload shape of an
appended event are stored on partition-style subjects (``bench.evt.<tenant>.<thread>.<type>.<partition>``,
``--threads`` threads); then a PullConsumer with Mailboxes and a trivial handler consumes and acks them all.
Printed: process CPU (``time.process_time``) and wall per message, per round, and their medians.

Stored first (the default), deliveries come in batches of up to 256 and their acks share socket writes.
``--paced R`` stores them while the consumer runs instead, R per second from a publisher in another process
(its CPU is not counted): deliveries then arrive one at a time, as a partitioned worker sees them.
``--profile`` runs one round under cProfile and prints the top functions by own time. The consumer connects
as a worker does (``runtime/worker.py::connect``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/profile.py would shadow the standard library's `profile`, which cProfile imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import cProfile  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

import msgspec  # noqa: E402
import nats  # noqa: E402
import uvloop  # noqa: E402
from nats.js.api import StreamConfig  # noqa: E402

from treadle.ops.servers import NatsServer  # noqa: E402
from treadle.runtime.consumer import PullConsumer  # noqa: E402
from treadle.runtime.mailbox import Mailboxes  # noqa: E402
from treadle.runtime.worker import connect  # noqa: E402

STREAM = "BENCH_EVENTS"
PARTITION = 3


def subject(thread: int) -> str:
    return f"bench.evt.acme.th{thread:04d}.run.started.{PARTITION}"


def event(i: int, thread: int) -> tuple[bytes, dict[str, str]]:
    """The payload and headers of an appended event (eventlog/log.py: the fence, renamed so the broker does not
    enforce it, and the Msg-Id)."""
    payload = msgspec.json.encode(
        {
            "id": f"evt_{uuid.uuid4().hex}",
            "type": "run.started",
            "tenant": "acme",
            "thread": f"th{thread:04d}",
            "at": "2026-12-04T10:19:29.123Z",
            "data": {"run_id": f"run_{i:08d}", "attempt_id": f"att_{i:08d}", "provider": "scripted", "n": i},
        }
    )
    headers = {
        "Bench-Expected-Last-Subject-Sequence": str(i),
        "Bench-Expected-Last-Subject-Sequence-Subject": f"bench.evt.acme.th{thread:04d}.>",
        "Nats-Msg-Id": f"evt_{uuid.uuid4().hex}",
    }
    return payload, headers


async def publish(url: str, n: int, threads: int, first: int, rate: float) -> None:
    """Store ``n`` events (``rate`` per second, 0: as fast as the broker takes them)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    started = time.perf_counter()
    pending = []
    for i in range(first, first + n):
        payload, headers = event(i, i % threads)
        pending.append(await js.publish_async(subject(i % threads), payload, headers=headers))
        if rate:
            await js.publish_async_completed()
            ahead = (i - first + 1) / rate - (time.perf_counter() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)  # pacing the publisher, not synchronisation
        elif len(pending) >= 512:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    await js.publish_async_completed()
    await nc.close()


async def consume(url: str, n: int, durable: str, profile: cProfile.Profile | None, publisher: list[str] | None):
    nc = await connect(url, "bench-consumer")  # as a worker connects
    js = nc.jetstream()
    done = asyncio.Event()
    count = 0

    async def handle(msg) -> None:
        nonlocal count
        count += 1
        if count >= n:
            done.set()

    consumer = PullConsumer(
        js,
        stream=STREAM,
        durable=durable,
        filters=[f"bench.evt.*.*.*.*.{PARTITION}"],
        handle=handle,
        mailboxes=Mailboxes(),
    )
    proc = subprocess.Popen(publisher) if publisher else None
    if profile is not None:
        profile.enable()
    cpu, wall = time.process_time(), time.perf_counter()
    await consumer.start()
    await asyncio.wait_for(done.wait(), 600)
    await nc.flush()  # the last acks are on the wire
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if profile is not None:
        profile.disable()
    if proc is not None:
        proc.wait()
    await consumer.stop()
    info = await js.consumer_info(STREAM, durable)
    await nc.close()
    assert info.num_ack_pending == 0 and info.num_pending == 0, info  # every delivery was acked
    return cpu, wall


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="consume-bench-") as tmp:
        server = NatsServer(Path(tmp) / "nats")
        await server.start()
        try:
            nc = await nats.connect(server.url)
            await nc.jetstream().add_stream(StreamConfig(name=STREAM, subjects=["bench.evt.>"]))
            await nc.close()
            results = []
            for round_ in range(args.rounds + (1 if args.profile else 0)):
                profile = cProfile.Profile() if args.profile and round_ == args.rounds else None
                first = round_ * args.n
                nc = await nats.connect(server.url)
                await nc.jetstream().purge_stream(STREAM)  # a fresh durable per round sees only this round's
                await nc.close()
                if args.paced:
                    argv = [
                        sys.executable,
                        __file__,
                        "--publisher",
                        server.url,
                        "--n",
                        str(args.n),
                        "--threads",
                        str(args.threads),
                        "--first",
                        str(first),
                        "--paced",
                        str(args.paced),
                    ]
                    cpu, wall = await consume(server.url, args.n, f"r{round_}", profile, argv)
                else:
                    await publish(server.url, args.n, args.threads, first, 0)
                    cpu, wall = await consume(server.url, args.n, f"r{round_}", profile, None)
                if profile is None:
                    results.append((cpu, wall))
                    print(
                        f"round {round_}: {cpu / args.n * 1e6:6.1f} µs CPU/msg, {wall / args.n * 1e6:6.1f} µs wall/msg"
                    )
                else:
                    pstats.Stats(profile).sort_stats("tottime").print_stats(35)
            if results:
                cpus = [c / args.n * 1e6 for c, _ in results]
                print(
                    f"median {statistics.median(cpus):.1f} µs CPU/msg (range {min(cpus):.1f}–{max(cpus):.1f}), "
                    f"n={args.n}, threads={args.threads}, paced={args.paced or 'no'}, load {os.getloadavg()[0]:.2f}"
                )
        finally:
            await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30000)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paced", type=float, default=0, help="store this many per second while consuming")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--publisher", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publisher:
        uvloop.run(publish(args.publisher, args.n, args.threads, args.first, args.paced))
    else:
        uvloop.run(main(args))
