"""Projector CPU per event when a partition sees scenario B's load: batches of one or two events, each folded
and written on its own (``Projector._project``: fold, one Redis write, notices). No HTTP, no other workers:
a throwaway nats-server and redis-server; ``--threads`` threads of ``--runs`` runs of 4 events each are
appended first, read back, then projected ``--batch`` at a time (the first run of every thread warms the
cache and is not counted). Printed: process CPU (``time.process_time``) and wall per event, per round.
Compare a change with its base by alternating the two (CPU per event moves with other load on the machine).

    .venv/bin/python bench/projector_batches.py [--threads 30] [--runs 10] [--batch 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from treadle.core import events as ev
from treadle.eventlog import streams, subjects
from treadle.eventlog.log import EventLog
from treadle.ops.servers import NatsServer, RedisServer
from treadle.projections.connect import redis_client
from treadle.projector.service import Projector
from treadle.runtime.settings import ProjectorSettings

TENANT = "bench"
T0 = datetime(2026, 12, 2, tzinfo=UTC)
_ids = itertools.count()


def _envelope(thread: str, data: ev.Payload, second: int) -> ev.Envelope:
    return ev.Envelope(
        id=f"evt_{next(_ids)}",
        type=data.TYPE,
        tenant=TENANT,
        thread=thread,
        at=T0 + timedelta(seconds=second),
        command_id="cmd_bench",
        actor="bench",
        data=data,
    )


def _run(r: int) -> list[ev.Payload]:
    """A scripted one-reply run's events on the thread stream: queued, dispatched, the reply, completed."""
    run, att, node = f"run_{r}", f"att_{r}", f"node_{r}"
    return [
        ev.RunQueued(
            run_id=run,
            ordinal=r,
            message_id=f"msg_{r}",
            text="hello there",
            root_node_id=node,
            attempt_id=att,
            mode="auto",
            disposition="queued",
            provider="scripted",
        ),
        ev.RunDispatched(run_id=run),
        ev.MessageCompleted(message_id=f"rep_{r}", run_id=run, attempt_id=att, node_id=node, text="a reply " * 8),
        ev.RunCompleted(run_id=run, attempt_id=att),
    ]


async def _append(log: EventLog, threads: list[str], runs: int) -> None:
    seqs = {}
    for t in threads:
        created = ev.ThreadCreated(thread_id=t, workspace="w", created_by="u")
        seqs[t] = await log.append(TENANT, t, 0, [_envelope(t, created, 0)])
    for r in range(1, runs + 1):
        for t in threads:
            for i, payload in enumerate(_run(r)):  # one append each, as the workers append them
                seqs[t] = await log.append(TENANT, t, seqs[t], [_envelope(t, payload, r * 10 + i)])


async def _read_all(nc: NATS, count: int) -> list[Msg]:
    js = nc.jetstream()
    sub = await js.pull_subscribe(
        subjects.EVENTS_ALL, stream=subjects.EVENTS_STREAM, config=ConsumerConfig(ack_policy=AckPolicy.NONE)
    )
    msgs: list[Msg] = []
    while len(msgs) < count:
        msgs += await sub.fetch(min(1000, count - len(msgs)), timeout=5)
    await sub.unsubscribe()
    return msgs


async def one_round(threads: int, runs: int, batch: int) -> tuple[int, float, float]:
    tmp = Path(tempfile.mkdtemp(prefix="treadle-projector-batches-"))
    broker, redis_server = NatsServer(tmp / "nats", auth=False), RedisServer(tmp / "redis")
    await broker.start()
    await redis_server.start()
    try:
        nc = await nats.connect(broker.url)
        await streams.ensure(nc.jetstream())
        names = [f"thr_{i}" for i in range(threads)]
        await _append(EventLog(nc), names, runs)
        msgs = await _read_all(nc, threads * (1 + 4 * runs))
        redis = redis_client(redis_server.url)
        projector = Projector(nc, redis, ProjectorSettings())
        warm = threads * 5  # every thread's creation and first run: folded from the log, written whole
        for i in range(0, warm, batch):
            await projector._project(0, msgs[i : i + batch])
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(warm, len(msgs), batch):
            await projector._project(0, msgs[i : i + batch])
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        await redis.aclose()
        await nc.close()
        return len(msgs) - warm, cpu, wall
    finally:
        await redis_server.stop()
        await broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def main(args: argparse.Namespace) -> None:
    for r in range(args.rounds):
        n, cpu, wall = await one_round(args.threads, args.runs, args.batch)
        print(
            f"round {r + 1}: {n} events, batches of {args.batch}: {cpu / n * 1e6:.1f} us CPU/event, "
            f"{wall / n * 1e6:.1f} us wall/event"
        )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=30)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(p.parse_args()))
