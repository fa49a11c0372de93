"""What the projection writes for an event that changes what it does not name (a rollback of the thread's last
run: the run rolled back, its checkpoint stale), on a thread of 100, 2,000 and 10,000 runs: before (the whole
thread, as a batch noted without ``Changes.before``) and now (the items whose JSON the events changed, found by
comparing the lists before and after). No HTTP, no other load: the store against a throwaway redis-server.

The thread is bench/frozen_state.py's (runs of 10 real events each, a checkpoint per run).

    .venv/bin/python bench/unnamed_writes.py [--runs 100 2000 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from frozen_state import TENANT, THREAD, thread_events  # noqa: E402
from msgspec.structs import replace  # noqa: E402

from treadle.core import events as ev  # noqa: E402
from treadle.core.state import ThreadState, evolve, fold  # noqa: E402
from treadle.ops.servers import RedisServer  # noqa: E402
from treadle.projections import document  # noqa: E402
from treadle.projections.changes import Changes  # noqa: E402
from treadle.projections.connect import redis_client  # noqa: E402
from treadle.projections.store import ProjectionStore, all_indexed, keys  # noqa: E402


def _rollback(state: ThreadState, last: ev.Envelope) -> list[ev.Envelope]:
    run = state.runs[-1]
    stale = [c.id for c in state.run_checkpoints(run.id)]
    payloads: list[ev.Payload] = [
        ev.RollbackStarted(
            rollback_id="rb_1",
            kind="thread",
            to_run_ordinal=run.ordinal - 1,
            checkpoint_id=stale[0] if stale else "chk_none",
            commit="c0",
            rolled_back_run_ids=[run.id],
            stale_checkpoint_ids=stale,
        ),
        ev.RollbackCompleted(rollback_id="rb_1", undo_ref="refs/undo", undo_commit="c1", provider_context="kept"),
    ]
    return [
        replace(last, id=f"evt_rb{i}", type=p.TYPE, seq=(last.seq or 0) + i, data=p) for i, p in enumerate(payloads, 1)
    ]


async def _write(store: ProjectionStore, runs: int, compare: bool) -> tuple[float, int]:
    """Fold the rollback into a written thread and write it; (ms, fields written to the thread's hash)."""
    events = thread_events(runs)
    state = fold(events)
    await store.write([(state, all_indexed(state), None)])
    changes = Changes(state)
    written: list[int] = []
    fields = document.fields

    def counting(s: ThreadState, c: Changes | None = None) -> list[bytes | str | int]:
        out = fields(s, c)
        written.append(len(out) // 2)
        return out

    document.fields = counting  # type: ignore[assignment]  # counts what the store sends, the bench's own probe
    started = time.perf_counter()
    for e in _rollback(state, events[-1]):
        if compare:
            changes.fold(state, e)
        else:
            evolve(state, e)
            changes.note(e.data)
    await store.write([(state, [], changes)])
    elapsed = (time.perf_counter() - started) * 1000
    document.fields = fields
    return elapsed, written[-1]


async def main(sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with RedisServer(Path(tmp)) as server:
            redis = redis_client(server.url)
            store = ProjectionStore(redis)
            rows = {}
            for runs in sizes:
                row = []
                for compare in (False, True):
                    await redis.delete(*keys(TENANT, THREAD))
                    row.append(await _write(store, runs, compare))
                rows[runs] = row
            await redis.aclose()
    print(f"{'runs':>8}{'whole: ms':>12}{'fields':>10}{'compared: ms':>15}{'fields':>10}")
    for runs, ((ms0, n0), (ms1, n1)) in rows.items():
        print(f"{runs:>8}{ms0:12.1f}{n0:10d}{ms1:15.1f}{n1:10d}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[100, 2000, 10000])
    asyncio.run(main(parser.parse_args().runs))
