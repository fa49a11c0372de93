"""Scenarios A and B: scripted one-reply runs over HTTP from N threads, and what they cost (see run.py)."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

from client import RunObs, ThreadClient, create_threads, open_threads
from harness import TENANT, Env, log
from redis.asyncio import Redis
from sampling import Procs, RssSampler, scrape_metrics

from treadle.eventlog import subjects


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def r2(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


async def stream_messages(js, name: str) -> int:
    return (await js.stream_info(name)).state.messages


async def wait_projected(redis: Redis, threads: list[ThreadClient], timeout: float = 20.0) -> float | None:
    """Seconds until every thread's Redis document reflects the last event seen on its SSE stream."""
    t0 = time.perf_counter()
    pending = list(threads)
    while pending:
        async with redis.pipeline(transaction=False) as pipe:
            for c in pending:
                pipe.hget(f"treadle:{{{TENANT}}}:thread:{c.id}", "seq")
            seqs = await pipe.execute()
        pending = [c for c, s in zip(pending, seqs) if s is None or int(s) < c.last_seq]
        if not pending:
            break
        if time.perf_counter() - t0 > timeout:
            return None
        await asyncio.sleep(0.02)  # polling the projection
    return time.perf_counter() - t0


def metrics_delta(before: dict[str, float], after: dict[str, float], runs: int) -> dict:
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    delta = {k: v for k, v in delta.items() if v}
    conflicts = sum(v for k, v in delta.items() if k.startswith("treadle_append_conflicts_total"))
    retries = sum(v for k, v in delta.items() if k.startswith("treadle_handler_retries_total"))
    dead = sum(v for k, v in delta.items() if k.startswith("treadle_dead_letters_total"))
    ck_n = delta.get("treadle_checkpoint_capture_seconds_count", 0.0)
    ck_s = delta.get("treadle_checkpoint_capture_seconds_sum", 0.0)
    return {
        "append_conflicts_per_run": r2(conflicts / runs if runs else None, 3),
        "handler_retries": int(retries),
        "dead_letters": int(dead),
        "checkpoint_capture_mean_ms": r2(ck_s / ck_n * 1000 if ck_n else None),
        "raw": {k: round(v, 4) for k, v in sorted(delta.items())},
    }


