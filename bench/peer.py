"""``make bench-peer``: Treadle's scenario B and the LangGraph Agent Server (``langgraph dev``, in-memory) side by
side on this machine, alternating (Treadle, peer, Treadle, peer), same concurrency and duration; never in CI.

    .venv/bin/python bench/peer.py [--peer-dir .tools/langgraph-peer] [--threads 50] [--seconds 20] [--rounds 2]

The peer runs from its own virtualenv (``make bench-peer`` installs it, pinned, under the tools folder,
at the versions of the reference measurement in docs/benchmarks.md) serving the trivial graph: one async node
that appends a fixed AIMessage. Each of ``--threads`` threads calls ``POST /threads/{id}/runs/wait`` back to back for ``--seconds``;
CPU is the server process's (and its children's) user+system. Treadle's round is ``bench/run.py --only B``.
Both servers listen on 127.0.0.1 only. Prints the table with the ratios and writes bench/results/peer.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
GRAPH = """
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph


async def reply(state: MessagesState) -> dict:
    return {"messages": [AIMessage(content="a fixed reply from the trivial graph")]}


builder = StateGraph(MessagesState)
builder.add_node("reply", reply)
builder.add_edge(START, "reply")
graph = builder.compile()
"""
CONFIG = {"dependencies": ["."], "graphs": {"agent": "./graph.py:graph"}, "env": {}}
QUIET = {
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGSMITH_API_KEY": "",
    "LANGGRAPH_CLOUD_LICENSE_KEY": "",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(round(q * (len(s) - 1))))] * 1000, 1)


def tree_cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for c in p.children(recursive=True):
        try:
            ct = c.cpu_times()
            total += ct.user + ct.system
        except psutil.Error:
            pass
    return total


async def drive_peer(url: str, server: psutil.Process, threads: int, seconds: float) -> dict:
    limits = httpx.Limits(max_connections=threads + 4, max_keepalive_connections=threads + 4)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        ids = [(await http.post("/threads", json={})).json()["thread_id"] for _ in range(threads)]
        body = {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hello"}]}}
        for tid in ids[:4]:  # warm up: the graph's first run loads it
            await http.post(f"/threads/{tid}/runs/wait", json=body)
        lat: list[float] = []
        errors = 0
        cpu0, me0 = tree_cpu(server), time.process_time()
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def loop(tid: str) -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                s = time.perf_counter()
                r = await http.post(f"/threads/{tid}/runs/wait", json=body)
                if r.status_code == 200:
                    lat.append(time.perf_counter() - s)
                else:
                    errors += 1

        await asyncio.gather(*(loop(t) for t in ids))
        elapsed = time.perf_counter() - t0
        cpu = tree_cpu(server) - cpu0
    n = len(lat)
    return {
        "completed_runs": n,
        "runs_per_s": round(n / elapsed, 1),
        "p50_ms": pct(lat, 0.5),
        "p99_ms": pct(lat, 0.99),
        "server_ms_per_run": round(cpu / n * 1000, 2) if n else None,
        "client_ms_per_run": round((time.process_time() - me0) / n * 1000, 2) if n else None,
        "rss_mb": round(server.memory_info().rss / 2**20, 1),
        "errors": errors,
    }


async def peer_round(peer_dir: Path, threads: int, seconds: float) -> dict:
    app = peer_dir / "app"
    app.mkdir(parents=True, exist_ok=True)
    (app / "graph.py").write_text(GRAPH)
    (app / "langgraph.json").write_text(json.dumps(CONFIG))
    port = free_port()
    cmd = [str(peer_dir / "venv/bin/langgraph"), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)],
        cwd=app,
        env=os.environ | QUIET,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=2) as http:
            for _ in range(300):
                try:
                    if (await http.get("/ok")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None:
                    raise RuntimeError("langgraph dev exited at start")
                await asyncio.sleep(0.2)  # waiting for the server's /ok
            else:
                raise RuntimeError("langgraph dev did not answer /ok")
        return await drive_peer(url, psutil.Process(proc.pid), threads, seconds)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        (app / ".langgraph_api").exists() and subprocess.run(["rm", "-rf", str(app / ".langgraph_api")])


def treadle_round(threads: int, seconds: float) -> dict:
    out = ROOT / "results" / "peer-treadle.json"
    cmd = [sys.executable, str(ROOT / "run.py"), "--only", "B", "--skip-raw"]
    subprocess.run(
        [*cmd, "--threads", str(threads), "--seconds", str(seconds)], cwd=REPO, check=True, capture_output=True
    )
    b = json.loads((ROOT / "results" / "latest.json").read_text())["scenarios"]["B"]
    out.write_text(json.dumps(b))
    return {
        "completed_runs": b["completed_runs"],
        "runs_per_s": b["runs_per_s"],
        "p50_ms": b["latency_ms"]["p50"],
        "p99_ms": b["latency_ms"]["p99"],
        "server_ms_per_run": b["cpu"]["server_ms_per_run"],
        "client_ms_per_run": b["cpu"]["bench_client_ms_per_run"],
        "rss_mb": max(b["peak_rss_mb"].values()),
        "errors": b["error_count"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peer-dir", type=Path, default=REPO / ".tools" / "langgraph-peer")
    p.add_argument("--threads", type=int, default=50)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    args.peer_dir = args.peer_dir.absolute()  # the peer runs in its app folder: `make bench-peer` passes a relative one
    rounds = []
    for i in range(args.rounds):
        print(f"[peer] round {i + 1}: Treadle B", file=sys.stderr)
        t = treadle_round(args.threads, args.seconds)
        print(f"[peer] round {i + 1}: LangGraph dev", file=sys.stderr)
        g = asyncio.run(peer_round(args.peer_dir, args.threads, args.seconds))
        rounds.append({"treadle": t, "peer": g})
    keys = ["runs_per_s", "p50_ms", "p99_ms", "server_ms_per_run", "client_ms_per_run", "rss_mb", "errors"]
    print(f"{'metric':22}" + "".join(f"{f'T{i + 1}':>10}{f'P{i + 1}':>10}{'T/P':>8}" for i in range(len(rounds))))
    for k in keys:
        row = f"{k:22}"
        for r in rounds:
            t, g = r["treadle"][k], r["peer"][k]
            ratio = f"{t / g:.2f}" if isinstance(t, (int, float)) and isinstance(g, (int, float)) and g else "–"
            row += f"{t!s:>10}{g!s:>10}{ratio:>8}"
        print(row)
    ratios = [r["treadle"]["runs_per_s"] / r["peer"]["runs_per_s"] for r in rounds if r["peer"]["runs_per_s"]]
    cpu = [r["treadle"]["server_ms_per_run"] for r in rounds]
    print(f"throughput ratio Treadle/peer: {', '.join(f'{x:.2f}x' for x in ratios)} (target >= 5x)")
    print(f"Treadle server CPU per run: {cpu} ms (target <= 4 ms)")
    (ROOT / "results" / "peer.json").write_text(json.dumps({"rounds": rounds, "ratios": ratios}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
