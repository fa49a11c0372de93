"""Checkpoint cost on a generated 10,000-file repository (issue 4 "Cost"), versus plain git.

    .venv/bin/python bench/bench_checkpoint_repo.py [--files 10000] [--runs 10] [--changed 0.01]

Per run, 1% of the files are appended to; then
- Treadle: `capture` (tree, commit, hidden ref, per-file stats; for a watched worktree only the changed
  paths are read, see checkpoints/incremental.py) and, separately, the unified diff of the run (`diff`,
  as `GET /v1/runs/{id}/diff` asks for it);
- plain git, on a copy of the same repository with the same changes: `git add -A && git commit -q`.
All are timed as wall clock and CPU (this process, its threads and its git children); medians over the
runs. The ratios are Treadle / plain git. Also: CPU per capture of an unchanged workspace, for this
repository and for a small (50-file) one. `--no-watch` measures the path without inotify (`add -A`).
`--archive`: every capture is also copied to a JetStream Object Store (a nats-server this script starts; its
CPU is not counted), and at the end the workspace and its git dir are deleted and hydrated back (timed).
Writes bench/results/checkpoint.json (or the file named by --out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import nats

from treadle.checkpoints.archive import JetStreamArchive
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.hydrate import Hydrate
from treadle.checkpoints.protocol import Capture, DiffRequest
from treadle.eventlog import streams
from treadle.ops.servers import NatsServer

TENANT, THREAD = "bench", "thr_bench"


def cpu_ms() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime) * 1000


def generate(path: Path, files: int) -> list[Path]:
    out = []
    for i in range(files):
        p = path / f"pkg{i // 500:02d}" / f"mod{i // 50:03d}" / f"file{i:05d}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# file {i}\n" + "".join(f"value_{j} = {i * j}\n" for j in range(30)))
        out.append(p.relative_to(path))
    return out


def plain_git(path: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="B", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="B", GIT_COMMITTER_EMAIL="b@x")
    # No auto gc (Treadle runs none either): a background gc would skew the timings and race the copy.
    # safe.directory: as root, the service hands the workspace to the tenant's uid.
    subprocess.run(
        ["git", "-C", str(path), "-c", "gc.auto=0", "-c", "safe.directory=*", *args],
        env=env,
        check=True,
        capture_output=True,
    )


def plain_commit(path: Path, message: str) -> None:
    plain_git(path, "add", "-A")
    plain_git(path, "commit", "-q", "-m", message)


def timed(fn):
    c0, w0 = cpu_ms(), time.perf_counter()
    result = fn()
    return result, (time.perf_counter() - w0) * 1000, cpu_ms() - c0


async def atimed(coro):
    c0, w0 = cpu_ms(), time.perf_counter()
    result = await coro
    return result, (time.perf_counter() - w0) * 1000, cpu_ms() - c0


async def unchanged_cpu(ws: Workspaces, workspace: str, thread: str, first: int, captures: int) -> float:
    c0 = cpu_ms()
    for n in range(first, first + captures):
        got = await ws.capture(
            Capture(tenant=TENANT, thread=thread, workspace=workspace, ordinal=n, previous_ordinal=n - 1)
        )
        assert got.unchanged
    return (cpu_ms() - c0) / captures


async def main(args: argparse.Namespace) -> dict:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o711)  # reachable by tenant uids: as root, git runs as the tenant, as deployed (issue 16)
        root = Path(tmp) / "workspaces"
        archive = None
        if args.archive:
            server = NatsServer(Path(tmp) / "nats", auth=False)
            await server.start()
            nc = await nats.connect(server.url)
            await streams.ensure(nc.jetstream())
            archive = JetStreamArchive(nc.jetstream())
        ws = Workspaces(root, Path(tmp) / "shadow", watch=args.watch, run_as_tenant=args.run_as_tenant, archive=archive)
        await ws.prepare(TENANT, THREAD, "big")
        big = root / TENANT / "big"
        names = generate(big, args.files)
        plain_git(big, "add", "-A")
        plain_git(big, "commit", "-q", "-m", "generated")  # a real project: history, a checked-out HEAD
        copy = Path(tmp) / "plain"
        shutil.copytree(big, copy, symlinks=True)
        await ws.capture(Capture(tenant=TENANT, thread=THREAD, workspace="big", ordinal=0, status="baseline"))
        plain_git(copy, "add", "-A")  # both start with a warm index

        rows = []
        previous = None
        for run in range(1, args.runs + 1):
            changed = rng.sample(names, max(1, int(len(names) * args.changed)))
            for name in changed:
                for base in (big, copy):
                    with open(base / name, "a") as f:
                        f.write(f"run_{run} = {run}\n")
            got, cap_wall, cap_cpu = await atimed(
                ws.capture(
                    Capture(tenant=TENANT, thread=THREAD, workspace="big", ordinal=run, previous_ordinal=run - 1)
                )
            )
            assert got.files_total == len(changed), (got.files_total, len(changed))
            prev_commit = previous or got.previous_commit
            diff, diff_wall, diff_cpu = await atimed(
                ws.diff(
                    DiffRequest(
                        tenant=TENANT,
                        thread=THREAD,
                        workspace="big",
                        from_commit=prev_commit,
                        to_commit=got.commit,
                        max_bytes=1 << 20,
                    )
                )
            )
            assert not diff.truncated
            previous = got.commit
            message = f"run {run}"
            _, git_wall, git_cpu = timed(lambda: plain_commit(copy, message))  # noqa: B023 (called at once)
            rows.append(
                (cap_wall + diff_wall, cap_cpu + diff_cpu, git_wall, git_cpu, cap_wall, diff_wall, cap_cpu, diff_cpu)
            )

        unchanged_big = await unchanged_cpu(ws, "big", THREAD, args.runs + 1, 20)
        small = root / TENANT / "small"
        await ws.prepare(TENANT, "thr_small", "small")
        generate(small, 50)
        await ws.capture(Capture(tenant=TENANT, thread="thr_small", workspace="small", ordinal=0))
        await ws.capture(Capture(tenant=TENANT, thread="thr_small", workspace="small", ordinal=1, previous_ordinal=0))
        unchanged_small = await unchanged_cpu(ws, "small", "thr_small", 2, 500)
        hydrated = None
        if args.archive:
            before = {p: (big / p).read_bytes() for p in names}
            shutil.rmtree(big)
            shutil.rmtree(Path(tmp) / "shadow" / TENANT / "workspaces")
            made, hyd_wall, hyd_cpu = await atimed(ws.hydrate(Hydrate(tenant=TENANT, thread=THREAD, workspace="big")))
            assert made.created and all((big / p).read_bytes() == data for p, data in before.items())
            hydrated = (made.files, hyd_wall, hyd_cpu)
            await nc.close()
            await server.stop()
        ws.close()

    med = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
    result = {
        "files": args.files,
        "runs": args.runs,
        "changed_per_run": max(1, int(args.files * args.changed)),
        "watch": args.watch,
        "treadle_capture_cpu_ms": round(med(6), 1),
        "treadle_capture_wall_ms": round(med(4), 1),
        "treadle_diff_cpu_ms": round(med(7), 1),
        "treadle_diff_wall_ms": round(med(5), 1),
        "treadle_capture_and_diff_wall_ms": round(med(0), 1),
        "treadle_capture_and_diff_cpu_ms": round(med(1), 1),
        "plain_git_add_commit_wall_ms": round(med(2), 1),
        "plain_git_add_commit_cpu_ms": round(med(3), 1),
        "ratio_capture_cpu": round(med(6) / med(3), 2),
        "ratio_capture_wall": round(med(4) / med(2), 2),
        "ratio_wall": round(med(0) / med(2), 2),
        "ratio_cpu": round(med(1) / med(3), 2),
        "unchanged_capture_cpu_ms_10k_files": round(unchanged_big, 2),
        "unchanged_capture_cpu_ms_50_files": round(unchanged_small, 3),
        "archive": args.archive,
    }
    if hydrated is not None:
        result.update(
            hydrate_files=hydrated[0], hydrate_wall_ms=round(hydrated[1], 1), hydrate_cpu_ms=round(hydrated[2], 1)
        )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--no-watch", dest="watch", action="store_false", help="no inotify: every capture runs add -A")
    parser.add_argument(
        "--as-service",
        dest="run_as_tenant",
        action="store_const",
        const=False,
        default=None,
        help="git children as this process's user even when root (default: as the tenant's uid)",
    )
    parser.add_argument("--archive", action="store_true", help="copy every checkpoint to an Object Store, then hydrate")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "checkpoint.json")
    args = parser.parse_args()
    out = asyncio.run(main(args))
    width = max(len(k) for k in out)
    for key, value in out.items():
        print(f"{key:<{width}}  {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
