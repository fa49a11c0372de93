"""Issue 35's numbers on a two-node embedded stack (``Stack(workspace_nodes=2)``), runnable alone:

    scripts/loopback-only.sh .venv/bin/python bench/scale_out.py [--files 10 10000] [--repeat 3]

For each workspace size (files of ~100 bytes in 100 directories), ``--repeat`` threads each:

* resident: the next message after the thread went idle (its session reaped) while its workspace is on disk:
  POST → run completed (the run writes one file, so its capture is real);
* evicted: the same once the checkpoint service evicted the workspace (``TREADLE_CHECKPOINTS_EVICT_IDLE_SECONDS``):
  the supervisor's hydrate rebuilds it from the Object Store before the turn;
* disk: what the idle thread holds on its node (workspace + checkpoint git dir, allocated blocks) before and
  after the eviction (the tombstone left in its place);
* re-home: the node of one more thread of that size is stopped (SIGKILL) and ``treadle volumes forget`` moves
  it (``rehoming.forget``: hydrate on the other node, then ``thread.moved``), timed alone.

Run completion is polled (20 ms) on ``GET /v1/runs/{id}``. Prints a table and the JSON.
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from treadle.cli.stack import Stack
from treadle.client import TreadleClient
from treadle.ops import rehoming
from treadle.ops.tokens import TokenStore

TENANT = "bench"
EVICT_IDLE = 8.0  # long enough to send the resident message first, short enough to wait for
ENV = {
    "TREADLE_CHECKPOINTS_EVICT_IDLE_SECONDS": str(EVICT_IDLE),
    "TREADLE_CHECKPOINTS_EVICT_INTERVAL_SECONDS": "0.2",
    "TREADLE_PROVIDER_HOST_IDLE_SECONDS": "0.5",
}


def log(msg: str) -> None:
    print(f"[scale-out {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def usage(*tops: Path) -> int:
    size = 0
    for top in tops:
        for d, _, names in os.walk(top):
            size += os.lstat(d).st_blocks * 512
            size += sum(os.lstat(os.path.join(d, n)).st_blocks * 512 for n in names)
    return size


def write_files(workspace: Path, n: int) -> None:
    for i in range(n):
        d = workspace / f"d{i % 100:02d}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i} " + "x" * 90 + "\n")


def one_write(name: str) -> dict[str, Any]:
    return {"steps": [{"type": "write_file", "path": name, "content": name}, {"type": "text", "text": "ok"}]}


class Bench:
    def __init__(self, stack: Stack, client: TreadleClient) -> None:
        self.stack, self.client = stack, client

    async def get(self, path: str) -> dict[str, Any]:
        r = await self.client.request("GET", path)
        r.raise_for_status()
        doc: dict[str, Any] = r.json()
        return doc

    async def run(self, thread: str, name: str) -> float:
        """Seconds from the POST to the run's completion."""
        t0 = time.perf_counter()
        r = await self.client.request(
            "POST", f"/v1/threads/{thread}/messages", json={"text": name, "script": one_write(name)}
        )
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        while True:
            status = (await self.get(f"/v1/runs/{run_id}"))["status"]
            if status == "completed":
                return time.perf_counter() - t0
            if status in ("failed", "cancelled", "interrupted"):
                raise RuntimeError(f"run {run_id} ended {status}")
            await asyncio.sleep(0.02)  # polling period

    async def until(self, predicate: Callable[[], Awaitable[bool]], what: str, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while not await predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(what)
            await asyncio.sleep(0.05)  # polling period

    async def idle(self, thread: str) -> None:
        async def no_live_session() -> bool:
            doc = await self.get(f"/v1/threads/{thread}")
            return not doc["runs"][-1:] or (
                doc["runs"][-1]["status"] == "completed" and all(s["status"] != "live" for s in doc["sessions"])
            )

        await self.until(no_live_session, f"{thread}'s session reaped")

    async def thread_with(self, files: int) -> tuple[str, str, Path]:
        thread = (await self.client.request("POST", "/v1/threads", json={"title": f"{files} files"})).json()[
            "thread_id"
        ]
        home = (await self.get(f"/v1/threads/{thread}"))["thread"]["volume"]
        workspace = self.stack.workspaces(home) / TENANT / "threads" / thread
        await asyncio.to_thread(write_files, workspace, files)
        await self.run(thread, "first.txt")  # every file captured and kept in the Object Store
        return thread, home, workspace

    def gitdirs(self, home: str) -> list[Path]:
        top = self.stack.nodes[home] / "shadow" / TENANT / "workspaces"
        return sorted(top.iterdir()) if top.is_dir() else []

    async def evict_cycle(self, files: int) -> dict[str, Any]:
        thread, home, workspace = await self.thread_with(files)
        await self.idle(thread)
        t0 = time.monotonic()
        resident = await self.run(thread, "resident.txt")
        await self.idle(thread)
        gitdir = [g for g in self.gitdirs(home) if g.name.startswith(f"{thread}-")]
        before = usage(workspace, *gitdir)

        async def evicted() -> bool:
            return not workspace.exists()

        await self.until(evicted, f"{thread} evicted")
        after = usage(self.stack.nodes[home] / "shadow" / TENANT / "evicted")
        waited = time.monotonic() - t0
        restored = await self.run(thread, "evicted.txt")
        assert (workspace / "first.txt").exists() and len(list(workspace.glob("d*/f*.txt"))) == files
        return {
            "resident_s": resident,
            "evicted_s": restored,
            "disk_before": before,
            "disk_after": after,
            "idle_s": waited,
        }

    async def rehome(self, files: int, nc: NATS) -> dict[str, Any]:
        """The node holding a new thread of ``files`` files is lost (SIGKILL, its directory deleted); the time
        ``rehoming.forget`` takes to move its threads (the node's earlier threads were moved off it before)."""
        thread, home, _ = await self.thread_with(files)
        await self.idle(thread)
        for name in [n for n, v in self.stack.volume_of.items() if v == home]:
            await self.stack.processes.halt(name)
        shutil.rmtree(self.stack.nodes[home])
        kv = await nc.jetstream().key_value("treadle-volumes")
        await kv.delete(home)  # as its TTL would, without waiting for it
        t0 = time.perf_counter()
        moved = await rehoming.forget(nc, home)
        took = time.perf_counter() - t0
        assert thread in [m.thread for m in moved]
        self.stack.nodes[home].mkdir(parents=True)
        await self.stack.processes.start()
        await self.stack.wait_ready()
        return {"rehome_s": took, "threads_moved": len(moved)}


async def main(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="treadle-scale-out-"))
    out: dict[str, Any] = {"evict_idle_seconds": EVICT_IDLE, "sizes": {}}
    try:
        lines = open(args.log, "w") if args.log else None  # noqa: SIM115  (open for the stack's whole life)

        def output(name: str, line: str) -> None:
            if lines is not None:
                lines.write(f"{name} | {line}\n")

        async with Stack(tmp / "state", workspace_nodes=2, env=ENV, on_output=output) as stack:
            nc = await nats.connect(stack.nats_url)
            token = await TokenStore(nc.jetstream()).create(TENANT, "bench")
            client = TreadleClient(stack.api_url, token, timeout=120)
            bench = Bench(stack, client)
            try:
                for files in args.files:  # first, while each lost node holds the one thread made for it
                    log(f"{files} files: re-home")
                    out["sizes"][files] = await bench.rehome(files, nc)
                for files in args.files:
                    cycles = []
                    for i in range(args.repeat):
                        log(f"{files} files: cycle {i + 1}/{args.repeat}")
                        cycles.append(await bench.evict_cycle(files))
                    out["sizes"][files]["cycles"] = cycles
            finally:
                await client.aclose()
                await nc.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'files':>7} {'resident s':>11} {'evicted s':>10} {'disk before':>12} {'disk after':>11} {'re-home s':>10}")
    for files, got in out["sizes"].items():
        c = got["cycles"]

        def med(key: str, c: list[dict[str, Any]] = c) -> float:
            return float(statistics.median(x[key] for x in c))

        print(
            f"{files:>7} {med('resident_s'):>11.2f} {med('evicted_s'):>10.2f} {med('disk_before') / 1024:>10.0f}KB"
            f" {med('disk_after') / 1024:>9.0f}KB {got['rehome_s']:>10.2f}"
        )
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, nargs="+", default=[10, 10_000], help="workspace sizes (default 10 10000)")
    p.add_argument("--repeat", type=int, default=3, help="threads per size (default 3)")
    p.add_argument("--log", help="write the workers' output to this file")
    sys.exit(asyncio.run(main(p.parse_args())))
