"""Treadle's per-turn overhead on top of a real ACP agent: the same plain turn driven directly through
``AcpAdapter`` and through the HTTP API of a private stack with real workers, against the test tree's mock
model APIs on 127.0.0.1 (model time is the same, and small, on both paths).

    scripts/loopback-only.sh .venv/bin/python bench/acp_overhead.py [--agent codex|claude] [--turns 20]

Direct: ``run_turn`` called -> ``TurnCompleted`` (one agent process, one session, no sandbox).
HTTP: ``POST /v1/threads/{id}/messages`` -> ``run.completed`` on the thread's SSE stream (one warm session, in the
sandbox unless TREADLE_SANDBOX=off). The paths alternate turn by turn; the paired difference is what Treadle adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import nats  # noqa: E402
from codex_overhead import DIRECT_TENANT, OverHttp, Sink, direct_workspace, summary  # noqa: E402

from tests.acp.acp_support import acp_env, acp_settings  # noqa: E402
from tests.claude.mock_api import MockMessagesApi  # noqa: E402
from tests.codex.codex_mock import MockResponses, Text  # noqa: E402
from treadle.cli.stack import Stack  # noqa: E402
from treadle.client.http import TreadleClient  # noqa: E402
from treadle.core.ids import IdFactory  # noqa: E402
from treadle.ops.tokens import TokenStore  # noqa: E402
from treadle.providers.acp import AcpAdapter  # noqa: E402
from treadle.providers.base import Turn  # noqa: E402
from treadle.providers.protocol import PlaceSession  # noqa: E402


class AcpOverHttp(OverHttp):
    """As Codex's, and a run that ends before its POST answered is not missed (an end seen early is kept)."""

    def __init__(self, client: TreadleClient, provider: str) -> None:
        super().__init__(client)
        self.provider = provider
        self.ended: dict[str, tuple[str, float]] = {}

    async def _follow(self, connected: asyncio.Event) -> None:
        async for event in self.client.events(self.thread, connected=connected):
            if event.event in ("run.completed", "run.failed"):
                run_id = event.json()["data"]["run_id"]
                self.ended[run_id] = (event.event, time.perf_counter())
                future = self.waiting.get(run_id)
                if future and not future.done():
                    future.set_result(self.ended[run_id])

    async def turn(self, text: str) -> float:
        start = time.perf_counter()
        sent = await self.client.send(self.thread, text)
        future = self.waiting.setdefault(sent["run_id"], asyncio.get_running_loop().create_future())
        if sent["run_id"] in self.ended and not future.done():
            future.set_result(self.ended[sent["run_id"]])
        kind, end = await asyncio.wait_for(future, 60)
        assert kind == "run.completed", kind
        return end - start

    async def open(self) -> None:
        self.thread = (await self.client.create_thread(provider=self.provider))["thread_id"]
        connected = asyncio.Event()
        self.follower = asyncio.create_task(self._follow(connected))
        await connected.wait()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", choices=["codex", "claude"], default="codex")
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    provider = f"acp-{args.agent}"
    codex = await MockResponses().start()
    for n in range(args.turns + 2):
        codex.on(f"bench {n}", [Text("A short plain reply from the mock model.", chunks=3)])
    homes = Path.home() / ".cache" / "treadle-bench" / uuid.uuid4().hex[:8]  # codex refuses a home under /tmp
    work = Path(tempfile.mkdtemp(prefix="acp-bench-"))
    direct_times, http_times, first = [], [], {}
    try:
        async with MockMessagesApi() as claude:
            prefix = "#text " if args.agent == "claude" else ""
            async with Stack(work / "stack", env=acp_env(claude, codex, homes), on_output=lambda *a: None) as stack:
                nc = await nats.connect(stack.nats_url)
                token = await TokenStore(nc.jetstream()).create("bench", "alice")
                await nc.close()
                async with TreadleClient(stack.api_url, token, timeout=30) as client:
                    ws = direct_workspace(work / "direct-ws")
                    request = PlaceSession(
                        tenant=DIRECT_TENANT, thread="thr", provider=provider, session_id="ps_bench",
                        provider_thread_id="pth", workspace=str(ws),
                    )  # fmt: skip
                    adapter = AcpAdapter(ws, request, work / "rt" / "ps_bench", acp_settings(claude, codex, homes))
                    await adapter.open_thread(None, "unused")
                    http = AcpOverHttp(client, provider)
                    await http.open()
                    try:
                        for n in range(args.turns + 2):
                            turn = Turn(
                                run_id=f"run_{n}", attempt_id=f"att_{n}", root_node_id=f"node_{n}",
                                text=f"{prefix}bench {n}", script=None, ids=IdFactory(f"att_{n}", 1_700_000_000_000 + n),
                            )  # fmt: skip
                            start = time.perf_counter()
                            await adapter.run_turn(turn, Sink())
                            d = time.perf_counter() - start
                            h = await http.turn(f"{prefix}bench {n}")
                            if n == 0:
                                first = {"direct_ms": round(d * 1000, 1), "http_ms": round(h * 1000, 1)}
                            if n >= 2:
                                direct_times.append(d)
                                http_times.append(h)
                    finally:
                        http.follower.cancel()
                        await adapter.close()
    finally:
        await codex.stop()
        shutil.rmtree(homes, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    direct_summary, http_summary = summary(direct_times), summary(http_times)
    paired = sorted((b - a) * 1000 for a, b in zip(direct_times, http_times, strict=True))
    print(
        json.dumps(
            {
                "agent": provider,
                "direct_adapter": direct_summary,
                "http_api": http_summary,
                "overhead_median_ms": round(http_summary["median_ms"] - direct_summary["median_ms"], 1),
                "overhead_paired_median_ms": round(statistics.median(paired), 1),
                "first_turn": first,
                "sandbox": os.environ.get("TREADLE_SANDBOX", "on"),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
