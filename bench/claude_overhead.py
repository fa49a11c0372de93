"""Treadle's per-turn overhead on top of Claude Code (not a test; numbers for the issue note).

    scripts/loopback-only.sh .venv/bin/python bench/claude_overhead.py [--turns 20]

Both sides run the real Claude Code CLI against the mock Messages API of ``tests/claude/mock_api.py`` on
127.0.0.1, with the same one-text-block answer:

* direct: ``ClaudeAdapter.run_turn`` on an open adapter (what Claude Code itself costs, plus the adapter);
* HTTP: ``POST /v1/threads/{id}/messages`` on an embedded stack (six worker processes, nats-server,
  redis-server), until ``GET /v1/runs/{id}`` says completed (``TreadleClient.wait_run``, which follows the
  thread's SSE stream): the whole product path, checkpoint included.

The first turn of each side (CLI start, session placement) is reported apart from the warm turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "claude"))

import nats  # noqa: E402

from mock_api import MockMessagesApi  # noqa: E402
from treadle.cli.stack import Stack  # noqa: E402
from treadle.client.http import TreadleClient  # noqa: E402
from treadle.domain.ids import IdFactory  # noqa: E402
from treadle.providers.base import Turn  # noqa: E402
from treadle.providers.claude import ClaudeAdapter  # noqa: E402
from treadle.providers.claude.settings import ClaudeSettings  # noqa: E402
from treadle.providers.protocol import PlaceSession  # noqa: E402
from treadle.runtime.tokens import TokenStore  # noqa: E402


class NullSink:
    async def event(self, body) -> None:
        pass

    async def text(self, message_id, node_id, chunk) -> None:
        pass

    async def text_done(self, message_id, node_id, text) -> None:
        pass


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"n": len(ordered), "median_ms": round(statistics.median(ordered) * 1000, 1),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1),
            "min_ms": round(ordered[0] * 1000, 1), "max_ms": round(ordered[-1] * 1000, 1)}


async def direct(api: MockMessagesApi, root: Path, turns: int) -> tuple[float, list[float]]:
    workspace = root / "direct-workspace"
    workspace.mkdir()
    request = PlaceSession(tenant="bench", thread="thr_bench", provider="claude", session_id="ps_bench",
                           provider_thread_id="pth_bench", workspace="w")
    adapter = ClaudeAdapter(workspace, request, root / "direct-state" / "hosts" / "ps_bench",
                            settings=ClaudeSettings(base_url=api.url, api_key="sk-ant-mock", max_retries=0))
    samples = []
    start = time.perf_counter()
    await adapter.open_thread(None, "unused")
    for i in range(turns + 1):
        turn = Turn(run_id="run", attempt_id=f"att_{i}", root_node_id="node", text=f"#text ping {i}", script=None,
                    ids=IdFactory(f"att_{i}", 0))
        t0 = time.perf_counter()
        await adapter.run_turn(turn, NullSink())
        samples.append(time.perf_counter() - (start if i == 0 else t0))
    await adapter.close()
    return samples[0], samples[1:]


async def over_http(api: MockMessagesApi, root: Path, turns: int) -> tuple[float, list[float]]:
    env = {"TREADLE_CLAUDE_BASE_URL": api.url, "TREADLE_CLAUDE_API_KEY": "sk-ant-mock",
           "TREADLE_CLAUDE_MAX_RETRIES": "0", "TREADLE_LOG_LEVEL": "WARNING"}
    async with Stack(root / "stack", env=env, on_output=lambda name, line: None) as stack:
        nc = await nats.connect(stack.nats_url)
        token = await TokenStore(nc.jetstream()).create("bench", "alice")
        await nc.close()
        async with TreadleClient(stack.api_url, token, timeout=30) as client:
            thread = (await client.create_thread(title="bench", provider="claude"))["thread_id"]
            samples = []
            for i in range(turns + 1):
                t0 = time.perf_counter()
                sent = await client.send(thread, f"#text ping {i}")
                run = await client.wait_run(sent["run_id"], timeout=120)
                samples.append(time.perf_counter() - t0)
                if run["status"] != "completed":
                    raise SystemExit(f"run {i} ended {run['status']}: {run.get('error')}")
    return samples[0], samples[1:]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="claude-bench-") as tmp:
        async with MockMessagesApi() as api:
            d_first, d_warm = await direct(api, Path(tmp), args.turns)
            h_first, h_warm = await over_http(api, Path(tmp), args.turns)
    result = {
        "direct": {"first_turn_ms": round(d_first * 1000, 1), "warm": summary(d_warm)},
        "http": {"first_turn_ms": round(h_first * 1000, 1), "warm": summary(h_warm)},
    }
    result["overhead_warm_median_ms"] = round(result["http"]["warm"]["median_ms"] - result["direct"]["warm"]["median_ms"], 1)
    result["overhead_first_turn_ms"] = round(result["http"]["first_turn_ms"] - result["direct"]["first_turn_ms"], 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
