"""Cost of a thread rollback over HTTP (L10.5), end to end through a private stack, by provider path:

    .venv/bin/python bench/bench_rollback.py [--threads 20]

Each thread gets three scripted runs (each writes a file), then ``POST /v1/threads/{id}/rollback`` to run 1
is timed until its answer (files restored and the provider outcome appended). Cases:
"native_live" (profile native_rollback, the session still live: the host drops two turns),
"native_resumed" (the session released first: the coordinator resumes the provider thread on a host, then
rolls it back), "divergent" (the default profile: no provider call, the provider thread is marked divergent).
Never part of the test suite; numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nats

from treadle.cli.stack import Stack
from treadle.client.http import TreadleClient
from treadle.ops.tokens import TokenStore
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient

CASES = {"native_live": "native_rollback", "native_resumed": "native_rollback", "divergent": None}


def script(n: int, profile: str | None) -> dict:
    body: dict = {
        "steps": [{"type": "write_file", "path": f"f{n}.txt", "content": f"{n}\n"}, {"type": "text", "text": "done"}]
    }
    if profile:
        body["profile"] = profile
    return body


async def one(client: TreadleClient, hosts: HostClient, case: str) -> tuple[float, str]:
    profile = CASES[case]
    thread = (await client.create_thread(title=f"bench {case}"))["thread_id"]
    for n in (1, 2, 3):
        sent = await client.send(thread, f"run {n}", script=script(n, profile))
        run = await client.wait_run(sent["run_id"], timeout=60)
        assert run["status"] == "completed", run
    if case == "native_resumed":
        session = (await client.get_thread(thread))["sessions"][-1]
        await hosts.verb(session["host_id"], "session.stop", hp.StopTurn(session_id=session["id"], attempt_id=""))
        for _ in range(400):  # until the projection shows the session let go (bench setup, not measured)
            if (await client.get_thread(thread))["sessions"][-1]["status"] == "stopped":
                break
            await asyncio.sleep(0.025)
    t0 = time.perf_counter()
    rollback = await client.rollback(thread, 1)
    wall = (time.perf_counter() - t0) * 1000
    return wall, rollback["provider_context"]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        async with Stack(Path(tmp), on_output=lambda name, line: None) as stack:
            nc = await nats.connect(stack.nats_url)
            token = await TokenStore(nc.jetstream()).create("bench", "alice")
            hosts = HostClient(nc, 10.0)
            async with TreadleClient(stack.api_url, token, timeout=60) as client:
                print(f"{'case':<16}{'n':>4}{'median ms':>12}{'p95 ms':>10}{'max ms':>10}  outcome")
                for case in CASES:
                    walls, outcomes = [], set()
                    for _ in range(args.threads):
                        wall, outcome = await one(client, hosts, case)
                        walls.append(wall)
                        outcomes.add(outcome)
                    p95 = statistics.quantiles(walls, n=20)[18] if len(walls) >= 2 else walls[0]
                    print(
                        f"{case:<16}{len(walls):>4}{statistics.median(walls):>12.1f}{p95:>10.1f}"
                        f"{max(walls):>10.1f}  {','.join(sorted(outcomes))}",
                        flush=True,
                    )
            await nc.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
