"""What an atomic batch costs against single appends, on a file-backed and a memory stream: the latency of one
append, and of a 2-message batch (``Nats-Batch-*`` headers, committed by the second). nats-server 2.15.1 syncs a
file-backed stream to disk at each commit, so a batch waits for the disk. A nats-server of its own.

    .venv/bin/python bench/batch_commit.py [--n 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "libs"), str(ROOT / "services")]

import nats  # noqa: E402
from nats.js.api import StorageType, StreamConfig  # noqa: E402

from treadle.ops.servers import NatsServer  # noqa: E402


async def append(nc, subject: str, size: int) -> None:
    await nc.request(subject, b"y" * 300, timeout=5)


async def batch(nc, subject: str, size: int) -> None:
    batch_id = uuid.uuid4().hex
    for i in range(1, size + 1):
        headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)}
        if i == size:
            headers["Nats-Batch-Commit"] = "1"
        answer = await nc.request(subject, b"y" * 300, timeout=5, headers=headers)
    assert b"error" not in answer.data, answer.data


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats")
        await server.start()
        nc = await nats.connect(server.url)
        try:
            for storage in (StorageType.FILE, StorageType.MEMORY):
                name = f"BENCH_{storage.value.upper()}"
                await nc.jetstream().add_stream(
                    StreamConfig(name=name, subjects=[f"{name}.>"], storage=storage, allow_atomic=True)
                )
                for label, write, size in (("1 append", append, 1), ("2-msg batch", batch, 2)):
                    took = []
                    for _ in range(n):
                        started = time.perf_counter()
                        await write(nc, f"{name}.x", size)
                        took.append((time.perf_counter() - started) * 1000)
                    took.sort()
                    print(
                        f"{storage.value:6} {label:11} median {statistics.median(took):6.2f} ms  p90 {took[n * 9 // 10]:6.2f}"
                    )
        finally:
            await nc.close()
            await server.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=100)
    asyncio.run(main(p.parse_args().n))
