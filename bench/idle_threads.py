"""Scenario E: many threads with one run each, then idle. What the stack keeps per thread once nothing
happens: RSS of every process (target ≤ 150 MB each) and Redis bytes per idle thread (≤ 20 KB)."""

from __future__ import annotations

import asyncio
import collections
import time

from client import create_threads, open_threads
from harness import Env, log
from scenarios import r2

BATCH = 50  # threads run at once (each with its own SSE stream, closed after its run)


async def idle_threads(env: Env, n: int, idle_s: float = 5.0) -> dict:
    log(f"scenario E: {n} threads, one run each, then {idle_s:g}s idle")
    errors: collections.Counter[str] = collections.Counter()
    mem0 = (await env.redis.info("memory"))["used_memory"]
    rss0 = env.procs.rss()
    t0 = time.perf_counter()
    cpu0 = env.procs.cpu()
    completed = 0
    for start in range(0, n, BATCH):
        ids = await create_threads(env.http, min(BATCH, n - start), errors)
        clients = await open_threads(env.http, ids, errors)
        obs = await asyncio.gather(*(c.run_once("one run, then idle") for c in clients))
        completed += sum(1 for o in obs if o is not None and o.status == "run.completed")
        await asyncio.gather(*(c.close() for c in clients))
    elapsed = time.perf_counter() - t0
    cpu1 = env.procs.cpu()
    await asyncio.sleep(idle_s)  # idle: what stays resident
    mem1 = (await env.redis.info("memory"))["used_memory"]
    rss1 = env.procs.rss()
    server_cpu = sum(cpu1[k] - cpu0[k] for k in cpu0 if k != "bench-client")
    out = {
        "threads": n,
        "completed_runs": completed,
        "seconds": round(elapsed, 1),
        "server_ms_per_thread": r2(server_cpu / n * 1000),
        "rss_mb": {k: round(v / 2**20, 1) for k, v in rss1.items()},
        "rss_growth_mb": {k: round((v - rss0.get(k, 0)) / 2**20, 1) for k, v in rss1.items()},
        "max_worker_rss_mb": round(
            max(v for k, v in rss1.items() if k not in ("nats-server", "redis-server")) / 2**20, 1
        ),
        "redis_bytes_per_idle_thread": (mem1 - mem0) // n,
        "errors": dict(errors),
    }
    log(
        f"scenario E: {completed}/{n} runs, max worker RSS {out['max_worker_rss_mb']} MB, "
        f"Redis {out['redis_bytes_per_idle_thread']} B/thread"
    )
    return out
