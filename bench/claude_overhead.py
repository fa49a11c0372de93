"""Treadle's per-turn overhead on top of Claude Code (not a test; numbers for the issue note).

    scripts/loopback-only.sh .venv/bin/python bench/claude_overhead.py [--turns 20]

Both sides run the real Claude Code CLI against the mock Messages API of ``tests/claude/mock_api.py`` on
127.0.0.1, with the same one-text-block answer:

* direct: ``ClaudeAdapter.run_turn`` on an open adapter (what Claude Code itself costs, plus the adapter);
* HTTP: ``POST /v1/threads/{id}/messages`` on an embedded stack (six worker processes, nats-server,
  redis-server), until ``GET /v1/runs/{id}`` says completed (``TreadleClient.wait_run``, which follows the
  thread's SSE stream): the whole product path, checkpoint included.

The first turn of each side (CLI start, session placement) is reported apart from the warm turns. Warm turns
alternate between the two sides; the overhead is the median of the paired differences.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.claude.mock_api
sys.path.insert(0, str(ROOT / "bench"))

import nats  # noqa: E402
from codex_overhead import direct_workspace  # noqa: E402
from pydantic import SecretStr  # noqa: E402

from tests.claude.mock_api import MockMessagesApi  # noqa: E402
from treadle.cli.stack import Stack  # noqa: E402
from treadle.client.http import TreadleClient  # noqa: E402
from treadle.core.ids import IdFactory  # noqa: E402
from treadle.ops.tokens import TokenStore  # noqa: E402
from treadle.providers.base import Turn  # noqa: E402
from treadle.providers.claude import ClaudeAdapter  # noqa: E402
from treadle.providers.claude.settings import ClaudeSettings  # noqa: E402
from treadle.providers.protocol import PlaceSession  # noqa: E402


class NullSink:
    async def event(self, body) -> None:
        pass

    async def text(self, message_id, node_id, chunk) -> None:
        pass

    async def text_done(self, message_id, node_id, text) -> None:
        pass


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered) * 1000, 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1),
        "min_ms": round(ordered[0] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


class Direct:
    """An open adapter on its own workspace: a turn is ``run_turn`` to its end."""

    def __init__(self, api: MockMessagesApi, root: Path) -> None:
        workspace = direct_workspace(root / "direct-workspace")
        request = PlaceSession(
            tenant="bench",
            thread="thr_bench",
            provider="claude",
            session_id="ps_bench",
            provider_thread_id="pth_bench",
            workspace="w",
        )
        self.adapter = ClaudeAdapter(
            workspace,
            request,
            root / "direct-state" / "hosts" / "ps_bench",
            settings=ClaudeSettings(base_url=api.url, api_key=SecretStr("sk-ant-mock"), max_retries=0),
        )
        self._turns = 0

    async def open(self) -> None:
        await self.adapter.open_thread(None, "unused")

    async def turn(self) -> float:
        self._turns += 1
        n = self._turns
        turn = Turn(
            run_id="run",
            attempt_id=f"att_{n}",
            root_node_id="node",
            text=f"#text ping {n}",
            script=None,
            ids=IdFactory(f"att_{n}", 0),
        )
        t0 = time.perf_counter()
        await self.adapter.run_turn(turn, NullSink())
        return time.perf_counter() - t0


class OverHttp:
    """A Claude thread on an embedded stack: a turn is a message sent until its run is completed."""

    def __init__(self, client: TreadleClient) -> None:
        self.client = client
        self.thread = ""
        self._turns = 0

    async def open(self) -> None:
        self.thread = (await self.client.create_thread(title="bench", provider="claude"))["thread_id"]

    async def turn(self) -> float:
        self._turns += 1
        t0 = time.perf_counter()
        sent = await self.client.send(self.thread, f"#text ping {self._turns}")
        run = await self.client.wait_run(sent["run_id"], timeout=120)
        elapsed = time.perf_counter() - t0
        if run["status"] != "completed":
            raise SystemExit(f"run {self._turns} ended {run['status']}: {run.get('error')}")
        return elapsed


async def measure(api: MockMessagesApi, root: Path, turns: int) -> dict:
    env = {
        "TREADLE_CLAUDE_BASE_URL": api.url,
        "TREADLE_CLAUDE_API_KEY": "sk-ant-mock",
        "TREADLE_CLAUDE_MAX_RETRIES": "0",
        "TREADLE_LOG_LEVEL": "WARNING",
    }
    direct = Direct(api, root)
    async with Stack(root / "stack", env=env, on_output=lambda name, line: None) as stack:
        nc = await nats.connect(stack.nats_url)
        token = await TokenStore(nc.jetstream()).create("bench", "alice")
        await nc.close()
        async with TreadleClient(stack.api_url, token, timeout=30) as client:
            http = OverHttp(client)
            t0 = time.perf_counter()
            await direct.open()
            await direct.turn()
            d_first = time.perf_counter() - t0  # the CLI's start included
            t0 = time.perf_counter()
            await http.open()
            await http.turn()
            h_first = time.perf_counter() - t0  # session placement and the CLI's start included
            # Warm turns alternate (direct, HTTP): both sides of a pair see the same machine load, which on a
            # shared box moves more than the overhead being measured.
            d_warm, h_warm = [], []
            for _ in range(turns):
                d_warm.append(await direct.turn())
                h_warm.append(await http.turn())
    await direct.adapter.close()
    return {
        "direct": {"first_turn_ms": round(d_first * 1000, 1), "warm": summary(d_warm)},
        "http": {"first_turn_ms": round(h_first * 1000, 1), "warm": summary(h_warm)},
        "overhead_warm_median_ms": round(statistics.median(h - d for h, d in zip(h_warm, d_warm)) * 1000, 1),
        "overhead_first_turn_ms": round((h_first - d_first) * 1000, 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="claude-bench-") as tmp:
        async with MockMessagesApi() as api:
            result = await measure(api, Path(tmp), args.turns)
    result["load_average_1m"] = round(os.getloadavg()[0], 2)  # how shared the machine was
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
