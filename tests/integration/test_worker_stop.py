"""Issue 6 (chaos failures): a worker's graceful stop (SIGTERM) is bounded. A worker still starting stops at
once: starting can take a long time (on a cluster electing leaders after a node loss, every JetStream request
waits), and a worker that only heard SIGTERM once started kept the process supervisor waiting well past any
reasonable stop. A started worker whose broker is away stops within ``TREADLE_<WORKER>_STOP_SECONDS``: its
stop's every request (handing back its partitions, reporting its sessions) would otherwise wait out its
timeout in turn, far past the grace period a process manager allows before SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.helpers import wait_for
from treadle.ops.servers import NatsServer, find_nats_server, free_port

DRAIN_SECONDS = 5  # runtime/worker.py: the connection's drain after the stop is bounded too


async def start_worker(module: str, nats_url: str, state_dir: Path, **settings: str) -> asyncio.subprocess.Process:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")},
        "TREADLE_NATS_URL": nats_url,
        "TREADLE_STATE_DIR": str(state_dir),
        **settings,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )


async def answers(http: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await http.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


async def test_a_worker_stopped_while_it_is_still_starting_exits_at_once(tmp_path):
    port, monitor = free_port(), free_port()
    # A real broker without JetStream: the worker connects, then its stream set-up waits for an answer.
    broker = subprocess.Popen(
        [find_nats_server(), "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = None
    try:
        async with httpx.AsyncClient(timeout=2) as http:

            async def connected(name: str) -> bool:
                try:
                    conns = (await http.get(f"http://127.0.0.1:{monitor}/connz")).json().get("connections") or []
                except httpx.HTTPError:
                    return False
                return any(c.get("name") == name for c in conns)

            worker = await start_worker("treadle.coordinator", f"nats://127.0.0.1:{port}", tmp_path)
            await wait_for(lambda: connected("treadle-coordinator"), timeout=30, what="the worker connected")
            worker.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(worker.communicate(), 15)  # its stream set-up alone would wait 60 s
        assert worker.returncode == 0, out.decode()
        assert b"stopped while starting" in out and b"coordinator started" not in out
    finally:
        if worker is not None and worker.returncode is None:
            worker.kill()
        broker.terminate()
        broker.wait(10)


async def test_a_worker_stopped_while_the_broker_is_away_exits_within_its_stop_seconds(tmp_path):
    """A coordinator holding all its partitions loses its broker, then gets SIGTERM: handing each partition
    back waits out a KV request timeout (about 45 s for the eight partitions, without the bound)."""
    stop_seconds, health = 1, free_port()
    worker = None
    async with NatsServer(tmp_path / "nats") as broker:
        try:
            worker = await start_worker(
                "treadle.coordinator",
                broker.url,
                tmp_path,
                TREADLE_COORDINATOR_STOP_SECONDS=str(stop_seconds),
                TREADLE_COORDINATOR_METRICS_PORT=str(health),
            )
            async with httpx.AsyncClient(timeout=2) as http:
                await wait_for(
                    lambda: answers(http, f"http://127.0.0.1:{health}/readyz"),
                    timeout=30,
                    what="the coordinator consuming its partitions",
                )
            broker.kill()
            worker.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(worker.communicate(), stop_seconds + DRAIN_SECONDS + 5)
        finally:
            if worker is not None and worker.returncode is None:
                worker.kill()
    assert worker.returncode == 0, out.decode()
    assert f"coordinator did not stop within {stop_seconds} s".encode() in out, out.decode()
