"""Treadle's per-turn overhead on top of Codex: the same plain turn, driven directly through
``CodexAdapter`` and through the HTTP API of a private stack with real workers, against the test tree's
mock Responses API on 127.0.0.1 (so model time is the same, and small, on both paths).

    scripts/loopback-only.sh .venv/bin/python bench/codex_overhead.py [--turns 20] [--direct-sandbox]

Direct: ``run_turn`` called → ``TurnCompleted`` reported (one app-server, one thread).
HTTP: ``POST /v1/threads/{id}/messages`` sent → ``run.completed`` seen on the thread's SSE stream (one
thread; the provider session stays warm between runs, as in production). The two paths alternate turn by
turn, so a busy machine slows both alike; the paired difference is the steadier number.
The difference of the medians is what Treadle adds per turn: events through NATS, the supervisor's
fold, the checkpoint (git) before the run completes, projections and the gateway.

``--direct-sandbox``: the direct app-server runs in the host's sandbox too (its own, under the same cgroup tree
and weight): on a machine others load, a sandboxed runtime and a bare one get different CPU shares, and the
difference would be read as Treadle's.

First turns (issue 38): the tenant's first thread on the host, its message sent at once (its runtime starts when
the thread is created); a thread's message sent 1.5 s after its creation; the tenant's next thread, sent at once
(served by a spare runtime, provider_host/spares.py; TREADLE_PROVIDER_HOST_SPARE_RUNTIMES=0 to compare without).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.codex.codex_mock
sys.path.insert(0, str(ROOT / "bench"))

import nats  # noqa: E402
from pydantic import SecretStr  # noqa: E402
from sampling import Procs  # noqa: E402

from tests.codex.codex_mock import MockResponses, Text  # noqa: E402
from treadle.cli.stack import Stack  # noqa: E402
from treadle.client.http import TreadleClient  # noqa: E402
from treadle.core import provider_events as pe  # noqa: E402
from treadle.core.ids import IdFactory  # noqa: E402
from treadle.ops.tokens import TokenStore  # noqa: E402
from treadle.providers.base import Turn  # noqa: E402
from treadle.providers.codex import CodexAdapter, CodexSettings  # noqa: E402
from treadle.providers.protocol import PlaceSession  # noqa: E402
from treadle.sandbox.host import Sandbox, SandboxSettings  # noqa: E402
from treadle.sandbox.identity import TenantIdentities  # noqa: E402

REPLY = "A short plain reply from the mock model."
FIRST: dict = {}  # first turn of each path, ms
CPU: dict = {}  # ms of CPU per warm turn (both paths), by process
# The direct runtime's tenant: never the stack's ("bench"). Codex keeps one home per tenant, and a home shared with
# the root-run direct app-server gets directories the sandboxed runtime cannot write: it then fails to save its
# transcript every turn ("Permission denied"), which made its turns faster than a working runtime's.
DIRECT_TENANT = "direct"
TYPING = 1.5  # s between a thread's creation and its first message: a user typing it


def direct_workspace(path: Path) -> Path:
    """The directly driven runtime's workspace, made as a thread's new one is: a git repository
    (checkpoints/git.py). Codex runs git for every turn's context there (about 10 ms of its CPU here), so in a
    plain directory that work would be counted as Treadle's."""
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    return path


class Sink:
    def __init__(self) -> None:
        self.done = asyncio.Event()

    async def event(self, body: pe.Body) -> None:
        if isinstance(body, pe.TurnCompleted):
            self.done.set()

    async def text(self, *args) -> None: ...
    async def text_done(self, *args) -> None: ...


def env_for(mock: MockResponses, homes: Path) -> dict[str, str]:
    return {
        "TREADLE_CODEX_BASE_URL": mock.base_url,
        "TREADLE_CODEX_API_KEY_ENV": "BENCH_MODEL_KEY",
        "TREADLE_CODEX_API_KEY": "sk-mock",
        "TREADLE_CODEX_HOME_ROOT": str(homes),
    }


