"""What the sandbox egress path costs: latency added per request and throughput of a 1 MiB response, through
bwrap + forward.py + Egress vs the same client straight to 127.0.0.1. Not part of CI.

    scripts/loopback-only.sh .venv/bin/python bench/egress.py [--requests 500] [--big 50]

The "model API" is an HTTP/1.1 keep-alive server on 127.0.0.1; the Egress runs on uvloop in this process,
as in the provider host. Three figures each way: a request on a fresh connection (the tunnel is opened per
connection: CONNECT over the Unix socket, then TCP to the API), a request on a kept-alive connection (what a
runtime's pooled HTTP client pays), and MiB/s of 1 MiB responses on a kept-alive connection.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import uvloop

from treadle.sandbox.egress import Egress, forward_command

SMALL = b'{"ok":true}'
BIG = os.urandom(1 << 20)

CLIENT = r"""
import http.client, json, sys, time
port, requests, big = map(int, sys.argv[1:4])
def get(conn, path):
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    assert response.status == 200, response.status
    return body
def timed(fn, n):
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return sorted(samples)
def fresh():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    get(conn, "/small")
    conn.close()
pooled_conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
get(pooled_conn, "/small")  # warm: the tunnel exists before timing
out = {"fresh": timed(fresh, requests), "pooled": timed(lambda: get(pooled_conn, "/small"), requests)}
start = time.perf_counter()
for _ in range(big):
    assert len(get(pooled_conn, "/big")) == 1 << 20
out["mib_per_s"] = big / (time.perf_counter() - start)
print(json.dumps(out))
"""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: without it, delayed ACKs cost 40 ms

    def do_GET(self) -> None:
        body = BIG if self.path == "/big" else SMALL
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def summary(result: dict) -> dict[str, float]:
    def pct(samples: list[float], p: float) -> float:
        return samples[min(len(samples) - 1, int(p * len(samples)))] * 1e3

    return {
        "fresh_p50_ms": pct(result["fresh"], 0.5),
        "fresh_p95_ms": pct(result["fresh"], 0.95),
        "pooled_p50_ms": pct(result["pooled"], 0.5),
        "pooled_p95_ms": pct(result["pooled"], 0.95),
        "mib_per_s": result["mib_per_s"],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def thread_cpu() -> float:
    return time.thread_time()


def run_measured(argv: list[str]) -> tuple[dict, float]:
    """The client's JSON result and the CPU seconds the process tree used (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(subprocess.run(argv, check=True, capture_output=True).stdout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--big", type=int, default=50)
    args = parser.parse_args()
    python = os.path.realpath(sys.executable)  # run as root here: every path is visible in the sandbox

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    client = [python, "-c", CLIENT, str(port), str(args.requests), str(args.big)]

    direct, direct_cpu = run_measured(client)

    loop = uvloop.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="egress-bench-", dir="/tmp") as tmp:
        egress = Egress(Path(tmp) / "egress.sock", frozenset({("127.0.0.1", port)}))
        asyncio.run_coroutine_threadsafe(egress.start(), loop).result()
        command = forward_command(egress.socket_path, client, ports=[(port, "127.0.0.1", port)], python=python)
        sandbox = [
            "bwrap",
            "--unshare-all",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--bind",
            tmp,
            tmp,
            *command,
        ]
        egress_cpu = -asyncio.run_coroutine_threadsafe(thread_cpu(), loop).result()
        through, _ = run_measured(sandbox)
        egress_cpu += asyncio.run_coroutine_threadsafe(thread_cpu(), loop).result()
        # The forwarder's CPU: the same path without bwrap (which adds nothing per byte), where the client is
        # its waited-for child, so RUSAGE_CHILDREN counts both; bwrap's init reaps without passing it on.
        listen = free_port()
        unsandboxed = forward_command(
            egress.socket_path,
            [python, "-c", CLIENT, str(listen), *client[4:]],
            ports=[(listen, "127.0.0.1", port)],
            python=python,
        )
        _, forwarded_cpu = run_measured(unsandboxed)
        asyncio.run_coroutine_threadsafe(egress.close(), loop).result()

    a, b = summary(direct), summary(through)
    print(f"{'':16}{'direct':>10}{'sandboxed':>12}{'added':>10}")
    for key in a:
        added = b[key] - a[key]
        print(f"{key:16}{a[key]:10.3f}{b[key]:12.3f}{added:+10.3f}")
    print(f"requests={args.requests} big={args.big}x1MiB; egress counts: {egress.counts}")
    # CPU is what load on a shared machine does not distort: the wall figures above are, the CPU ones less so.
    print(
        f"CPU seconds for the same run: client alone {direct_cpu:.3f}; forwarder {forwarded_cpu - direct_cpu:.3f} "
        f"(client + forwarder {forwarded_cpu:.3f}); Egress on the host's event loop {egress_cpu:.3f}"
    )


if __name__ == "__main__":
    main()
