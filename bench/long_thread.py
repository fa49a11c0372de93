"""Scenario F: one thread, many runs back to back. Whatever the stack does per event that grows with the
thread's length (a fold that scans, a projection that rewrites or re-reads the whole document) shows up as
CPU per run that climbs from the first hundred runs to the last hundred (the target: within 10%)."""

from __future__ import annotations

import collections
import time

from client import ThreadClient, create_threads, open_threads
from harness import TENANT, Env, log
from scenarios import ms, pct, r2, wait_projected

WINDOW = 100


async def _read_ms(c: ThreadClient, paths: list[str], reps: int = 5) -> dict[str, float | None]:
    """Median latency of public reads of the long thread: its whole document (which costs its length), then reads
    that fetch only their parts: a run, the queue, the lineage, a diff, the one-item page that the waits of the
    SDKs and the CLI read the thread's sequence from, and the last 200 runs (the console's read)."""
    out: dict[str, float | None] = {}
    for path in paths:
        lat = []
        for _ in range(reps):
            t0 = time.perf_counter()
            r = await c.http.get(path)
            lat.append(time.perf_counter() - t0)
            if r.status_code != 200:
                c.errors[f"read_http_{r.status_code}"] += 1
        route, query = path.split("?") if "?" in path else (path, "")
        name = "/".join(p if not p.startswith(("thr_", "run_")) else "{id}" for p in route.split("/"))
        out[name + (f"?{query}" if query else "")] = ms(pct(lat, 0.5))
    return out


async def long_thread(env: Env, runs: int) -> dict:
    log(f"scenario F: one thread, {runs} runs")
    errors: collections.Counter[str] = collections.Counter()
    [tid] = await create_threads(env.http, 1, errors)
    [c] = await open_threads(env.http, [tid], errors)
    text = "please summarise the benchmark plan in one short paragraph"
    windows: list[dict] = []
    reads: dict[str, dict] = {}
    last_run = ""
    t_start = time.perf_counter()
    done = 0
    while done < runs:
        n = min(WINDOW, runs - done)
        cpu0, t0 = env.procs.cpu(), time.perf_counter()
        lat = []
        for _ in range(n):
            o = await c.run_once(text)
            if o is not None and o.end is not None:
                lat.append(o.end - o.t0)
                last_run = o.run_id
        await wait_projected(env.redis, [c])
        cpu1, dt = env.procs.cpu(), time.perf_counter() - t0
        server = sum(cpu1[k] - cpu0[k] for k in cpu0 if k != "bench-client")
        per_proc = {k: r2((cpu1[k] - cpu0[k]) / n * 1000) for k in cpu0 if k != "bench-client"}
        windows.append(
            {
                "runs": f"{done + 1}-{done + n}",
                "server_ms_per_run": r2(server / n * 1000),
                "per_process_ms_per_run": per_proc,
                "p50_ms": ms(pct(lat, 0.5)),
                "runs_per_s": r2(n / dt, 1),
            }
        )
        done += n
        if done == WINDOW or done == runs:
            paths = [f"/v1/threads/{tid}", f"/v1/runs/{last_run}", f"/v1/threads/{tid}/queue"]
            paths += [f"/v1/threads/{tid}/lineage", f"/v1/runs/{last_run}/diff", f"/v1/threads/{tid}/runs?limit=1"]
            paths += [f"/v1/threads/{tid}?runs=200"]  # what the console reads on each event
            reads[str(done)] = await _read_ms(c, paths)
        if done % 1000 == 0 or done == runs:
            w = windows[-1]
            log(f"scenario F: {done} runs, last window {w['server_ms_per_run']} ms/run, p50 {w['p50_ms']} ms")
    elapsed = time.perf_counter() - t_start
    doc_key = f"treadle:{{{TENANT}}}:thread:{tid}"
    doc_bytes = await env.redis.memory_usage(doc_key, samples=0)
    await c.close()
    first, last = windows[0]["server_ms_per_run"], windows[-1]["server_ms_per_run"]
    out = {
        "runs": runs,
        "seconds": round(elapsed, 1),
        "first_100_ms_per_run": first,
        "last_100_ms_per_run": last,
        "last_over_first": r2(last / first if first and last else None, 3),
        "windows": windows,
        "reads_ms": reads,
        "thread_doc_memory_usage_bytes": doc_bytes,
        "errors": dict(errors),
    }
    log(f"scenario F: first 100 runs {first} ms/run, last 100 {last} ms/run ({out['last_over_first']}×)")
    return out
