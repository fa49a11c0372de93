"""Cost of keeping a Codex thread's native state off the node after a turn (issue 35): the provider host's
``NativeStates.keep`` with the real ``CodexAdapter`` on a tenant home, against a throwaway nats-server archive.

    PYTHONPATH=$PWD/libs:$PWD/services scripts/loopback-only.sh .venv/bin/python bench/native_state_cost.py \
        [--turns 40] [--delta 4096] [--others 100] [--sizes 100000,1000000,10000000] [--grow 1000000]

For each rollout size the thread's rollout starts at that size and grows by ``--delta`` bytes per turn (the
tenant's home also holds ``--others`` other threads' rollouts); after a warm-up keep, each turn's keep is timed:
this process's CPU (all threads: the adapter, the packing, the NATS client), nats-server's CPU, and the bytes
the client sent. ``--grow``: one more case, a thread grown from empty to that size by ``--delta`` per turn (what
merging segments costs, averaged over a whole conversation). Runs on whichever ``treadle`` PYTHONPATH names, so
a base and a change are compared by running it on each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import nats

from treadle.checkpoints.archive import JetStreamArchive
from treadle.eventlog import streams
from treadle.ops.servers import NatsServer
from treadle.provider_host.native_states import NativeStates
from treadle.providers.codex import CodexAdapter, CodexSettings
from treadle.providers.protocol import PlaceSession

_WORDS = "the of and to in is that for it as with was on be by this patch test file function error".split()


def lines(size: int, rng: random.Random) -> bytes:
    """JSONL like a rollout's: repeated keys and prose with some ids (gzip level 3 packs it ~4x)."""
    out: list[bytes] = []
    total = 0
    while total < size:
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 40)))
        line = (
            b'{"timestamp":"2026-12-07T03:41:11.123Z","type":"response_item","payload":{"id":"%s","text":"%s"}}\n'
            % (
                uuid.UUID(int=rng.getrandbits(128)).hex.encode(),
                text.encode(),
            )
        )
        out.append(line)
        total += len(line)
    return b"".join(out)[:size]


def server_cpu(pid: int | None) -> float:
    """nats-server's user+system CPU seconds so far."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def case(
    label: str, root: Path, server: NatsServer, start: int, turns: int, delta: int, others: int
) -> dict[str, float]:
    rng = random.Random(7)
    home_root = root / label / "homes"
    tenant = f"t{uuid.uuid4().hex[:8]}"
    home = home_root / tenant
    day = home / "sessions" / "2026" / "12" / "07"
    day.mkdir(parents=True)
    for _ in range(others):
        other = uuid.UUID(int=rng.getrandbits(128))
        (day / f"rollout-2026-12-07T03-41-11-{other}.jsonl").write_bytes(lines(20_000, rng))
    thread = str(uuid.UUID(int=rng.getrandbits(128)))
    rollout = day / f"rollout-2026-12-07T03-41-11-{thread}.jsonl"
    rollout.write_bytes(lines(start, rng) if start else b"")
    request = PlaceSession(
        tenant=tenant, thread="thr_1", provider="codex", session_id="ps_1", provider_thread_id=f"pth_{label}",
        workspace=str(root),
    )  # fmt: skip
    workspace = root / label / "ws"
    workspace.mkdir(parents=True)
    adapter = CodexAdapter(workspace, request, root / label / "runtime" / "ps_1", CodexSettings(home_root=home_root))
    adapter._thread_id = thread  # as open_thread leaves it
    nc = await nats.connect(server.url)
    try:
        keeper = NativeStates(JetStreamArchive(nc.jetstream()))
        if start:
            await keeper.keep(request, adapter)  # warm: the first store is whole either way
        cpus, sent, served = [], [], []
        for _ in range(turns):
            with rollout.open("ab") as file:
                file.write(lines(delta, rng))
            cpu0, out0, srv0 = time.process_time(), nc.stats["out_bytes"], server_cpu(server.pid)
            await keeper.keep(request, adapter)
            cpus.append(time.process_time() - cpu0)
            sent.append(nc.stats["out_bytes"] - out0)
            served.append(server_cpu(server.pid) - srv0)
    finally:
        await nc.close()
        shutil.rmtree(root / label, ignore_errors=True)
    return {
        "cpu_ms_mean": statistics.fmean(cpus) * 1000,
        "cpu_ms_p50": statistics.median(cpus) * 1000,
        "cpu_ms_max": max(cpus) * 1000,
        "server_cpu_ms_mean": statistics.fmean(served) * 1000,
        "kb_sent_mean": statistics.fmean(sent) / 1024,
        "kb_sent_max": max(sent) / 1024,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--delta", type=int, default=4096)
    parser.add_argument("--others", type=int, default=100)
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--grow", type=int, default=1_000_000, help="0: no grown-from-empty case")
    args = parser.parse_args()
    # CODEX_HOME must not be under /tmp (codex refuses it), so the homes live under ~/.cache
    base = Path.home() / ".cache" / "treadle-bench"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="native-state-", dir=base))
    server = NatsServer(root / "nats", auth=False)
    await server.start()
    try:
        nc = await nats.connect(server.url)
        await streams.ensure(nc.jetstream())
        await nc.close()
        cases = [(f"start {int(s) // 1000} KB", int(s), args.turns) for s in args.sizes.split(",") if s]
        if args.grow:
            cases.append((f"grow 0-{args.grow // 1000} KB", 0, args.grow // args.delta))
        header = f"{'case':18} {'turns':>6} {'cpu ms mean':>12} {'p50':>8} {'max':>8} {'srv cpu ms':>11} {'KB sent mean':>13} {'max':>9}"
        print(header)
        for n, (label, start, turns) in enumerate(cases):
            r = await case(f"c{n}", root, server, start, turns, args.delta, args.others)
            print(
                f"{label:18} {turns:>6} {r['cpu_ms_mean']:>12.2f} {r['cpu_ms_p50']:>8.2f} {r['cpu_ms_max']:>8.2f} "
                f"{r['server_cpu_ms_mean']:>11.2f} {r['kb_sent_mean']:>13.1f} {r['kb_sent_max']:>9.1f}"
            )
    finally:
        await server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