async def run_scenario(
    env: Env,
    name: str,
    n_threads: int,
    seconds: float,
    workspaces: list[str] | None = None,
    script: Callable[[int], dict] | None = None,
) -> dict:
    """``workspaces``: each thread's workspace; ``script(i)``: the script of a thread's i-th run (scenario D)."""
    log(f"scenario {name}: {n_threads} thread(s), {seconds:g}s")
    errors: collections.Counter[str] = collections.Counter()
    mem0 = (await env.redis.info("memory"))["used_memory"]
    keys0 = await env.redis.dbsize()
    ids = await create_threads(env.http, n_threads, errors, workspaces)
    clients = await open_threads(env.http, ids, errors)
    if script is not None:  # D: the first capture of a workspace commits all of it; not what a run costs after
        await asyncio.gather(*(c.run_once("first capture", script(0)) for c in clients))
    await asyncio.sleep(0.3)  # let the thread creations settle in the projector before the CPU window
    for c in clients:
        c.durable = 0
        c.unattributed = 0
    ev0 = await stream_messages(env.js, subjects.EVENTS_STREAM)
    pv0 = await stream_messages(env.js, subjects.PROVIDER_STREAM)
    met0 = await scrape_metrics(env.stack)
    cpu0, busy0 = env.procs.cpu(), Procs.machine_busy()
    results: list[RunObs] = []
    text = "please summarise the benchmark plan in one short paragraph"

    async def loop(c: ThreadClient, deadline: float) -> None:
        i = 0
        while time.perf_counter() < deadline:
            i += 1
            o = await c.run_once(text, script(i) if script else None)
            if o is not None and o.status == "run.completed":
                results.append(o)

    with RssSampler(env.procs) as rss:
        t_start = time.perf_counter()
        deadline = t_start + seconds
        await asyncio.gather(*(loop(c, deadline) for c in clients))
        elapsed = time.perf_counter() - t_start
        settle = await wait_projected(env.redis, clients)
        cpu1, busy1 = env.procs.cpu(), Procs.machine_busy()
    met1 = await scrape_metrics(env.stack)
    ev1 = await stream_messages(env.js, subjects.EVENTS_STREAM)
    pv1 = await stream_messages(env.js, subjects.PROVIDER_STREAM)
    mem1 = (await env.redis.info("memory"))["used_memory"]
    keys1 = await env.redis.dbsize()
    doc_key = f"treadle:{{{TENANT}}}:thread:{clients[0].id}"
    doc_usage = await env.redis.memory_usage(doc_key, samples=0)
    doc_len = await env.redis.hstrlen(doc_key, "doc")
    sse_durable = sum(c.durable for c in clients)
    unattributed = sum(c.unattributed for c in clients)
    for c in clients:
        await c.close()

    n = len(results)
    lat = [o.end - o.t0 for o in results if o.end is not None]  # results holds ended runs only
    post = [o.accepted - o.t0 for o in results if o.accepted]
    first = [o.first_delta - o.t0 for o in results if o.first_delta is not None]
    marks: dict[str, list[float]] = collections.defaultdict(list)
    for o in results:
        for k, t in o.marks.items():
            marks[k].append(t - o.t0)
    cpu = {k: cpu1[k] - cpu0[k] for k in cpu0}
    server_cpu = sum(v for k, v in cpu.items() if k != "bench-client")

    def per_run(v: float) -> float | None:
        return v / n * 1000 if n else None

    out: dict[str, Any] = {
        "threads": n_threads,
        "seconds": round(elapsed, 2),
        "completed_runs": n,
        "runs_per_s": r2(n / elapsed if elapsed else None, 1),
        "latency_ms": {
            "p50": ms(pct(lat, 0.5)),
            "p90": ms(pct(lat, 0.9)),
            "p99": ms(pct(lat, 0.99)),
            "max": ms(max(lat) if lat else None),
            "mean": ms(sum(lat) / n if n else None),
        },
        "first_delta_ms": {"p50": ms(pct(first, 0.5)), "p99": ms(pct(first, 0.99)), "runs_with_delta": len(first)},
        "post_202_ms": {"p50": ms(pct(post, 0.5)), "p99": ms(pct(post, 0.99))},
        "event_seen_p50_ms": {
            k: ms(pct(v, 0.5)) for k, v in sorted(marks.items(), key=lambda kv: pct(kv[1], 0.5) or 0.0)
        },
        "event_seen_runs": {k: len(v) for k, v in marks.items()},  # events that only some runs have (first run)
        "durable_events_per_run": {
            "sse": r2(sse_durable / n if n else None),
            "events_stream": r2((ev1 - ev0) / n if n else None),
            "provider_stream": r2((pv1 - pv0) / n if n else None),
            "sse_unattributed": unattributed,
        },
        "cpu": {
            "server_seconds": round(server_cpu, 3),
            "server_ms_per_run": r2(per_run(server_cpu)),
            "server_cores_busy": r2(server_cpu / (elapsed + (settle or 0)) if elapsed else None),
            "per_process_ms_per_run": {k: r2(per_run(v)) for k, v in cpu.items() if k != "bench-client"},
            "bench_client_ms_per_run": r2(per_run(cpu["bench-client"])),
            "window_s": round(elapsed + (settle or 0), 2),
            # busy cores outside the stack and this client (other jobs on the machine): the numbers are
            # only comparable between runs where this stays near 0
            "other_load_cores": r2(((busy1 - busy0) - sum(cpu.values())) / (elapsed + (settle or 0))),
        },
        "peak_rss_mb": {k: round(v / 2**20, 1) for k, v in rss.peak.items()},
        "rss_start_mb": {k: round(v / 2**20, 1) for k, v in rss.start.items()},
        "rss_samples": rss.samples,
        "redis": {
            "used_memory_delta_bytes": mem1 - mem0,
            "bytes_per_thread": (mem1 - mem0) // n_threads,
            "keys_added": keys1 - keys0,
            "thread_doc_memory_usage_bytes": doc_usage,
            "thread_doc_json_bytes": doc_len,
        },
        "projection_catch_up_s": r2(settle, 3),
        "worker_metrics": metrics_delta(met0, met1, len(results)),
        "errors": dict(errors),
        "error_count": sum(errors.values()),
    }
    out["redis"]["runs_in_that_thread"] = round(n / n_threads, 1)  # runs are spread evenly over the threads
    log(
        f"scenario {name}: {n} runs in {elapsed:.1f}s = {out['runs_per_s']} runs/s, p50 {out['latency_ms']['p50']} ms, "
        f"cpu {out['cpu']['server_ms_per_run']} ms/run, errors {out['error_count']}"
    )
    return out


async def warm_up(env: Env) -> dict:
    log("warming up")
    errors: collections.Counter[str] = collections.Counter()
    ids = await create_threads(env.http, 8, errors)
    clients = await open_threads(env.http, ids, errors)

    async def runs(c: ThreadClient, k: int) -> None:
        for _ in range(k):
            await c.run_once("warm up")

    await asyncio.gather(*(runs(c, 5) for c in clients))
    await runs(clients[0], 10)
    await wait_projected(env.redis, clients)
    for c in clients:
        await c.close()
    # idle baseline: what the stack burns doing nothing (heartbeats, fetch long-polls)
    await asyncio.sleep(0.5)  # let the last work finish before measuring idle
    cpu0, t0 = env.procs.cpu(), time.perf_counter()
    await asyncio.sleep(2.0)  # idle measurement window
    cpu1, dt = env.procs.cpu(), time.perf_counter() - t0
    idle = sum(cpu1[k] - cpu0[k] for k in cpu0 if k != "bench-client") / dt * 1000
    return {"errors": dict(errors), "idle_server_cpu_ms_per_s": round(idle, 1)}