class Direct:
    """One app-server and thread driven through ``CodexAdapter``."""

    def __init__(self, mock: MockResponses, homes: Path, work: Path, sandboxed: bool = False) -> None:
        workspace = work / "direct-ws"
        sandbox = None
        if sandboxed:  # the layout a host's sandbox expects: <workspaces>/<tenant>/<workspace>, no links on the way
            homes = homes.resolve()
            sandbox = Sandbox(SandboxSettings(mode="on"), TenantIdentities(homes / "ws"), homes / "rt")
            assert sandbox.start().ok, sandbox.result
            workspace = homes / "ws" / DIRECT_TENANT / "direct-ws"
        direct_workspace(workspace)
        settings = CodexSettings(
            base_url=mock.base_url, api_key_env="BENCH_MODEL_KEY", api_key=SecretStr("sk-mock"), home_root=homes
        )
        request = PlaceSession(
            tenant=DIRECT_TENANT,
            thread="thr",
            provider="codex",
            session_id="ps_bench",
            provider_thread_id="pth_bench",
            workspace=str(workspace),
        )
        self.adapter = CodexAdapter(workspace, request, work / "rt" / "ps_bench", settings, sandbox=sandbox)
        self.n = 0

    async def turn(self, text: str) -> float:
        self.n += 1
        turn = Turn(
            run_id=f"run_{self.n}",
            attempt_id=f"att_{self.n}",
            root_node_id=f"node_{self.n}",
            text=text,
            script=None,
            ids=IdFactory(f"att_{self.n}", 1_700_000_000_000 + self.n),
        )
        start = time.perf_counter()
        await self.adapter.run_turn(turn, Sink())
        return time.perf_counter() - start


class OverHttp:
    """One Treadle thread on a private stack; a run is timed from POST to ``run.completed`` on SSE."""

    def __init__(self, client: TreadleClient) -> None:
        self.client = client
        self.waiting: dict[str, asyncio.Future] = {}

    async def open(self) -> None:
        self.thread = (await self.client.create_thread(provider="codex"))["thread_id"]
        connected = asyncio.Event()
        self.follower = asyncio.create_task(self._follow(connected))
        await connected.wait()

    async def _follow(self, connected: asyncio.Event) -> None:
        async for event in self.client.events(self.thread, connected=connected):
            if event.event in ("run.completed", "run.failed"):
                future = self.waiting.get(event.json()["data"]["run_id"])
                if future and not future.done():
                    future.set_result((event.event, time.perf_counter()))

    async def turn(self, text: str) -> float:
        start = time.perf_counter()
        sent = await self.client.send(self.thread, text)
        future = self.waiting.setdefault(sent["run_id"], asyncio.get_running_loop().create_future())
        kind, end = await asyncio.wait_for(future, 60)
        assert kind == "run.completed", kind
        return end - start


async def measure(
    mock: MockResponses, homes: Path, work: Path, turns: int, sandboxed: bool
) -> tuple[list[float], list[float]]:
    """Turns alternate between the two paths, so both see the same machine load. The first turn of each is kept
    in ``FIRST``: the direct one on its started app-server, alone on the machine; over HTTP the message sent as
    soon as its thread exists (the runtime's start then overlaps only the SSE connection: session placement and,
    unless TREADLE_SANDBOX=off, the sandbox are in it); then a thread's first message sent after a user's typing;
    then the tenant's next thread, its message sent at once (a spare runtime of the tenant serves it)."""
    direct_times, http_times = [], []
    async with Stack(work / "stack", env=env_for(mock, homes), on_output=lambda *a: None) as stack:
        nc = await nats.connect(stack.nats_url)
        token = await TokenStore(nc.jetstream()).create("bench", "alice")
        await nc.close()
        async with TreadleClient(stack.api_url, token, timeout=30) as client:
            direct, http = Direct(mock, homes, work, sandboxed), OverHttp(client)
            await direct.adapter.open_thread(None, "unused")
            # Before the HTTP thread exists: its runtime's start (at the thread's creation) must not overlap it
            FIRST["direct_ms"] = round(await direct.turn("bench 0") * 1000, 1)
            await http.open()
            try:
                FIRST["http_ms"] = round(await http.turn("bench 0") * 1000, 1)
                procs = Procs(stack)
                for n in range(1, turns + 2):  # two warm-up turns each
                    if n == 2:
                        cpu0 = procs.cpu_apart()
                    d = await direct.turn(f"bench {n}")
                    h = await http.turn(f"bench {n}")
                    if n >= 2:
                        direct_times.append(d)
                        http_times.append(h)
                cpu1 = procs.cpu_apart()
                CPU.update({k: round((cpu1[k] - cpu0[k]) * 1000 / turns, 2) for k in cpu0 if k != "bench-client"})
                # A user creates a thread, then types: its runtime starts meanwhile (supervisor/first_session.py)
                typed = OverHttp(client)
                await typed.open()
                await asyncio.sleep(TYPING)
                FIRST["http_after_typing_ms"] = round(await typed.turn("bench typed") * 1000, 1)
                typed.follower.cancel()
                # The tenant's next thread, its message sent at once: a spare (provider_host/spares.py) started
                # after the earlier threads' runtimes serves it. Timed from the thread's creation request.
                await asyncio.sleep(TYPING)  # the spare's start, as between a user's threads
                following = OverHttp(client)
                start = time.perf_counter()
                await following.open()
                FIRST["http_next_thread_ms"] = round(await following.turn("bench next") * 1000, 1)
                FIRST["http_next_thread_from_creation_ms"] = round((time.perf_counter() - start) * 1000, 1)
                following.follower.cancel()
            finally:
                http.follower.cancel()
                await direct.adapter.close()
    return direct_times, http_times


