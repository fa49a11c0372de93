"""What the durable copy adds to a capture that changed one file (scenario D's capture, without the rest of
the stack): CPU of this process, of its git children and of nats-server, per capture, durable against node-only.

    .venv/bin/python bench/capture_durable.py [--files 10000] [--workspaces 3] [--captures 100] [--rounds 3]

Each workspace holds ``--files`` files as scenario D's do (bench/file_runs.py); every capture follows the
writing of one new small file. The two modes alternate ``--rounds`` times in one process, against one
nats-server (its CPU read from /proc), so the machine's other load falls on both alike.

"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from file_runs import populate

from treadle.checkpoints.archive import JetStreamArchive
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.protocol import Capture
from treadle.eventlog import nats_patches, streams
from treadle.ops.servers import NatsServer

TENANT = "bench"
PROFILE: Any = None  # a cProfile.Profile to enable around the durable captures (set by a profiling wrapper)
PROFILED = "durable"  # the mode PROFILE profiles


def own_ms() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (me.ru_utime + me.ru_stime) * 1000, (kids.ru_utime + kids.ru_stime) * 1000


def proc_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


class Mode:
    def __init__(self, name: str, ws: Workspaces, names: list[str]) -> None:
        self.name, self.ws, self.names = name, ws, names
        self.ordinal = 0
        self.rows: list[tuple[float, float, float, float]] = []  # per capture: self, git, nats-server, wall

    async def first(self, root: Path) -> None:
        for name in self.names:
            await self.ws.prepare(TENANT, f"thr_{name}", name)
            populate(root / name, ARGS.files)
            await self.ws.capture(Capture(tenant=TENANT, thread=f"thr_{name}", workspace=name, ordinal=0))

    async def round(self, root: Path, captures: int, nats_pid: int, profile: Any = None) -> None:
        s0, g0, n0, w0 = *own_ms(), proc_ms(nats_pid), time.perf_counter()
        if profile is not None:
            profile.enable()
        for _ in range(captures // len(self.names)):
            self.ordinal += 1
            n = self.ordinal
            for name in self.names:
                out = root / name / "out"
                out.mkdir(exist_ok=True)
                (out / f"run_{n}.txt").write_text(f"run {n}\n")
                got = await self.ws.capture(
                    Capture(tenant=TENANT, thread=f"thr_{name}", workspace=name, ordinal=n, previous_ordinal=n - 1)
                )
                assert got.files_total == 1, got
        if profile is not None:
            profile.disable()
        s1, g1, n1, w1 = *own_ms(), proc_ms(nats_pid), time.perf_counter()
        k = captures // len(self.names) * len(self.names)
        self.rows.append(((s1 - s0) / k, (g1 - g0) / k, (n1 - n0) / k, (w1 - w0) * 1000 / k))


async def main(args: argparse.Namespace) -> None:
    nats_patches.install()  # as the workers run
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats", auth=False)
        await server.start()
        assert server.pid is not None
        nc = await nats.connect(server.url)
        try:
            await streams.ensure(nc.jetstream())
            root = Path(tmp) / "workspaces"
            modes = []
            for name, archive in (("durable", JetStreamArchive(nc.jetstream())), ("node-only", None)):
                ws = Workspaces(root, Path(tmp) / f"shadow-{name}", archive=archive)
                mode = Mode(name, ws, [f"{name}-{i}" for i in range(args.workspaces)])
                await mode.first(root / TENANT)
                modes.append(mode)
            profile = PROFILE
            for _ in range(args.rounds):
                for mode in modes:
                    await mode.round(
                        root / TENANT, args.captures, server.pid, profile if mode.name == PROFILED else None
                    )
            print(f"\n{args.files} files, {args.captures} captures x {args.rounds} rounds; ms per capture (median)")
            print(f"{'mode':10} {'service':>8} {'git':>6} {'nats':>6} {'total':>6} {'wall':>6}")
            for mode in modes:
                med = [statistics.median(r[i] for r in mode.rows) for i in range(4)]
                print(
                    f"{mode.name:10} {med[0]:8.2f} {med[1]:6.2f} {med[2]:6.2f} {sum(med[:3]):6.2f} {med[3]:6.1f}"
                    f"   rounds: {' '.join(f'{sum(r[:3]):.2f}' for r in mode.rows)}"
                )
            for mode in modes:
                mode.ws.close()
        finally:
            await nc.close()
            await server.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=10000)
    p.add_argument("--workspaces", type=int, default=3)
    p.add_argument("--captures", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    ARGS = p.parse_args()
    asyncio.run(main(ARGS))
