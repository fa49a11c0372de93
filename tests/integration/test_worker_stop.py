"""Issue 6 (a chaos failure): a worker still starting when it gets SIGTERM stops at once. Starting can take a
long time (on a cluster electing leaders after a node loss, every JetStream request waits); a worker that only
heard SIGTERM once started kept the process supervisor waiting for it well past any reasonable stop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import httpx

from helpers import wait_for
from treadle.runtime.servers import find_nats_server, free_port


async def test_a_worker_stopped_while_it_is_still_starting_exits_at_once(tmp_path):
    port, monitor = free_port(), free_port()
    # A real broker without JetStream: the worker connects, then its stream set-up waits for an answer.
    broker = subprocess.Popen([find_nats_server(), "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        async with httpx.AsyncClient(timeout=2) as http:
            async def connected(name: str) -> bool:
                try:
                    conns = (await http.get(f"http://127.0.0.1:{monitor}/connz")).json().get("connections") or []
                except httpx.HTTPError:
                    return False
                return any(c.get("name") == name for c in conns)

            env = {**{k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")},
                   "TREADLE_NATS_URL": f"nats://127.0.0.1:{port}", "TREADLE_STATE_DIR": str(tmp_path)}
            worker = await asyncio.create_subprocess_exec(sys.executable, "-m", "treadle.coordinator", env=env,
                                                          stdout=asyncio.subprocess.PIPE,
                                                          stderr=asyncio.subprocess.STDOUT)
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
