"""What the MCP layer adds to a read (issue 21): p50/p95 of the same read of a thread's messages as an HTTP
GET (the SDK's client) and as an MCP ``thread_read`` call (the official ``mcp`` client, one JSON POST per
call), on an embedded stack (its own nats-server, redis-server and workers) on this machine.

    .venv/bin/python bench/mcp_overhead.py [--calls 300]
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
from treadle.ops.tokens import TokenStore  # noqa: E402


def _line(label: str, walls: list[float]) -> None:
    walls = sorted(walls)
    p50, p95 = statistics.median(walls), walls[int(len(walls) * 0.95) - 1]
    print(f"{label:<34} p50 {p50 * 1000:7.2f} ms   p95 {p95 * 1000:7.2f} ms   ({len(walls)} calls)")


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with Stack(Path(tmp), on_output=lambda *_: None) as stack:
            nc = await nats.connect(stack.nats_url)
            token = await TokenStore(nc.jetstream()).create("bench", "alice")
            client = TreadleClient(stack.api_url, token, timeout=30)
            created = await client.request("POST", "/v1/threads", json={"title": "bench"})
            thread = created.json()["thread_id"]
            sent = (await client.request("POST", f"/v1/threads/{thread}/messages", json={"text": "hi"})).json()
            await client.wait_run(sent["run_id"], 30)
            http, mcp_walls, tool_list = [], [], []
            async with mcp_session(stack.api_url, token) as mcp:
                for _ in range(20):  # warm both paths
                    await client.request("GET", f"/v1/threads/{thread}/messages")
                    await call(mcp, "thread_read", thread_id=thread)
                for _ in range(calls):
                    t0 = time.perf_counter()
                    await client.request("GET", f"/v1/threads/{thread}/messages")
                    t1 = time.perf_counter()
                    await call(mcp, "thread_read", thread_id=thread)
                    t2 = time.perf_counter()
                    await call(mcp, "capabilities")
                    t3 = time.perf_counter()
                    http.append(t1 - t0)
                    mcp_walls.append(t2 - t1)
                    tool_list.append(t3 - t2)
            _line("HTTP GET /v1/threads/{id}/messages", http)
            _line("MCP tools/call thread_read", mcp_walls)
            _line("MCP tools/call capabilities", tool_list)
            print(
                f"MCP overhead (p50 thread_read - p50 GET): {(statistics.median(mcp_walls) - statistics.median(http)) * 1000:.2f} ms"
            )
            await client.aclose()
            await nc.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
