"""What reads consistent with the stream cost (issue 36, finding 7). Every read of a thread first asks JetStream
for the thread's last sequence (one direct get of the last message on ``treadle.evt.<tenant>.<thread>.>``) and
waits, woken by the projector's notice, until the projection has it.

1. ``rest``: p50/p99 of plain HTTP reads (a run, a one-item runs page, the thread) of a thread at rest, through
   the embedded stack's gateway, one at a time.
2. ``after``: a plain read of the run right after its terminal SSE event, and how often it showed the run not
   ended yet (the finding: 3-7 in 40 before).
3. ``direct``: the direct get alone, against a throwaway nats-server whose TREADLE_EVENTS holds ``--events``
   events over ``--threads`` threads: the last of the newest thread and of the oldest (nats-server walks the
   stream back for a wildcard last-by-subject).

Run it on the tree before the change too (``PYTHONPATH=<old tree>/libs:<old tree>/services``) for 1 and 2.

    .venv/bin/python bench/fresh_reads.py [--reads 400] [--runs 40] [--events 300000] [--threads 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats

from treadle.cli.stack import Stack
from treadle.client import TreadleClient
from treadle.eventlog import streams, subjects
from treadle.eventlog.log import EventLog
from treadle.ops.servers import NatsServer, RedisServer
from treadle.ops.tokens import TokenStore
from treadle.projections.connect import redis_client
from treadle.projections.store import ProjectionStore, keys

TENANT = "bench"
TERMINAL = {"run.completed", "run.failed", "run.interrupted", "run.cancelled"}
# A thread's events spread over many subjects (one per type), as the log stores them
TYPES = [f"{noun}.{verb}" for noun in ("run", "message", "node", "tool", "checkpoint") for verb in ("a", "b", "c", "d")]


def _quantiles(ms: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(ms, n=100)
    return {"p50": round(cuts[49], 2), "p99": round(cuts[98], 2), "n": len(ms)}


async def _timed(repeat: int, read: Callable[[], Awaitable[object]]) -> dict[str, float]:
    await read()  # warm: connection open
    ms = []
    for _ in range(repeat):
        started = time.perf_counter()
        await read()
        ms.append((time.perf_counter() - started) * 1000)
    return _quantiles(ms)


async def _terminal(client: TreadleClient, thread: str, run_id: str, after: int) -> None:
    async with contextlib.aclosing(client.events(thread, after)) as events:
        async for event in events:
            if event.event in TERMINAL and event.json()["data"]["run_id"] == run_id:
                return


async def stack_reads(reads: int, runs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        async with Stack(Path(tmp) / "state", on_output=lambda *_: None) as stack:
            nc = await nats.connect(stack.nats_url)
            token = await TokenStore(nc.jetstream()).create(TENANT, "bench")
            async with TreadleClient(stack.api_url, token, timeout=30) as client:
                thread = (await client.create_thread())["thread_id"]
                ms, stale = [], 0
                last_run = ""
                for i in range(runs):
                    script = {"steps": [{"type": "text", "text": f"done {i}", "chunk": 50, "delay_ms": 0}]}
                    sent = await client.send(thread, f"round {i}", script=script)
                    await _terminal(client, thread, sent["run_id"], sent["seq"])
                    started = time.perf_counter()
                    run = (await client.request("GET", f"/v1/runs/{sent['run_id']}")).json()  # no min_seq
                    ms.append((time.perf_counter() - started) * 1000)
                    stale += run["status"] != "completed"
                    last_run = sent["run_id"]
                after = {**_quantiles(ms), "stale": stale}

                async def get(path: str, **params: object) -> None:
                    r = await client.request("GET", path, params=params)
                    assert r.status_code == 200, r.text

                rest = {
                    "run": await _timed(reads, lambda: get(f"/v1/runs/{last_run}")),
                    "runs_page": await _timed(reads, lambda: get(f"/v1/threads/{thread}/runs", limit=1)),
                    "thread": await _timed(reads, lambda: get(f"/v1/threads/{thread}")),
                }
            await nc.close()
    return {"rest": rest, "after": after}


async def direct_gets(events: int, threads: int, repeat: int) -> dict:
    from treadle.projections import notices  # this change's: part 3 runs on the tree after it only

    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(Path(tmp) / "nats") as server, RedisServer(Path(tmp) / "redis") as redis_server:
            nc = await nats.connect(server.url)
            await streams.ensure(nc.jetstream())
            payload = b"x" * 400  # about an event's size
            for i in range(events):  # thread 0 first, the newest thread last; each thread's events together
                subject = f"treadle.evt.{TENANT}.thr_{i * threads // events}.{TYPES[i % len(TYPES)]}"
                await nc.publish(subject, payload)
                if i % 1000 == 0:
                    await nc.flush()
            await nc.flush()
            js = nc.jetstream()
            while (stored := (await js.stream_info(subjects.EVENTS_STREAM)).state.messages) < events:
                print(f"stored {stored} of {events}", file=sys.stderr)  # core publishes are stored a moment later
                await asyncio.sleep(0.5)
            log = EventLog(nc)
            newest, oldest = f"thr_{threads - 1}", "thr_0"
            assert await log.last_seq(TENANT, newest) == events
            store = ProjectionStore(redis_client(redis_server.url))
            await redis_client(redis_server.url).hset(keys(TENANT, oldest)[0], "seq", events)  # as if projected

            async def fresh_read_check() -> None:  # what a read of a projected thread adds now: both looks
                target = await log.last_seq(TENANT, oldest)
                assert await notices.reached(nc, store, TENANT, oldest, target, 2.0)

            result = {
                "newest_thread": await _timed(repeat, lambda: log.last_seq(TENANT, newest)),
                "oldest_thread": await _timed(repeat, lambda: log.last_seq(TENANT, oldest)),
                "no_such_thread": await _timed(repeat, lambda: log.last_seq(TENANT, "thr_none")),
                "redis_seq_alone": await _timed(repeat, lambda: store.seq(TENANT, oldest)),
                "direct_get_and_redis_seq": await _timed(repeat, fresh_read_check),
            }
            await nc.close()
    return result


async def main(args: argparse.Namespace) -> None:
    result: dict = {}
    if "stack" in args.only:
        result.update(await stack_reads(args.reads, args.runs))
    if "direct" in args.only:
        result["direct"] = await direct_gets(args.events, args.threads, args.reads)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reads", type=int, default=400, help="reads per route (default 400)")
    p.add_argument("--runs", type=int, default=40, help="runs read right after their terminal event (default 40)")
    p.add_argument("--events", type=int, default=300_000, help="events in the direct-get stream (default 300000)")
    p.add_argument("--threads", type=int, default=3_000, help="threads they are spread over (default 3000)")
    p.add_argument("--only", default="stack,direct", help="parts to run (default stack,direct)")
    asyncio.run(main(p.parse_args()))
    sys.exit(0)
