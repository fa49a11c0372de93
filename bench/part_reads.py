"""What the gateway's reads of one thread cost at 100 runs and at 2,000, before (the whole document from
Redis, decoded to its view, then shaped) and now (``projections.parts``: only the parts the answer holds, found
by the thread's places). No HTTP, no other load: the store against a throwaway redis-server.

The thread is bench/frozen_state.py's (runs of 10 real events each, a checkpoint per run), written by the
projection store as the projector writes it.

    .venv/bin/python bench/part_reads.py [--runs 100 2000] [--repeat 50]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

from frozen_state import TENANT, THREAD, thread_events  # noqa: E402

from treadle.core.state import fold  # noqa: E402
from treadle.ops.servers import RedisServer  # noqa: E402
from treadle.projections import parts  # noqa: E402
from treadle.projections.connect import redis_client  # noqa: E402
from treadle.projections.store import ProjectionStore, all_indexed  # noqa: E402
from treadle.views.thread import ThreadView, queue_view, run_change, run_view, thread_head  # noqa: E402

_decode = msgspec.json.Decoder(ThreadView).decode


async def _ms(repeat: int, read) -> float:
    await read()  # warm: scripts loaded, connection open
    started = time.perf_counter()
    for _ in range(repeat):
        await read()
    return (time.perf_counter() - started) / repeat * 1000


async def measure(store: ProjectionStore, run_id: str, repeat: int) -> dict[str, tuple[float, float | None]]:
    async def whole(shape):
        return shape(_decode(await store.doc(TENANT, THREAD) or b""))

    def now(reader):
        return lambda: store.read(TENANT, THREAD, reader)

    cases = {
        "/v1/threads/{id} (the whole document)": (lambda: store.doc(TENANT, THREAD), None),
        "/v1/runs/{id}": (
            lambda: whole(lambda v: run_view(v, run_id)),
            now(partial(parts.run, run_id=run_id)),
        ),
        "/v1/runs/{id}/diff (its checkpoints)": (
            lambda: whole(lambda v: run_change(v, run_id)),
            now(partial(parts.change, run_id=run_id)),
        ),
        "/v1/threads/{id}/queue": (lambda: whole(queue_view), now(parts.queue)),
        "/v1/threads/{id}/lineage (one node)": (lambda: whole(thread_head), now(parts.head)),
    }
    out = {}
    for name, (before, after) in cases.items():
        out[name] = (await _ms(repeat, before), await _ms(repeat, after) if after else None)
    return out


async def main(sizes: list[int], repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with RedisServer(Path(tmp)) as server:
            redis = redis_client(server.url)
            store = ProjectionStore(redis)
            rows = {}
            for runs in sizes:
                await redis.flushall()
                state = fold(thread_events(runs))
                await store.write([(state, all_indexed(state), None)])
                rows[runs] = await measure(store, state.runs[-1].id, repeat)
            await redis.aclose()
    print(f"{'read':<40}" + "".join(f"{f'{n} runs: before':>18}{'now':>8}" for n in sizes) + "   (ms)")
    for name in rows[sizes[0]]:
        cells = ""
        for n in sizes:
            before, after = rows[n][name]
            cells += f"{before:18.2f}{after:8.2f}" if after is not None else f"{before:18.2f}{'-':>8}"
        print(f"{name:<40}{cells}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[100, 2000])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.repeat))
