"""End-to-end benchmark of a fresh embedded stack (``make bench``).

    .venv/bin/python bench/run.py [--seconds 15] [--threads 50] [--skip-raw]
                                  [--raw-events 20000] [--raw-batches 2000] [--only ABC] [--experiment …]

Starts nats-server, redis-server and the six workers (``treadle.cli.stack.Stack``) on free ports in a temp
dir, creates a token, warms up, then measures scripted one-reply runs over HTTP/1.1:

* A: one thread, runs back to back for ``--seconds``;
* B: ``--threads`` threads concurrently, each running back to back for ``--seconds``;
* C: raw JetStream appends against the same nats-server, to a scratch stream: ``EventLog.append`` from 50
  serial OCC "actors" (single events, then 3-event decisions as atomic batches), and ``js.publish_async``
  pipelined with a window of 256.

A run is "sent" right before ``POST /v1/threads/{id}/messages`` and "completed" when its ``run.completed``
arrives on the thread's SSE stream (one connection per thread, open for the whole scenario; events are
routed to waiters by run id). Each simulated thread has its own two-connection HTTP/1.1 pool (see
``ThreadClient``). CPU is user+system of every worker process, nats-server and redis-server, including their
children (git), before/after. The workers' own counters (OCC conflicts, retries, checkpoint time) are
scraped from their /metrics. The table and the JSON go to stdout; the JSON also goes to
``bench/results/latest.json`` (git-ignored). Exit status is 0 unless the stack failed (did not start, or a
worker crashed); Ctrl-C/SIGTERM stop everything that was started.

``--experiment no-batch,no-git-ref`` loads diagnostic what-if patches into the workers
(``bench/experiments/sitecustomize.py``) and writes ``bench/results/experiment-….json`` instead.
``bench/profile.py`` samples the workers (py-spy) and nats-server (perf) under the same load, or traces
every NATS message of a run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import platform
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import msgspec
import nats
import psutil
from redis.asyncio import Redis

from treadle.cli.stack import WORKERS, Stack
from treadle.domain.events import Envelope
from treadle.eventlog import log as eventlog_module
from treadle.eventlog import subjects
from treadle.eventlog.errors import Conflict
from treadle.eventlog.log import EventLog
from treadle.eventlog.streams import EVENTS
from treadle.runtime.tokens import TokenStore

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "latest.json"
TENANT = "bench"
TERMINAL = {b"run.completed", b"run.failed", b"run.interrupted", b"run.cancelled"}
RUN_TIMEOUT = 30.0
SCRATCH_STREAM = "TREADLE_BENCH_SCRATCH"
SCRATCH_PREFIX = "treadlebench"

PEER = {"name": "LangGraph Agent Server (langgraph dev, in-memory)", "runs_per_s_50_threads": 50.0,
        "p50_ms": 1000.0, "cpu_ms_per_run": "17-20"}
TARGETS = {"runs_per_s": 250.0, "p50_ms": 30.0, "cpu_ms_per_run": 4.0}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- worker output -------------------------------------------------------------------------------------


class Output:
    """Keeps the stack quiet: the last lines of every process, and counts of warnings and errors."""

    def __init__(self) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=300)
        self.warnings: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()

    def __call__(self, name: str, line: str) -> None:
        self.tail.append(f"{name} | {line}")
        if " WARNING " in line:
            self.warnings[name] += 1
        elif " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback"):
            self.errors[name] += 1

    def dump(self, lines: int = 60) -> None:
        for line in list(self.tail)[-lines:]:
            print(line, file=sys.stderr)


# --- process accounting --------------------------------------------------------------------------------


class Procs:
    """The stack's processes by name; CPU includes reaped children and live descendants (git)."""

    def __init__(self, stack: Stack) -> None:
        self.pids: dict[str, int] = {}
        for name in WORKERS:
            pid = stack.processes.pid(name)
            if pid is not None:
                self.pids[name] = pid
        if stack.nats is not None and stack.nats.pid:
            self.pids["nats-server"] = stack.nats.pid
        if stack.redis is not None and stack.redis.pid:
            self.pids["redis-server"] = stack.redis.pid
        self._procs = {name: psutil.Process(pid) for name, pid in self.pids.items()}
        self.me = psutil.Process()

    @staticmethod
    def _cpu(p: psutil.Process) -> float:
        try:
            t = p.cpu_times()
            total = t.user + t.system + t.children_user + t.children_system
            for child in p.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    c = child.cpu_times()
                    total += c.user + c.system
            return total
        except psutil.Error:
            return float("nan")

    def cpu(self) -> dict[str, float]:
        out = {name: self._cpu(p) for name, p in self._procs.items()}
        t = self.me.cpu_times()
        out["bench-client"] = t.user + t.system
        return out

    @staticmethod
    def machine_busy() -> float:
        """CPU seconds the whole machine has been busy (to spot other load sharing the cores)."""
        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)

    def rss(self) -> dict[str, int]:
        out = {}
        for name, p in self._procs.items():
            with contextlib.suppress(psutil.Error):
                out[name] = p.memory_info().rss
        return out


