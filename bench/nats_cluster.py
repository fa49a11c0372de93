"""What a 3-node NATS cluster costs and how fast Treadle recovers from losing a node.

    scripts/loopback-only.sh .venv/bin/python bench/nats_cluster.py [--kills 3] [--appends 2000] [--actors 20] [--skip-appends]

1. Appends, R1 vs R3: ``EventLog.append`` (single events, fenced by OCC, with Nats-Msg-Id) to TREADLE_EVENTS on
   one nats-server (R1) and on a fresh 3-node cluster (R3, no workers): one serial writer (latency p50/p99)
   and ``--actors`` concurrent writers (throughput).
2. Recovery: a ``Stack(nats_cluster=3)`` with the six workers. ``--kills`` times: SIGKILL the node that leads
   TREADLE_EVENTS (every append goes through it) and, at that instant, send a message (repeated with its
   Idempotency-Key while the API answers 5xx, as a client would). Measured from the kill:
   * ``leader_s``: TREADLE_EVENTS has a new leader (stream info);
   * ``workers_s``: every worker's connection is registered on a surviving node (their /connz);
   * ``run_s``: the message sent at the kill has completed (``GET /v1/runs/{id}``);
   then the node is restarted (``rejoin_s``: healthy again) before the next kill. ``baseline_run_s``: the same
   run with all nodes up.

Everything runs on 127.0.0.1; the table and the JSON go to stdout, the JSON also to
``bench/results/nats_cluster.json``. Single runs on the shared 2-core machine vary; read medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import nats

from treadle.cli.stack import Stack
from treadle.core.envelope import Envelope
from treadle.eventlog import streams
from treadle.eventlog.errors import Conflict
from treadle.eventlog.log import EventLog
from treadle.eventlog.subjects import EVENTS_STREAM
from treadle.ops.servers import NatsCluster, NatsServer
from treadle.ops.tokens import TokenStore
from treadle.runtime import broker_urls

ROOT = Path(__file__).resolve().parent
SCRIPT = {"steps": [{"type": "text", "text": "recovered. " * 8, "chunk": 11}]}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def connect(url: str):
    return await nats.connect(
        **broker_urls.parse(url).connect_options(),
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,
        name="treadle-bench",
    )


# --- 1. appends, R1 vs R3 -----------------------------------------------------------------------------------


async def appends(url: str, replicas: int, total: int, actors: int) -> dict:
    nc = await connect(url)
    try:
        await streams.ensure(nc.jetstream(), replicas)
        elog = EventLog(nc)
        now = datetime.now(UTC)

        def envelope(thread: str, k: int) -> Envelope:
            return Envelope(
                id=f"evt_{uuid.uuid4().hex}",
                type="run.warning",
                tenant="bench",
                thread=thread,
                at=now,
                command_id=f"cmd_{k}",
                actor="bench",
                data={"run_id": "run_x", "message": f"n{k}"},
            )

        async def writer(thread: str, n: int, latencies: list[float] | None) -> None:
            seq = 0
            for k in range(n):
                t = time.perf_counter()
                try:
                    seq = await elog.append("bench", thread, seq, [envelope(thread, k)])
                except Conflict as exc:  # not expected: one writer per thread
                    seq = exc.actual_seq or await elog.last_seq("bench", thread)
                if latencies is not None:
                    latencies.append(time.perf_counter() - t)

        await writer("thr_warm", 200, None)
        latencies: list[float] = []
        t0 = time.perf_counter()
        await writer(f"thr_serial{replicas}", total, latencies)
        serial = time.perf_counter() - t0
        per = total // actors
        t0 = time.perf_counter()
        await asyncio.gather(*(writer(f"thr_c{replicas}_{i}", per, None) for i in range(actors)))
        concurrent = time.perf_counter() - t0
        return {
            "replicas": replicas,
            "serial_events_per_s": round(total / serial),
            "serial_p50_us": round(pct(latencies, 0.5) * 1e6),
            "serial_p99_us": round(pct(latencies, 0.99) * 1e6),
            f"actors{actors}_events_per_s": round(per * actors / concurrent),
        }
    finally:
        await nc.close()


async def bench_appends(tmp: Path, total: int, actors: int) -> list[dict]:
    out = []
    async with NatsServer(tmp / "r1") as single:
        log(f"appends on one nats-server (R1): {total} serial, {actors} actors")
        out.append(await appends(single.url, 1, total, actors))
    async with NatsCluster(tmp / "r3") as cluster:
        log(f"appends on a 3-node cluster (R3): {total} serial, {actors} actors")
        out.append(await appends(cluster.url, 3, total, actors))
    return out


# --- 2. recovery from a node kill ---------------------------------------------------------------------------


async def connected_workers(http: httpx.AsyncClient, cluster: NatsCluster) -> set[str]:
    names: set[str] = set()
    for node in cluster.nodes:
        if node.pid is None:
            continue
        try:
            connz = (await http.get(f"http://127.0.0.1:{node.http_port}/connz?limit=1024")).json()
        except httpx.HTTPError:
            continue
        names.update(c.get("name", "") for c in connz.get("connections") or [])
    return {n for n in names if n.startswith("treadle-") and n not in ("treadle-bench", "treadle-cli")}


async def timed(t0: float, predicate, poll: float = 0.02, timeout: float = 120.0) -> float:
    while not await predicate():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("no recovery within the timeout")
        await asyncio.sleep(poll)  # polling what is measured
    return round(time.monotonic() - t0, 3)


async def bench_recovery(tmp: Path, kills: int) -> dict:
    async with Stack(tmp / "stack", nats_cluster=3, on_output=lambda name, line: None) as stack:
        cluster = stack.nats
        assert isinstance(cluster, NatsCluster)
        nc = await connect(stack.nats_url)
        js = nc.jetstream()
        probe = nc.jetstream(timeout=0.25)
        token = await TokenStore(js).create("bench", "bench")
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx.AsyncClient(base_url=stack.api_url, headers=headers, timeout=10) as api,
            httpx.AsyncClient(timeout=2) as monitor,
        ):
            thread = (await api.post("/v1/threads", json={"title": "recovery"})).json()["thread_id"]

            async def run_once() -> str:
                key = uuid.uuid4().hex
                while True:  # repeat with the same key while the API is unavailable
                    try:
                        r = await api.post(
                            f"/v1/threads/{thread}/messages",
                            headers={"Idempotency-Key": key},
                            json={"text": "go", "script": SCRIPT, "mode": "queue_after_active"},
                        )
                        if r.status_code == 202:
                            return r.json()["run_id"]
                    except httpx.HTTPError:
                        pass
                    await asyncio.sleep(0.05)  # client backoff

            async def completed(run_id: str) -> bool:
                try:
                    r = await api.get(f"/v1/runs/{run_id}")
                except httpx.HTTPError:
                    return False
                return r.status_code == 200 and r.json()["status"] == "completed"

            async def one_run() -> float:
                t0 = time.monotonic()
                run_id = await run_once()
                return await timed(t0, lambda: completed(run_id))

            workers = await connected_workers(monitor, cluster)
            baseline = [await one_run() for _ in range(5)]
            rounds = []
            for k in range(kills):
                leader = (await js.stream_info(EVENTS_STREAM)).cluster.leader
                victim = cluster.node(leader)
                t0 = time.monotonic()
                victim.kill()

                async def new_leader() -> bool:
                    try:  # a short timeout: a request sent mid-election is not answered at all
                        info = await probe.stream_info(EVENTS_STREAM)
                    except Exception:
                        return False
                    return info.cluster.leader not in (None, leader)  # noqa: B023 (awaited in this round)

                async def all_workers() -> bool:
                    return await connected_workers(monitor, cluster) >= workers

                async def sent_at_the_kill() -> float:
                    run_id = await run_once()
                    return await timed(t0, lambda: completed(run_id))  # noqa: B023 (awaited in this round)

                leader_s, workers_s, run_s = await asyncio.gather(
                    timed(t0, new_leader), timed(t0, all_workers), sent_at_the_kill()
                )
                t1 = time.monotonic()
                await victim.start()
                await cluster.wait_healthy(timeout=120)
                rejoin_s = round(time.monotonic() - t1, 3)
                rounds.append(
                    {
                        "killed": leader,
                        "leader_s": leader_s,
                        "workers_s": workers_s,
                        "run_s": run_s,
                        "rejoin_s": rejoin_s,
                    }
                )
                log(f"kill {k + 1}: {rounds[-1]}")
        await nc.close()
    return {
        "workers": sorted(workers),
        "baseline_run_s": baseline,
        "rounds": rounds,
        "median": {m: statistics.median(r[m] for r in rounds) for m in ("leader_s", "workers_s", "run_s", "rejoin_s")},
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--actors", type=int, default=20)
    parser.add_argument("--skip-appends", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="treadle-bench-cluster-") as tmp:
        result: dict = {"at": datetime.now(UTC).isoformat()}
        if not args.skip_appends:
            result["appends"] = await bench_appends(Path(tmp), args.appends, args.actors)
        result["recovery"] = await bench_recovery(Path(tmp), args.kills)
    print("\nappends (EventLog.append, single events, OCC + Nats-Msg-Id)")
    for row in result.get("appends", []):
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    rec = result["recovery"]
    print(f"\nrecovery from SIGKILL of the TREADLE_EVENTS leader ({len(rec['rounds'])} kills; seconds from the kill)")
    print(f"  baseline run (all nodes up): median {statistics.median(rec['baseline_run_s']):.3f}s")
    for r in rec["rounds"]:
        print(
            f"  killed {r['killed']}: new leader {r['leader_s']}s · workers reconnected {r['workers_s']}s · "
            f"run sent at the kill completed {r['run_s']}s · node rejoined {r['rejoin_s']}s after restart"
        )
    print(f"  median: {rec['median']}")
    out = json.dumps(result, indent=2)
    print(out)
    (ROOT / "results").mkdir(exist_ok=True)
    (ROOT / "results" / "nats_cluster.json").write_text(out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
