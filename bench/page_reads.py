"""What one page of a long thread's list costs the gateway: the read before lists were paged (the whole
document from Redis, decoded to its view, the list cut and encoded again, as /activity and /requests did) and
the page read now (one HMGET of the page's stored items, passed through as they are).

The thread is bench/frozen_state.py's (``--runs`` runs of 10 real events each), folded and written to a
throwaway redis-server by the projection store, as the projector writes it.

    .venv/bin/python bench/page_reads.py [--runs 2000] [--limit 50] [--repeat 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

from frozen_state import TENANT, THREAD, thread_events  # noqa: E402

from treadle.core.state import fold  # noqa: E402
from treadle.ops.servers import RedisServer  # noqa: E402
from treadle.projections.connect import redis_client  # noqa: E402
from treadle.projections.store import ProjectionStore, all_indexed  # noqa: E402
from treadle.views.thread import ThreadView  # noqa: E402

_decode = msgspec.json.Decoder(ThreadView).decode
_encode = msgspec.json.Encoder().encode


async def _timed(label: str, repeat: int, read) -> None:
    await read()  # warm: scripts loaded, connection open
    started = time.perf_counter()
    for _ in range(repeat):
        size = await read()
    per = (time.perf_counter() - started) / repeat
    print(f"{label:<46} {per * 1000:8.2f} ms/page  {size:>10,} bytes answered")


async def main(runs: int, limit: int, repeat: int) -> None:
    state = fold(thread_events(runs))
    with tempfile.TemporaryDirectory() as tmp:
        async with RedisServer(Path(tmp)) as server:
            redis = redis_client(server.url)
            store = ProjectionStore(redis)
            await store.write([(state, all_indexed(state), None)])
            middle = runs // 2

            async def whole_document() -> int:
                view = _decode(await store.doc(TENANT, THREAD) or b"")
                return len(_encode({"runs": view.runs[middle : middle + limit]}))

            async def page() -> int:
                got = await store.slice(TENANT, THREAD, "runs", middle, limit)
                assert got is not None and len(got.items) == limit
                return len(b'{"items":[' + b",".join(got.items) + b"]}")

            print(f"thread of {runs:,} runs ({len(await store.doc(TENANT, THREAD) or b''):,} bytes), pages of {limit}")
            await _timed("before: whole document, decoded, cut, encoded", repeat, whole_document)
            await _timed("now: the page's items only (HMGET)", repeat, page)
            await redis.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.limit, args.repeat))
