"""Treadle's per-turn overhead on top of Codex: the same plain turn, driven directly through
``CodexAdapter`` and through the HTTP API of a private stack with real workers, against the test tree's
mock Responses API on 127.0.0.1 (so model time is the same, and small, on both paths).

    scripts/loopback-only.sh .venv/bin/python bench/codex_overhead.py [--turns 20]

Direct: ``run_turn`` called → ``TurnCompleted`` reported (one app-server, one thread, turns back to back).
HTTP: ``POST /v1/threads/{id}/messages`` sent → ``run.completed`` seen on the thread's SSE stream (one
thread, runs back to back; the provider session stays warm between runs, as in production).
The difference of the medians is what Treadle adds per turn: events through NATS, the supervisor's
fold, the checkpoint (git) before the run completes, projections and the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "codex"))

import nats  # noqa: E402

from codex_mock import MockResponses, Text  # noqa: E402
from treadle.cli.stack import Stack  # noqa: E402
from treadle.client.http import TreadleClient  # noqa: E402
from treadle.domain import provider_events as pe  # noqa: E402
from treadle.domain.ids import IdFactory  # noqa: E402
from treadle.providers.base import Turn  # noqa: E402
from treadle.providers.codex import CodexAdapter, CodexSettings  # noqa: E402
from treadle.providers.protocol import PlaceSession  # noqa: E402
from treadle.runtime.tokens import TokenStore  # noqa: E402

REPLY = "A short plain reply from the mock model."


class Sink:
    def __init__(self) -> None:
        self.done = asyncio.Event()

    async def event(self, body: pe.Body) -> None:
        if isinstance(body, pe.TurnCompleted):
            self.done.set()

    async def text(self, *args) -> None: ...
    async def text_done(self, *args) -> None: ...


def env_for(mock: MockResponses, homes: Path) -> dict[str, str]:
    return {"TREADLE_CODEX_BASE_URL": mock.base_url, "TREADLE_CODEX_API_KEY_ENV": "TREADLE_BENCH_MODEL_KEY",
            "TREADLE_CODEX_API_KEY": "sk-mock", "TREADLE_CODEX_HOME_ROOT": str(homes)}


async def direct(mock: MockResponses, homes: Path, work: Path, turns: int) -> list[float]:
    workspace = work / "direct-ws"
    workspace.mkdir()
    settings = CodexSettings(base_url=mock.base_url, api_key_env="TREADLE_BENCH_MODEL_KEY", api_key="sk-mock",
                             home_root=homes)
    request = PlaceSession(tenant="bench", thread="thr", provider="codex", session_id="ps_bench",
                           provider_thread_id="pth_bench", workspace=str(workspace))
    adapter = CodexAdapter(workspace, request, work / "rt" / "ps_bench", settings)
    await adapter.open_thread(None, "unused")
    times = []
    try:
        for n in range(turns + 2):  # two warm-up turns
            turn = Turn(run_id=f"run_{n}", attempt_id=f"att_{n}", root_node_id=f"node_{n}", text=f"bench {n}",
                        script=None, ids=IdFactory(f"att_{n}", 1_700_000_000_000 + n))
            start = time.perf_counter()
            await adapter.run_turn(turn, Sink())
            if n >= 2:
                times.append(time.perf_counter() - start)
    finally:
        await adapter.close()
    return times


async def over_http(mock: MockResponses, homes: Path, work: Path, turns: int) -> list[float]:
    times = []
    async with Stack(work / "stack", env=env_for(mock, homes), on_output=lambda *a: None) as stack:
        nc = await nats.connect(stack.nats_url)
        token = await TokenStore(nc.jetstream()).create("bench", "alice")
        await nc.close()
        async with TreadleClient(stack.api_url, token, timeout=30) as client:
            thread = (await client.create_thread(provider="codex"))["thread_id"]
            waiting: dict[str, asyncio.Future] = {}
            connected = asyncio.Event()

            async def follow() -> None:
                async for event in client.events(thread, connected=connected):
                    if event.event in ("run.completed", "run.failed"):
                        future = waiting.get(event.json()["data"]["run_id"])
                        if future and not future.done():
                            future.set_result((event.event, time.perf_counter()))

            follower = asyncio.create_task(follow())
            await connected.wait()
            for n in range(turns + 2):
                start = time.perf_counter()
                sent = await client.send(thread, f"bench {n}")
                future = waiting.setdefault(sent["run_id"], asyncio.get_running_loop().create_future())
                kind, end = await asyncio.wait_for(future, 60)
                assert kind == "run.completed", kind
                if n >= 2:
                    times.append(end - start)
            follower.cancel()
    return times


def summary(times: list[float]) -> dict:
    ms = sorted(t * 1000 for t in times)
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 1), "p10_ms": round(ms[len(ms) // 10], 1),
            "p90_ms": round(ms[(len(ms) * 9) // 10], 1), "min_ms": round(ms[0], 1)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    mock = await MockResponses().start()
    for n in range(args.turns + 2):
        mock.on(f"bench {n}", [Text(REPLY, chunks=3)])
    homes = ROOT / ".tools" / "bench-homes" / uuid.uuid4().hex[:8]  # CODEX_HOME must not be under /tmp
    work = Path(tempfile.mkdtemp(prefix="codex-bench-"))
    try:
        d = summary(await direct(mock, homes, work, args.turns))
        h = summary(await over_http(mock, homes, work, args.turns))
    finally:
        await mock.stop()
        shutil.rmtree(homes, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    result = {"direct_adapter": d, "http_api": h, "overhead_median_ms": round(h["median_ms"] - d["median_ms"], 1)}
    print(f"{'path':<16}{'n':>4}{'median':>10}{'p10':>10}{'p90':>10}{'min':>10}   (ms)")
    for name, s in (("direct adapter", d), ("HTTP API", h)):
        print(f"{name:<16}{s['n']:>4}{s['median_ms']:>10}{s['p10_ms']:>10}{s['p90_ms']:>10}{s['min_ms']:>10}")
    print(f"Treadle overhead per turn (median): {result['overhead_median_ms']} ms")
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
