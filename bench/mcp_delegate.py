"""What a delegation costs its caller (issue 21, part 3): p50/p95 of a ``delegate_task`` (async) call, of the
``task_status`` call right after it, and of the pair, through ``/mcp`` (the official ``mcp`` client) on an
embedded stack (its own nats-server, redis-server and workers) on this machine. Each delegation makes a child
thread and its first run (the scripted provider's short reply), so this is the whole write path: the gateway's
idempotency record, the coordinator's decision, the child's two appends and the parent's node; a
``thread_start`` with a first message (a thread and its run too, as two commands) is measured alongside.

    .venv/bin/python bench/mcp_delegate.py [--calls 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.mcp_client import call, mcp_session  # noqa: E402
from treadle.cli.stack import Stack  # noqa: E402
from treadle.client import TreadleClient  # noqa: E402
from treadle.core.policy import MAX_QUOTA, TenantPolicy  # noqa: E402
from treadle.ops.policies import PolicyStore  # noqa: E402
from treadle.ops.tokens import TokenStore  # noqa: E402

HANG = {"steps": [{"type": "hang"}]}


def _line(label: str, walls: list[float]) -> None:
    walls = sorted(walls)
    p50, p95 = statistics.median(walls), walls[int(len(walls) * 0.95) - 1]
    print(f"{label:<34} p50 {p50 * 1000:7.2f} ms   p95 {p95 * 1000:7.2f} ms   ({len(walls)} calls)")


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with Stack(Path(tmp), on_output=lambda *_: None) as stack:
            nc = await nats.connect(stack.nats_url)
            token = await TokenStore(nc.jetstream()).create("bench", "alice")
            unbounded = TenantPolicy(max_children_per_run=MAX_QUOTA, max_running_children=MAX_QUOTA)
            await PolicyStore(nc.jetstream()).put("bench", unbounded, actor="bench")
            client = TreadleClient(stack.api_url, token, timeout=30)
            parent = (await client.request("POST", "/v1/threads", json={"title": "parent"})).json()["thread_id"]
            sent = await client.request("POST", f"/v1/threads/{parent}/messages", json={"text": "go", "script": HANG})
            await client.wait_run(sent.json()["run_id"], 30, statuses=("running",))
            delegated, status, pairs, started = [], [], [], []
            async with mcp_session(stack.api_url, token) as mcp:
                for i in range(calls + 10):  # the first 10 warm the path
                    t0 = time.perf_counter()
                    made = await call(mcp, "delegate_task", parent_thread_id=parent, task=f"task {i}")
                    t1 = time.perf_counter()
                    await call(mcp, "task_status", task_id=made["task_id"])
                    t2 = time.perf_counter()
                    await call(mcp, "thread_start", title=f"plain {i}", text=f"task {i}")
                    t3 = time.perf_counter()
                    if i >= 10:
                        delegated.append(t1 - t0)
                        status.append(t2 - t1)
                        pairs.append(t2 - t0)
                        started.append(t3 - t2)
            _line("MCP delegate_task (async)", delegated)
            _line("MCP task_status", status)
            _line("delegate_task + task_status", pairs)
            _line("thread_start + text (compare)", started)
            await client.aclose()
            await nc.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=100)
    asyncio.run(main(parser.parse_args().calls))