class RssSampler:
    def __init__(self, procs: Procs, interval: float = 0.2) -> None:
        self._procs = procs
        self._interval = interval
        self.peak: dict[str, int] = {}
        self.start: dict[str, int] = {}
        self.samples = 0
        self._task: asyncio.Task | None = None

    def _sample(self) -> None:
        for name, rss in self._procs.rss().items():
            self.start.setdefault(name, rss)
            if rss > self.peak.get(name, 0):
                self.peak[name] = rss
        self.samples += 1

    async def _loop(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(self._interval)  # sampling period

    def __enter__(self) -> "RssSampler":
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
        self._sample()


# --- the SSE client ------------------------------------------------------------------------------------


class _Delta(msgspec.Struct):
    run_id: str = ""


class _Data(msgspec.Struct):
    run_id: str | None = None


class _Env(msgspec.Struct):
    data: _Data = msgspec.field(default_factory=_Data)


_delta_decoder = msgspec.json.Decoder(_Delta)
_env_decoder = msgspec.json.Decoder(_Env)


@dataclass(slots=True, eq=False)
class RunObs:
    t0: float = 0.0
    accepted: float | None = None
    first_delta: float | None = None
    end: float | None = None
    status: str | None = None
    durable: int = 0
    marks: dict[str, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)


def http_client(base_url: str, token: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                             timeout=httpx.Timeout(10.0), limits=limits, http2=False)


OPEN: set["ThreadClient"] = set()  # closed in main's `finally`, also after an interrupt


class ThreadClient:
    """One simulated UI on one thread: its own HTTP/1.1 pool of two keep-alive connections (the SSE stream
    and the POSTs). A pool shared by all threads costs the client O(connections) per request in httpcore
    (idle/expiry checks poll every pooled socket), which made the client the bottleneck at 50 threads."""

    def __init__(self, base_url: str, token: str, thread_id: str, errors: collections.Counter) -> None:
        self.http = http_client(base_url, token, 2)
        self.id = thread_id
        self.errors = errors
        self.runs: dict[str, RunObs] = {}
        self.inflight: RunObs | None = None
        self.last_seq = 0
        self.durable = 0
        self.unattributed = 0
        self.connected = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False

    def obs(self, run_id: str) -> RunObs:
        o = self.runs.get(run_id)
        if o is None:
            o = self.runs[run_id] = RunObs()
        return o

    def start(self) -> None:
        OPEN.add(self)
        self._task = asyncio.get_running_loop().create_task(self._sse())

    async def close(self) -> None:
        OPEN.discard(self)
        self._closing = True
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.http.aclose()

    async def _sse(self) -> None:
        while not self._closing:
            headers = {"Accept": "text/event-stream"}
            if self.last_seq:
                headers["Last-Event-ID"] = str(self.last_seq)
            try:
                async with self.http.stream("GET", f"/v1/threads/{self.id}/events", headers=headers,
                                            timeout=httpx.Timeout(10.0, read=60.0)) as resp:
                    if resp.status_code != 200:
                        self.errors[f"sse_http_{resp.status_code}"] += 1
                        await asyncio.sleep(0.5)  # backoff before reconnecting
                        continue
                    buf = b""
                    async for chunk in resp.aiter_raw():
                        now = time.perf_counter()
                        buf += chunk
                        if b"\n\n" not in buf:
                            continue
                        *blocks, buf = buf.split(b"\n\n")
                        for block in blocks:
                            self._event(block, now)
                    if not self._closing:
                        self.errors["sse_closed"] += 1
            except asyncio.CancelledError:
                raise
            except httpx.HTTPError as exc:
                if self._closing:
                    return
                self.errors[f"sse_{type(exc).__name__}"] += 1
                await asyncio.sleep(0.2)  # backoff before reconnecting

    def _event(self, block: bytes, now: float) -> None:
        seq = 0
        etype = b""
        data = b""
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                data = line[6:]
            elif line.startswith(b"event: "):
                etype = line[7:]
            elif line.startswith(b"id: "):
                seq = int(line[4:])
            elif line.startswith(b": connected"):
                self.connected.set()
        if etype == b"live.delta":
            run_id = _delta_decoder.decode(data).run_id
            o = self.obs(run_id)
            if o.first_delta is None:
                o.first_delta = now
            return
        if not seq:
            return
        if seq <= self.last_seq:
            return  # a replay after a reconnect
        self.last_seq = seq
        self.durable += 1
        run_id = _env_decoder.decode(data).data.run_id
        o = self.obs(run_id) if run_id else self.inflight
        if o is None:
            self.unattributed += 1
            return
        o.durable += 1
        o.marks.setdefault(etype.decode(), now)
        if etype in TERMINAL and run_id:
            o.end = now
            o.status = etype.decode()
            o.done.set()

    async def run_once(self, text: str) -> RunObs | None:
        t0 = time.perf_counter()
        try:
            r = await self.http.post(f"/v1/threads/{self.id}/messages", json={"text": text})
        except httpx.TimeoutException:
            self.errors["post_timeout"] += 1
            return None
        except httpx.HTTPError as exc:
            self.errors[f"post_{type(exc).__name__}"] += 1
            return None
        accepted = time.perf_counter()
        if r.status_code != 202:
            self.errors[f"post_http_{r.status_code}"] += 1
            await asyncio.sleep(0.05)  # do not spin on a failing endpoint
            return None
        body = r.json()
        run_id = body["run_id"]
        o = self.obs(run_id)
        o.t0, o.accepted = t0, accepted
        if body.get("disposition") != "started":
            self.errors[f"disposition_{body.get('disposition')}"] += 1
        self.inflight = o
        try:
            await asyncio.wait_for(o.done.wait(), RUN_TIMEOUT)
        except asyncio.TimeoutError:
            self.errors["run_timeout"] += 1
            return None
        finally:
            self.inflight = None
            self.runs.pop(run_id, None)
        if o.status != "run.completed":
            self.errors[o.status or "run_unknown"] += 1
        return o


# --- helpers ---------------------------------------------------------------------------------------------


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


async def create_threads(http: httpx.AsyncClient, n: int, errors: collections.Counter) -> list[str]:
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> str:
        async with sem:
            for _ in range(5):
                r = await http.post("/v1/threads", json={"title": f"bench {i}"})
                if r.status_code == 201:
                    return r.json()["thread_id"]
                errors[f"create_http_{r.status_code}"] += 1
                await asyncio.sleep(0.1)  # retry backoff
            raise RuntimeError(f"could not create a thread: {r.status_code} {r.text}")

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def open_threads(http: httpx.AsyncClient, ids: list[str], errors: collections.Counter) -> list[ThreadClient]:
    token = http.headers["Authorization"].split(" ", 1)[1]
    clients = [ThreadClient(str(http.base_url), token, t, errors) for t in ids]
    for c in clients:
        c.start()
    await asyncio.wait_for(asyncio.gather(*(c.connected.wait() for c in clients)), 30)
    # the ordered consumer is live once the thread's first event came through
    deadline = time.monotonic() + 30
    while any(c.last_seq == 0 for c in clients):
        if time.monotonic() > deadline:
            raise RuntimeError("SSE streams did not deliver thread.created")
        await asyncio.sleep(0.02)  # waiting for SSE replay of thread.created
    return clients


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


async def scrape_metrics(stack: Stack) -> dict[str, float]:
    """The workers' own Prometheus counters (conflicts, retries, dead letters, checkpoint time), summed."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = ("treadle_append_conflicts", "treadle_handler_retries", "treadle_dead_letters",
              "treadle_events_appended", "treadle_checkpoint_capture_seconds", "treadle_commands")
    out: dict[str, float] = collections.defaultdict(float)
    async with httpx.AsyncClient(timeout=5.0) as http:
        for name, port in stack.health_ports.items():
            try:
                text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            except httpx.HTTPError:
                continue
            for family in text_string_to_metric_families(text):
                if not family.name.startswith(wanted):
                    continue
                for sample in family.samples:
                    if sample.name.endswith("_created") or sample.name.endswith("_bucket"):
                        continue
                    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                    out[f"{sample.name}{{{labels}}}" if labels else sample.name] += sample.value
    return dict(out)


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


# --- scenarios -----------------------------------------------------------------------------------------


@dataclass
class Env:
    stack: Stack
    procs: Procs
    http: httpx.AsyncClient
    redis: Redis
    nc: Any
    js: Any


async def run_scenario(env: Env, name: str, n_threads: int, seconds: float) -> dict:
    log(f"scenario {name}: {n_threads} thread(s), {seconds:g}s")
    errors: collections.Counter[str] = collections.Counter()
    mem0 = (await env.redis.info("memory"))["used_memory"]
    keys0 = await env.redis.dbsize()
    ids = await create_threads(env.http, n_threads, errors)
    clients = await open_threads(env.http, ids, errors)
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
        while time.perf_counter() < deadline:
            o = await c.run_once(text)
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
    lat = [o.end - o.t0 for o in results]
    post = [o.accepted - o.t0 for o in results if o.accepted]
    first = [o.first_delta - o.t0 for o in results if o.first_delta is not None]
    marks: dict[str, list[float]] = collections.defaultdict(list)
    for o in results:
        for k, t in o.marks.items():
            marks[k].append(t - o.t0)
    cpu = {k: cpu1[k] - cpu0[k] for k in cpu0}
    server_cpu = sum(v for k, v in cpu.items() if k != "bench-client")
    per_run = (lambda v: v / n * 1000 if n else None)
    out = {
        "threads": n_threads,
        "seconds": round(elapsed, 2),
        "completed_runs": n,
        "runs_per_s": r2(n / elapsed if elapsed else None, 1),
        "latency_ms": {"p50": ms(pct(lat, 0.5)), "p90": ms(pct(lat, 0.9)), "p99": ms(pct(lat, 0.99)),
                       "max": ms(max(lat) if lat else None), "mean": ms(sum(lat) / n if n else None)},
        "first_delta_ms": {"p50": ms(pct(first, 0.5)), "p99": ms(pct(first, 0.99)), "runs_with_delta": len(first)},
        "post_202_ms": {"p50": ms(pct(post, 0.5)), "p99": ms(pct(post, 0.99))},
        "event_seen_p50_ms": {k: ms(pct(v, 0.5)) for k, v in sorted(marks.items(), key=lambda kv: pct(kv[1], 0.5))},
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
    log(f"scenario {name}: {n} runs in {elapsed:.1f}s = {out['runs_per_s']} runs/s, p50 {out['latency_ms']['p50']} ms, "
        f"cpu {out['cpu']['server_ms_per_run']} ms/run, errors {out['error_count']}")
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


def other_load(cpu0: dict[str, float], cpu1: dict[str, float], busy0: float, dt: float) -> float:
    ours = sum(cpu1[k] - cpu0[k] for k in cpu0)
    return round((Procs.machine_busy() - busy0 - ours) / dt, 2)


async def raw_appends(env: Env, total: int, actors: int, batches: int) -> dict:
    """C: EventLog.append (50 serial OCC actors) and js.publish_async (window 256) to a scratch stream."""
    log(f"scenario C: raw JetStream appends, {total} events")
    js = env.js
    cfg = dataclasses.replace(EVENTS, name=SCRATCH_STREAM, subjects=[f"{SCRATCH_PREFIX}.>"], num_replicas=1)
    with contextlib.suppress(Exception):
        await js.delete_stream(SCRATCH_STREAM)
    await js.add_stream(cfg)
    out: dict[str, Any] = {"stream": SCRATCH_STREAM, "events": total, "actors": actors}
    now = datetime.now(timezone.utc)

    def envelope(thread: str, k: int) -> Envelope:
        return Envelope(id=f"evt_{uuid.uuid4().hex}", type="run.warning", tenant=TENANT, thread=thread, at=now,
                        command_id=f"cmd_{k}", actor="bench", data={"run_id": "run_x", "message": f"n{k}"})

    try:
        # EventLog writes to its own subjects; point this process's view of them at the scratch stream
        scratch = SimpleNamespace(
            event=lambda t, th, ty: f"{SCRATCH_PREFIX}.evt.{t}.{th}.{ty}",
            thread_events=lambda t, th: f"{SCRATCH_PREFIX}.evt.{t}.{th}.>",
            EVENTS_STREAM=SCRATCH_STREAM,
        )
        original = eventlog_module.subjects
        eventlog_module.subjects = scratch  # type: ignore[assignment]
        try:
            elog = EventLog(env.nc)
            per_actor = total // actors
            conflicts = 0

            async def actor(i: int) -> None:
                nonlocal conflicts
                thread = f"thr_raw{i:03d}"
                seq = 0
                for k in range(per_actor):
                    while True:
                        try:
                            seq = await elog.append(TENANT, thread, seq, [envelope(thread, k)])
                            break
                        except Conflict as exc:
                            conflicts += 1
                            seq = exc.actual_seq if exc.actual_seq is not None else await elog.last_seq(TENANT, thread)

            cpu0, t0, busy0 = env.procs.cpu(), time.perf_counter(), Procs.machine_busy()
            await asyncio.gather(*(actor(i) for i in range(actors)))
            dt = time.perf_counter() - t0
            cpu1 = env.procs.cpu()
            n = per_actor * actors
            out["eventlog_append_actors"] = {
                "events": n, "seconds": round(dt, 3), "events_per_s": round(n / dt), "conflicts": conflicts,
                "other_load_cores": other_load(cpu0, cpu1, busy0, dt),
                "nats_cpu_us_per_event": round((cpu1["nats-server"] - cpu0["nats-server"]) / n * 1e6, 1),
                "client_cpu_us_per_event": round((cpu1["bench-client"] - cpu0["bench-client"]) / n * 1e6, 1),
            }

            # the same with 3-event decisions, as the coordinator and supervisor write them (atomic batch)
            decisions = max(actors, batches // actors * actors)

            async def batch_actor(i: int) -> None:
                thread = f"thr_rawb{i:03d}"
                seq = 0
                for k in range(decisions // actors):
                    seq = await elog.append(TENANT, thread, seq, [envelope(thread, k) for _ in range(3)])

            cpu0, t0, busy0 = env.procs.cpu(), time.perf_counter(), Procs.machine_busy()
            await asyncio.gather(*(batch_actor(i) for i in range(actors)))
            dt = time.perf_counter() - t0
            cpu1 = env.procs.cpu()
            out["eventlog_append_batch3_actors"] = {
                "decisions": decisions, "events": decisions * 3, "seconds": round(dt, 3),
                "other_load_cores": other_load(cpu0, cpu1, busy0, dt),
                "decisions_per_s": round(decisions / dt), "events_per_s": round(decisions * 3 / dt),
                "nats_cpu_us_per_decision": round((cpu1["nats-server"] - cpu0["nats-server"]) / decisions * 1e6, 1),
                "client_cpu_us_per_decision": round((cpu1["bench-client"] - cpu0["bench-client"]) / decisions * 1e6, 1),
            }
        finally:
            eventlog_module.subjects = original  # type: ignore[assignment]

        payload = msgspec.json.encode(envelope("thr_pipe", 0))
        pjs = env.nc.jetstream(publish_async_max_pending=256)
        cpu0, t0, busy0 = env.procs.cpu(), time.perf_counter(), Procs.machine_busy()
        futures = []
        for k in range(total):
            futures.append(await pjs.publish_async(f"{SCRATCH_PREFIX}.pipe.t{k % actors}", payload))
        acks = await asyncio.gather(*futures)
        dt = time.perf_counter() - t0
        cpu1 = env.procs.cpu()
        out["publish_async_w256"] = {
            "events": len(acks), "seconds": round(dt, 3), "events_per_s": round(len(acks) / dt),
            "other_load_cores": other_load(cpu0, cpu1, busy0, dt),
            "nats_cpu_us_per_event": round((cpu1["nats-server"] - cpu0["nats-server"]) / total * 1e6, 1),
            "client_cpu_us_per_event": round((cpu1["bench-client"] - cpu0["bench-client"]) / total * 1e6, 1),
            "payload_bytes": len(payload),
        }
        out["stream_messages"] = await stream_messages(js, SCRATCH_STREAM)
    finally:
        with contextlib.suppress(Exception):
            await js.delete_stream(SCRATCH_STREAM)
    log(f"scenario C: EventLog.append {out['eventlog_append_actors']['events_per_s']} events/s, 3-event batches "
        f"{out['eventlog_append_batch3_actors']['decisions_per_s']} decisions/s, "
        f"publish_async {out['publish_async_w256']['events_per_s']} events/s")
    return out


# --- report ----------------------------------------------------------------------------------------------


def verdicts(result: dict) -> list[dict]:
    out = []
    sc = result["scenarios"]

    def check(name: str, value: float | None, target: float, higher_is_better: bool, unit: str) -> None:
        ok = value is not None and (value >= target if higher_is_better else value <= target)
        out.append({"target": name, "value": value, "goal": f"{'≥' if higher_is_better else '≤'} {target:g} {unit}",
                    "pass": ok})

    if "B" in sc:
        check("B throughput (peer ~50 runs/s, ≥5×)", sc["B"]["runs_per_s"], TARGETS["runs_per_s"], True, "runs/s")
    for name in ("A", "B"):
        if name in sc:
            check(f"{name} p50 send→run.completed (peer ~1000 ms)", sc[name]["latency_ms"]["p50"], TARGETS["p50_ms"],
                  False, "ms")
    for name in ("A", "B"):
        if name in sc:
            check(f"{name} server CPU per run (peer 17–20 ms)", sc[name]["cpu"]["server_ms_per_run"],
                  TARGETS["cpu_ms_per_run"], False, "ms")
    return out


def print_report(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, width=140)
    sc = result["scenarios"]
    names = [n for n in ("A", "B") if n in sc]

    exp = result["meta"].get("experiments")
    t = Table(title=f"Treadle end-to-end ({result['meta']['cpus']} CPUs, loop={result['meta']['loop']})"
                    + (f"  [EXPERIMENT: {exp}]" if exp else ""))
    t.add_column("metric")
    for n in names:
        t.add_column(f"{n}: {sc[n]['threads']} thread(s)", justify="right")

    def row(label: str, get) -> None:
        vals = []
        for n in names:
            try:
                v = get(sc[n])
            except (KeyError, TypeError):
                v = None
            vals.append("–" if v is None else (f"{v:,}" if isinstance(v, (int, float)) else str(v)))
        t.add_row(label, *vals)

    row("completed runs", lambda s: s["completed_runs"])
    row("runs/s", lambda s: s["runs_per_s"])
    row("p50 send→run.completed ms", lambda s: s["latency_ms"]["p50"])
    row("p99 send→run.completed ms", lambda s: s["latency_ms"]["p99"])
    row("max send→run.completed ms", lambda s: s["latency_ms"]["max"])
    row("p50 send→first live.delta ms", lambda s: s["first_delta_ms"]["p50"])
    row("p50 send→202 ms", lambda s: s["post_202_ms"]["p50"])
    row("durable events/run (SSE)", lambda s: s["durable_events_per_run"]["sse"])
    row("durable events/run (events stream)", lambda s: s["durable_events_per_run"]["events_stream"])
    row("provider events/run (provider stream)", lambda s: s["durable_events_per_run"]["provider_stream"])
    row("server CPU ms/run (total)", lambda s: s["cpu"]["server_ms_per_run"])
    procs = list(next(iter(sc.values()))["cpu"]["per_process_ms_per_run"]) if sc else []
    for p in procs:
        row(f"  CPU ms/run {p}", lambda s, p=p: s["cpu"]["per_process_ms_per_run"].get(p))
    row("server cores busy (avg)", lambda s: s["cpu"]["server_cores_busy"])
    row("bench client CPU ms/run", lambda s: s["cpu"]["bench_client_ms_per_run"])
    row("other load on the machine (cores)", lambda s: s["cpu"]["other_load_cores"])
    for p in procs:
        row(f"  peak RSS MB {p}", lambda s, p=p: s["peak_rss_mb"].get(p))
    row("redis bytes/thread (used_memory Δ)", lambda s: s["redis"]["bytes_per_thread"])
    row("redis MEMORY USAGE one thread doc", lambda s: s["redis"]["thread_doc_memory_usage_bytes"])
    row("  runs in that thread", lambda s: s["redis"]["runs_in_that_thread"])
    row("projection catch-up s", lambda s: s["projection_catch_up_s"])
    row("append conflicts per run (OCC)", lambda s: s["worker_metrics"]["append_conflicts_per_run"])
    row("checkpoint capture mean ms", lambda s: s["worker_metrics"]["checkpoint_capture_mean_ms"])
    row("handler retries / dead letters", lambda s: f"{s['worker_metrics']['handler_retries']} / "
                                                    f"{s['worker_metrics']['dead_letters']}")
    row("errors", lambda s: s["error_count"])
    if names:
        console.print(t)

    bt = Table(title="p50 ms from send until each durable event type is seen on SSE")
    bt.add_column("event")
    for n in names:
        bt.add_column(n, justify="right")
    types = []
    for n in names:
        for k in sc[n]["event_seen_p50_ms"]:
            if k not in types:
                types.append(k)
    for k in types:
        cells = []
        for n in names:
            v, seen = sc[n]["event_seen_p50_ms"].get(k), sc[n].get("event_seen_runs", {}).get(k, 0)
            partial = f" ({seen}/{sc[n]['completed_runs']} runs)" if seen < sc[n]["completed_runs"] * 0.9 else ""
            cells.append("–" if v is None else f"{v}{partial}")
        bt.add_row(k, *cells)
    if names:
        console.print(bt)

    raw = result.get("raw")
    if raw:
        rt = Table(title="C: raw JetStream appends (scratch stream, same nats-server)")
        for c in ("mode", "events", "events/s", "nats-server µs/event", "client µs/event", "other load",
                  "reference (infra doc)"):
            rt.add_column(c, justify="right" if c != "mode" else "left")
        a, p = raw["eventlog_append_actors"], raw["publish_async_w256"]
        rt.add_row(f"EventLog.append, {raw['actors']} OCC actors", f"{a['events']:,}", f"{a['events_per_s']:,}",
                   str(a["nats_cpu_us_per_event"]), str(a["client_cpu_us_per_event"]), str(a["other_load_cores"]),
                   "15.8k (asyncio) / 19.9k (uvloop)")
        b = raw["eventlog_append_batch3_actors"]
        rt.add_row(f"EventLog.append 3-event atomic batch, {raw['actors']} actors",
                   f"{b['decisions']:,} × 3", f"{b['events_per_s']:,} ({b['decisions_per_s']:,} batches/s)",
                   f"{b['nats_cpu_us_per_decision'] / 3:.1f}", f"{b['client_cpu_us_per_decision'] / 3:.1f}",
                   str(b["other_load_cores"]), "17.1k (100-msg batches)")
        rt.add_row("js.publish_async window 256", f"{p['events']:,}", f"{p['events_per_s']:,}",
                   str(p["nats_cpu_us_per_event"]), str(p["client_cpu_us_per_event"]), str(p["other_load_cores"]),
                   "28.3k (asyncio)")
        console.print(rt)

    vt = Table(title=f"Targets vs peer ({PEER['name']}: ~50 runs/s at 50 threads, ~1 s p50, 17–20 ms CPU/run)")
    vt.add_column("target")
    vt.add_column("value", justify="right")
    vt.add_column("goal", justify="right")
    vt.add_column("result")
    for v in result["targets"]:
        vt.add_row(v["target"], "–" if v["value"] is None else str(v["value"]), v["goal"],
                   "[green]PASS[/]" if v["pass"] else "[red]FAIL[/]")
    console.print(vt)


# --- main ------------------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> int:
    output = Output()
    tmp = Path(tempfile.mkdtemp(prefix="treadle-bench-"))
    env_extra = {}
    if args.experiment:
        # what-if patches loaded into every worker (bench/experiments/sitecustomize.py); diagnostic only
        path = os.pathsep.join(filter(None, [str(ROOT / "experiments"), os.environ.get("PYTHONPATH")]))
        env_extra = {"PYTHONPATH": path, "TREADLE_BENCH_EXPERIMENTS": args.experiment}
    stack = Stack(tmp / "state", on_output=output, env=env_extra)
    nc = None
    redis = None
    http = None
    rc = 0
    result: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        try:
            await stack.start()
        except BaseException:
            log("the stack did not start; last output:")
            output.dump()
            raise
        log(f"stack up in {time.perf_counter() - t0:.1f}s (api {stack.api_url}, nats {stack.nats_url})")
        procs = Procs(stack)
        nc = await nats.connect(stack.nats_url, name="treadle-bench")
        token = await TokenStore(nc.jetstream()).create(TENANT, "bench")
        redis = Redis.from_url(stack.redis_url)
        http = http_client(stack.api_url, token, 32)  # thread creation; each ThreadClient has its own pool
        env = Env(stack, procs, http, redis, nc, nc.jetstream())

        result["meta"] = {
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            "seconds": args.seconds, "threads": args.threads, "stack_start_s": round(time.perf_counter() - t0, 2),
            "pids": procs.pids,
            "experiments": args.experiment or None,
        }
        result["warm_up"] = await warm_up(env)
        result["scenarios"] = {}
        if "A" in args.only.upper():
            result["scenarios"]["A"] = await run_scenario(env, "A", 1, args.seconds)
        if "B" in args.only.upper():
            result["scenarios"]["B"] = await run_scenario(env, "B", args.threads, args.seconds)
        if not args.skip_raw and "C" in args.only.upper():
            result["raw"] = await raw_appends(env, args.raw_events, 50, args.raw_batches)
        restarts = {n: stack.processes.restarts(n) for n in WORKERS}
        result["worker_restarts"] = restarts
        result["worker_log"] = {"warnings": dict(output.warnings), "errors": dict(output.errors)}
        result["peer"] = PEER
        result["targets"] = verdicts(result)
        if any(restarts.values()):
            log(f"workers restarted during the bench: {restarts}")
            output.dump()
            rc = 1
    except asyncio.CancelledError:
        log("interrupted; stopping the stack")
        rc = 130
    except Exception as exc:
        log(f"bench failed: {exc!r}")
        output.dump(40)
        rc = 1
        raise
    finally:
        # SSE connections first: the gateway's graceful shutdown would otherwise wait for them
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*(c.close() for c in list(OPEN)), return_exceptions=True), 10)
        if http is not None:
            await http.aclose()
        if redis is not None:
            with contextlib.suppress(Exception):
                await redis.aclose()
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()
        await stack.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        log("stack stopped")
    if rc == 130 or "targets" not in result:
        return rc
    print_report(result)
    text = json.dumps(result, indent=2)
    print(text)
    out = RESULTS if not args.experiment else RESULTS.with_name(f"experiment-{args.experiment.replace(',', '+')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    log(f"wrote {out.relative_to(ROOT.parent)}")
    return rc


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=15.0, help="duration of scenarios A and B (default 15)")
    p.add_argument("--threads", type=int, default=50, help="concurrent threads in scenario B (default 50)")
    p.add_argument("--skip-raw", action="store_true", help="skip scenario C (raw JetStream appends)")
    p.add_argument("--raw-events", type=int, default=20_000, help="events per raw append mode (default 20000)")
    p.add_argument("--raw-batches", type=int, default=2_000,
                   help="3-event atomic-batch decisions in the raw batch mode (default 2000)")
    p.add_argument("--experiment", default="",
                   help="diagnostic what-if patches for the workers, e.g. no-batch,no-git-ref (bench/experiments)")
    p.add_argument("--only", default="ABC", help="scenarios to run, e.g. --only C (default ABC)")
    return p.parse_args(argv)


def run() -> int:
    args = parse_args()
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        loop = runner.get_loop()
        state: dict[str, Any] = {"task": None, "signals": 0}

        def on_signal(signum: int) -> None:
            # Ctrl-C / SIGTERM (also when the shell started us with SIGINT ignored): cancel the main task, whose
            # `finally` stops the stack; a second signal only says so, so that the stop can finish.
            state["signals"] += 1
            if state["signals"] == 1 and state["task"] is not None:
                log(f"{signal.Signals(signum).name}: stopping")
                state["task"].cancel()
            else:
                log("still stopping the stack; the workers also get SIGTERM if this process dies")

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)

        async def guarded() -> int:
            state["task"] = asyncio.current_task()
            return await main(args)

        try:
            return runner.run(guarded())
        except (KeyboardInterrupt, asyncio.CancelledError):
            return 130


if __name__ == "__main__":
    sys.exit(run())