def summary(times: list[float]) -> dict:
    ms = sorted(t * 1000 for t in times)
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "p10_ms": round(ms[len(ms) // 10], 1),
        "p90_ms": round(ms[(len(ms) * 9) // 10], 1),
        "min_ms": round(ms[0], 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--direct-sandbox", action="store_true", help="the direct app-server sandboxed as well")
    args = parser.parse_args()
    mock = await MockResponses().start()
    for n in range(args.turns + 2):
        mock.on(f"bench {n}", [Text(REPLY, chunks=3)])
    mock.on("bench typed", [Text(REPLY, chunks=3)])
    mock.on("bench next", [Text(REPLY, chunks=3)])
    homes = ROOT / ".tools" / "bench-homes" / uuid.uuid4().hex[:8]  # CODEX_HOME must not be under /tmp
    work = Path(tempfile.mkdtemp(prefix="codex-bench-"))
    try:
        direct_times, http_times = await measure(mock, homes, work, args.turns, args.direct_sandbox)
    finally:
        await mock.stop()
        shutil.rmtree(homes, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    d, h = summary(direct_times), summary(http_times)
    paired = sorted((b - a) * 1000 for a, b in zip(direct_times, http_times))
    result = {
        "direct_adapter": d,
        "http_api": h,
        "overhead_median_ms": round(h["median_ms"] - d["median_ms"], 1),
        "overhead_paired_median_ms": round(statistics.median(paired), 1),
        "first_turn": FIRST,
        "cpu_ms_per_turn": CPU,
        "sandbox": os.environ.get("TREADLE_SANDBOX", "on"),
        "direct_sandbox": args.direct_sandbox,
    }
    print(f"{'path':<16}{'n':>4}{'median':>10}{'p10':>10}{'p90':>10}{'min':>10}   (ms)")
    for name, s in (("direct adapter", d), ("HTTP API", h)):
        print(f"{name:<16}{s['n']:>4}{s['median_ms']:>10}{s['p10_ms']:>10}{s['p90_ms']:>10}{s['min_ms']:>10}")
    print(
        f"Treadle overhead per turn: {result['overhead_median_ms']} ms (difference of medians), "
        f"{result['overhead_paired_median_ms']} ms (median of paired differences)"
    )
    print(
        f"first turn: direct {FIRST.get('direct_ms')} ms, HTTP {FIRST.get('http_ms')} ms sent at once "
        f"(session start; sandbox {result['sandbox']}); HTTP {FIRST.get('http_after_typing_ms')} ms when sent "
        f"{TYPING} s after the thread's creation; the tenant's next thread, sent at once: "
        f"{FIRST.get('http_next_thread_ms')} ms"
    )
    treadle = sum(v for k, v in CPU.items() if k not in ("runtimes", "direct runtime"))
    print(
        f"CPU per warm turn, ms: Treadle {treadle:.1f} ("
        + ", ".join(f"{k} {v}" for k, v in CPU.items() if k not in ("runtimes", "direct runtime"))
        + f"); the runtime {CPU.get('runtimes')} sandboxed, {CPU.get('direct runtime')} driven directly"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
