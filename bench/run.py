"""End-to-end benchmark of a fresh embedded stack (``make bench``).

    .venv/bin/python bench/run.py [--seconds 15] [--threads 50] [--skip-raw]
                                  [--raw-events 20000] [--raw-batches 2000] [--only ABC]

Starts nats-server, redis-server and the six workers (``treadle.cli.stack.Stack``) on free ports in a temp
dir, creates a token, warms up, then measures scripted one-reply runs over HTTP/1.1:

* A: one thread, runs back to back for ``--seconds``;
* B: ``--threads`` threads concurrently, each running back to back for ``--seconds``;
* D: ``--d-threads`` threads whose workspaces hold ``--d-files`` files, each run writing one small file: a real
  capture on every run (``file_runs``);
* E: ``--e-threads`` threads with one run each, then idle: RSS of every process, Redis bytes per thread
  (``idle_threads``);
* F: one thread with ``--f-runs`` runs back to back: server CPU per run for every hundred runs, the first
  hundred against the last (``long_thread``);
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

Modules: ``harness`` (Env, output, log), ``client`` (the per-thread SSE/HTTP client), ``sampling``
(CPU/RSS, worker metrics), ``scenarios`` (A and B), ``raw`` (C), ``report`` (tables, targets vs peer).
``bench/profile.py`` samples the workers (py-spy) and nats-server (perf) under the same load, or traces
every NATS message of a run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
from client import OPEN, http_client
from file_runs import file_runs
from harness import TENANT, Env, Output, log
from idle_threads import idle_threads
from long_thread import long_thread
from raw import raw_appends
from redis.asyncio import Redis
from report import PEER, print_report, verdicts
from sampling import Procs
from scenarios import run_scenario, warm_up

from treadle.cli.stack import WORKERS, Stack
from treadle.ops.tokens import TokenStore

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "latest.json"


async def main(args: argparse.Namespace) -> int:
    output = Output()
    tmp = Path(tempfile.mkdtemp(prefix="treadle-bench-"))
    stack = Stack(tmp / "state", on_output=output)
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
        log(f"stack up in {time.perf_counter() - t0:.1f}s (api {stack.api_url}, nats {stack.nats_address})")
        procs = Procs(stack)
        nc = await nats.connect(stack.nats_url, name="treadle-bench")
        token = await TokenStore(nc.jetstream()).create(TENANT, "bench")
        redis = Redis.from_url(stack.redis_url)
        http = http_client(stack.api_url, token, 32)  # thread creation; each ThreadClient has its own pool
        env = Env(stack, procs, http, redis, nc, nc.jetstream())

        result["meta"] = {
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            "seconds": args.seconds,
            "threads": args.threads,
            "stack_start_s": round(time.perf_counter() - t0, 2),
            "pids": procs.pids,
        }
        result["warm_up"] = await warm_up(env)
        result["scenarios"] = {}
        if "A" in args.only.upper():
            result["scenarios"]["A"] = await run_scenario(env, "A", 1, args.seconds)
        if "B" in args.only.upper():
            result["scenarios"]["B"] = await run_scenario(env, "B", args.threads, args.seconds)
        if "D" in args.only.upper():
            result["scenarios"]["D"] = await file_runs(env, args.d_threads, args.seconds, args.d_files)
        if "F" in args.only.upper():
            result["scenarios"]["F"] = await long_thread(env, args.f_runs)
        if "E" in args.only.upper():
            result["scenarios"]["E"] = await idle_threads(env, args.e_threads)
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
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text + "\n")
    log(f"wrote {RESULTS.relative_to(ROOT.parent)}")
    return rc


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=15.0, help="duration of scenarios A and B (default 15)")
    p.add_argument("--threads", type=int, default=50, help="concurrent threads in scenario B (default 50)")
    p.add_argument("--skip-raw", action="store_true", help="skip scenario C (raw JetStream appends)")
    p.add_argument("--raw-events", type=int, default=20_000, help="events per raw append mode (default 20000)")
    p.add_argument(
        "--raw-batches",
        type=int,
        default=2_000,
        help="3-event atomic-batch decisions in the raw batch mode (default 2000)",
    )
    p.add_argument("--d-threads", type=int, default=10, help="scenario D's threads, one workspace each (default 10)")
    p.add_argument("--d-files", type=int, default=10_000, help="files in each of D's workspaces (default 10000)")
    p.add_argument("--f-runs", type=int, default=10_000, help="runs on scenario F's one thread (default 10000)")
    p.add_argument("--e-threads", type=int, default=1_000, help="idle threads of scenario E (default 1000)")
    p.add_argument("--only", default="ABC", help="scenarios to run, e.g. --only CF (default ABC; also D, E, F)")
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
