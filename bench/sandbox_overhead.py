"""What the runtime sandbox costs: the same adapter (Codex, Claude Code) with and without the host's sandbox,
alternating round by round on the same machine, against the test tree's mock model APIs on 127.0.0.1.

    scripts/loopback-only.sh .venv/bin/python bench/sandbox_overhead.py [--rounds 5] [--turns 5]
    scripts/loopback-only.sh .venv/bin/python bench/sandbox_overhead.py --launch [--rounds 9]

start: a new adapter's ``open_thread`` plus its first turn (process start, sandbox preparation: ownership,
cgroups, egress, bwrap, the forwarder); warm: later turns on the open runtime (through the egress path when
sandboxed). Medians in ms.

--launch: what a provider host's warm pool does for a new thread (``warm()`` then ``open_thread``), Codex only,
split into prepare (the host's ``Sandbox.prepare``), spawn to ``initialize`` answered (the launch chain, then
the app-server's own start) and ``thread/start``; the wait a thread's first message can see. Then what taking a
spare costs instead (provider_host/spares.py: started with a placeholder, then ``take_workspace``, which binds the
workspace into the running sandbox, and ``thread/start``), and the memory (PSS) of one spare's processes, idle
past ``initialize``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.codex.codex_mock, tests.claude.mock_api

from pydantic import SecretStr  # noqa: E402

from tests.claude.mock_api import MockMessagesApi  # noqa: E402
from tests.codex.codex_mock import MockResponses  # noqa: E402
from treadle.core import provider_events as pe  # noqa: E402
from treadle.core.ids import IdFactory  # noqa: E402
from treadle.providers.base import Turn  # noqa: E402
from treadle.providers.claude import ClaudeAdapter  # noqa: E402
from treadle.providers.claude.settings import ClaudeSettings  # noqa: E402
from treadle.providers.codex import CodexAdapter, CodexSettings  # noqa: E402
from treadle.providers.protocol import PlaceSession  # noqa: E402
from treadle.sandbox.host import Sandbox, SandboxSettings  # noqa: E402
from treadle.sandbox.identity import TenantIdentities  # noqa: E402


class Sink:
    def __init__(self) -> None:
        self.done: pe.TurnCompleted | None = None

    async def event(self, body) -> None:
        if isinstance(body, pe.TurnCompleted):
            self.done = body

    async def text(self, *a) -> None: ...
    async def text_done(self, *a) -> None: ...


_n = 0


async def turn(adapter, text: str) -> float:
    global _n
    _n += 1
    t = Turn(
        run_id=f"run_{_n}",
        attempt_id=f"att_{_n}",
        root_node_id=f"node_{_n}",
        text=text,
        script=None,
        ids=IdFactory(f"att_{_n}", 1_700_000_000_000 + _n),
    )
    sink = Sink()
    start = time.perf_counter()
    await adapter.run_turn(t, sink)
    assert sink.done is not None and sink.done.status == "completed", sink.done
    return time.perf_counter() - start


def make(kind: str, root: Path, sandbox: Sandbox | None, codex_mock, claude_api, workspace: Path | None = None):
    session = f"ps_{uuid.uuid4().hex[:8]}"
    request = PlaceSession(
        tenant="bench",
        thread="spare" if workspace is not None else "thr",
        provider=kind,
        session_id=session,
        provider_thread_id="pth",
        workspace="w",
        runtime_mode="full_access",
    )
    workspace = workspace or root / "workspaces" / "bench" / "w"
    workspace.mkdir(parents=True, exist_ok=True)
    state = root / "provider-runtimes" / "host-1" / session
    if kind == "codex":
        settings = CodexSettings(
            base_url=codex_mock.base_url,
            api_key_env="BENCH_MODEL_KEY",
            api_key=SecretStr("sk-mock"),
            home_root=root / "codex-homes",
        )
        return CodexAdapter(workspace, request, state, settings, sandbox=sandbox)
    claude = ClaudeSettings(base_url=claude_api.url, api_key=SecretStr("sk-ant-mock"), max_retries=0)
    return ClaudeAdapter(workspace, request, state, settings=claude, sandbox=sandbox)


class TimedSandbox(Sandbox):
    """Records how long each ``prepare`` took (the host's share of a sandboxed launch)."""

    prepared: list[float]

    async def prepare(self, **kwargs):
        start = time.perf_counter()
        try:
            return await super().prepare(**kwargs)
        finally:
            self.prepared.append(time.perf_counter() - start)


def tree_pss_kb(pid: int) -> int:
    """Proportional set size of ``pid`` and every process below it, kB (what one more runtime costs the host)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total


async def spares(root: Path, sandbox: TimedSandbox, rounds: int) -> dict:
    """Spares started as a provider host starts them (a placeholder workspace), then taken: the bind of a thread's
    workspace into the running sandbox, and ``thread/start``; and each idle spare's memory before it is taken."""
    codex_mock = await MockResponses().start()
    times: dict[str, list[float]] = {"attach": [], "thread_start": [], "taken": []}
    pss: list[int] = []
    try:
        for r in range(rounds):
            adapter = make("codex", root, sandbox, codex_mock, None, workspace=root / "spares" / f"spare{r}")
            workspace = root / "workspaces" / "bench" / f"w{r}"
            workspace.mkdir(parents=True, exist_ok=True)
            request = PlaceSession(
                tenant="bench",
                thread=f"thr_{r}",
                provider="codex",
                session_id=f"ps_taken{r}",
                provider_thread_id="pth",
                workspace=f"w{r}",
                runtime_mode="full_access",
            )
            try:
                await adapter.warm()
                await asyncio.sleep(0.5)  # idle, as a spare waits: its memory settled, not a synchronisation
                pss.append(tree_pss_kb(adapter.pid))
                t0 = time.perf_counter()
                await adapter.take_workspace(workspace, request)
                t1 = time.perf_counter()
                await adapter.open_thread(None, "unused")
                t2 = time.perf_counter()
            finally:
                await adapter.close()
            for key, value in zip(times, (t1 - t0, t2 - t1, t2 - t0), strict=True):
                times[key].append(value)
    finally:
        await codex_mock.stop()
    result: dict = {k: round(statistics.median(v) * 1000, 1) for k, v in times.items()}
    return {**result, "pss_mb": round(statistics.median(pss) / 1024, 1), "n": rounds}


async def launches(root: Path, sandbox: TimedSandbox, rounds: int) -> dict:
    """``warm()`` + ``open_thread`` of fresh Codex adapters, unsandboxed and sandboxed alternately."""
    codex_mock = await MockResponses().start()
    phases = ("prepare", "initialize", "thread_start", "launch")
    times: dict[str, dict[str, list[float]]] = {mode: {k: [] for k in phases} for mode in ("off", "on")}
    try:
        for r in range(rounds):
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                adapter = make("codex", root, sandbox if mode == "on" else None, codex_mock, None)
                sandbox.prepared = []
                try:
                    t0 = time.perf_counter()
                    await adapter.warm()
                    t1 = time.perf_counter()
                    await adapter.open_thread(None, "unused")
                    t2 = time.perf_counter()
                finally:
                    await adapter.close()
                prepare = sum(sandbox.prepared)
                for key, value in zip(phases, (prepare, t1 - t0 - prepare, t2 - t1, t2 - t0), strict=True):
                    times[mode][key].append(value)
    finally:
        await codex_mock.stop()
    result: dict = {mode: {k: round(statistics.median(v) * 1000, 1) for k, v in t.items()} for mode, t in times.items()}
    return {**result, "n": rounds}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--only", choices=["codex", "claude"], default=None)
    parser.add_argument("--launch", action="store_true", help="launch time of a warmed Codex runtime only")
    args = parser.parse_args()
    root = ROOT / ".treadle" / "bench-sandbox" / uuid.uuid4().hex[:8]  # CODEX_HOME must not be under /tmp
    root.mkdir(parents=True)
    sandbox = TimedSandbox(
        SandboxSettings(mode="on"), TenantIdentities(root / "workspaces"), root / "provider-runtimes" / "host-1"
    )
    assert sandbox.start().ok, sandbox.result
    if args.launch:
        try:
            result = await launches(root, sandbox, args.rounds)
            result["spare"] = await spares(root, sandbox, args.rounds)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"{'codex launch':<14}{'prepare':>9}{'initialize':>12}{'thread/start':>14}{'total':>8}   (median ms)")
        for mode in ("off", "on"):
            r = result[mode]
            print(
                f"{'sandbox ' + mode:<14}{r['prepare']:>9}{r['initialize']:>12}{r['thread_start']:>14}{r['launch']:>8}"
            )
        s = result["spare"]
        print(
            f"{'spare taken':<14}{'attach':>9}{s['attach']:>12}{s['thread_start']:>14}{s['taken']:>8}   "
            f"(one idle spare: {s['pss_mb']} MB PSS)"
        )
        print(json.dumps(result))
        return
    codex_mock = await MockResponses().start()
    results: dict = {}
    try:
        async with MockMessagesApi() as claude_api:
            for kind in [args.only] if args.only else ["codex", "claude"]:
                times: dict[str, dict[str, list[float]]] = {mode: {"start": [], "warm": []} for mode in ("off", "on")}
                for r in range(args.rounds):
                    for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                        adapter = make(kind, root, sandbox if mode == "on" else None, codex_mock, claude_api)
                        try:
                            t0 = time.perf_counter()
                            await adapter.open_thread(None, "unused")
                            await turn(adapter, f"bench start {kind} {r} {mode}")
                            times[mode]["start"].append(time.perf_counter() - t0)
                            for i in range(args.turns):
                                times[mode]["warm"].append(await turn(adapter, f"bench warm {kind} {r} {mode} {i}"))
                        finally:
                            await adapter.close()
                results[kind] = {
                    mode: {k: round(statistics.median(v) * 1000, 1) for k, v in t.items()} for mode, t in times.items()
                }
                results[kind]["n"] = {"start": args.rounds, "warm": args.rounds * args.turns}
    finally:
        await codex_mock.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'runtime':<8}{'start off':>11}{'start on':>10}{'warm off':>10}{'warm on':>9}   (median ms)")
    for kind, r in results.items():
        print(f"{kind:<8}{r['off']['start']:>11}{r['on']['start']:>10}{r['off']['warm']:>10}{r['on']['warm']:>9}")
    print(json.dumps(results))


if __name__ == "__main__":
    asyncio.run(main())
