"""Cost of one checkpoint capture on a small workspace: wall and CPU (this process + git children).

    .venv/bin/python bench/bench_checkpoint.py [--captures 200] [--files 50] [--loop asyncio|uvloop]

Cases: "unchanged" (nothing touched since the previous capture: the stat-fingerprint fast path),
"touched" (mtime bumped, content identical: `add -A` + `write-tree`, no commit), "changed" (one
file rewritten: add, write-tree, commit-tree, update-ref and diff), each in a git workspace and
in a non-git one (shadow git dir).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.protocol import Capture


def cpu_ms() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime) * 1000


async def run_case(ws: Workspaces, name: str, root: Path, captures: int, mutate: Callable[[Path, int], None]):
    thread = f"thr_{name}"
    workspace = root / "bench" / name
    ordinal = 0
    await ws.capture(Capture(tenant="bench", thread=thread, workspace=name, ordinal=0))
    walls = []
    cpu0 = cpu_ms()
    for _ in range(captures):
        ordinal += 1
        mutate(workspace, ordinal)
        t0 = time.perf_counter()
        await ws.capture(
            Capture(tenant="bench", thread=thread, workspace=name, ordinal=ordinal, previous_ordinal=ordinal - 1)
        )
        walls.append((time.perf_counter() - t0) * 1000)
    cpu = (cpu_ms() - cpu0) / captures  # includes mutate(), a few µs
    return statistics.median(walls), statistics.quantiles(walls, n=20)[18], statistics.fmean(walls), cpu


def unchanged(workspace: Path, n: int) -> None:
    pass


def touched(workspace: Path, n: int) -> None:
    os.utime(workspace / "src" / "mod_0.py")


def changed(workspace: Path, n: int) -> None:
    (workspace / "src" / "mod_0.py").write_text(f"VALUE = {n}\n" + "x = 1\n" * 40)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "workspaces"
        ws = Workspaces(root, Path(tmp) / "shadow")
        rows = []
        for git in (True, False):
            for label, mutate in (("unchanged", unchanged), ("touched", touched), ("changed", changed)):
                name = f"{label}_{'git' if git else 'plain'}"
                path = root / "bench" / name
                if git:  # a new workspace: created and `git init`ed
                    await ws.prepare("bench", f"thr_{name}", name)
                (path / "src").mkdir(parents=True)
                for i in range(args.files):
                    (path / "src" / f"mod_{i}.py").write_text(f"# module {i}\n" + "x = 1\n" * 40)
                (path / ".gitignore").write_text("__pycache__/\n")
                rows.append((name, *await run_case(ws, name, root, args.captures, mutate)))
        print(f"\n{args.captures} captures per case, {args.files} files, loop={args.loop}\n")
        print(f"{'case':18} {'wall p50 ms':>12} {'wall p95 ms':>12} {'wall mean ms':>13} {'cpu ms':>8}")
        for name, p50, p95, mean, cpu in rows:
            print(f"{name:18} {p50:12.2f} {p95:12.2f} {mean:13.2f} {cpu:8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--captures", type=int, default=200)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop")
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(main(args))
    else:
        asyncio.run(main(args))
