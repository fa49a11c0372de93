"""What the projection writer costs and writes for events that change what they do not name, on a thread of
100, 2,000 and 10,000 runs: a rollback of the thread's last run (the run rolled back, its checkpoint stale), a
rename, and an edit of a queued run. Each case is written whole (as a state just loaded, ``Changes(None)``) and
as changes (as a cached state's batch: ``Changes(state)``, the events folded through it). No HTTP, no other
load: the store against a throwaway redis-server.

Reported per case: the projector's CPU (this process's, best of ``--repeat``) for folding the events and
writing them, and the fields the write sent to the thread's hash. The thread is bench/frozen_state.py's (runs
of 10 real events each, a checkpoint per run).

    .venv/bin/python bench/unnamed_writes.py [--runs 100 2000 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from frozen_state import TENANT, THREAD, thread_events  # noqa: E402
from msgspec.structs import replace  # noqa: E402

from treadle.core import events as ev  # noqa: E402
from treadle.core.state import ThreadState, fold  # noqa: E402
from treadle.ops.servers import RedisServer  # noqa: E402
from treadle.projections import document  # noqa: E402
from treadle.projections.changes import Changes  # noqa: E402
from treadle.projections.connect import redis_client  # noqa: E402
from treadle.projections.store import ProjectionStore, all_indexed, keys  # noqa: E402

EDITED = "run_edited_bench"


def _rollback(state: ThreadState) -> list[ev.Payload]:
    run = state.runs[-1]
    stale = [c.id for c in state.run_checkpoints(run.id)]
    return [
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


def _rename(state: ThreadState) -> list[ev.Payload]:
    return [ev.ThreadRenamed(title="renamed", by="u")]


def _queued(state: ThreadState) -> list[ev.Payload]:
    """A run queued behind the last (the edit's subject), folded and written before the edit."""
    return [
        ev.RunQueued(
            run_id=EDITED,
            ordinal=len(state.runs) + 1,
            message_id="msg_edited_bench",
            text="as queued",
            root_node_id="nod_edited_bench",
            attempt_id="att_edited_bench",
            mode="auto",
            disposition="queued",
            provider="scripted",
        )
    ]


def _edit(state: ThreadState) -> list[ev.Payload]:
    return [ev.RunEdited(run_id=EDITED, text="as edited", script={"steps": ["x"]})]


Case = tuple[Callable[[ThreadState], list[ev.Payload]] | None, Callable[[ThreadState], list[ev.Payload]]]
CASES: dict[str, Case] = {"rollback": (None, _rollback), "rename": (None, _rename), "edit": (_queued, _edit)}


def _envelopes(state: ThreadState, last: ev.Envelope, payloads: list[ev.Payload]) -> list[ev.Envelope]:
    return [
        replace(last, id=f"evt_b{state.seq + i}", type=p.TYPE, seq=state.seq + i, data=p)
        for i, p in enumerate(payloads, 1)
    ]


async def _write(store: ProjectionStore, events: list[ev.Envelope], case: Case, whole: bool) -> tuple[float, int]:
    """Fold the case's events into a written thread and write them; (CPU ms, fields written to the thread's hash)."""
    setup, make = case
    state = fold(events)
    last = events[-1]
    if setup is not None:
        for e in _envelopes(state, last, setup(state)):
            fold([e], state)
    await store.write([(state, all_indexed(state), None)])
    written: list[int] = []
    fields = document.fields

    def counting(s: ThreadState, c: Changes | None = None) -> list[bytes | str | int]:
        out = fields(s, c)
        written.append(len(out) // 2)
        return out

    document.fields = counting  # type: ignore[assignment]  # counts what the store sends, the bench's own probe
    started = time.process_time()
    changes = Changes(None if whole else state)
    for e in _envelopes(state, last, make(state)):
        changes.fold(state, e)
    await store.write([(state, [], changes)])
    elapsed = (time.process_time() - started) * 1000
    document.fields = fields
    return elapsed, written[-1]


async def main(sizes: list[int], repeat: int) -> None:
    rows: list[tuple[int, str, float, int, float, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with RedisServer(Path(tmp)) as server:
            redis = redis_client(server.url)
            store = ProjectionStore(redis)
            for runs in sizes:
                events = thread_events(runs)
                for name, case in CASES.items():
                    got: list[tuple[float, int]] = []
                    for whole in (True, False):
                        best = (float("inf"), 0)
                        for _ in range(repeat):
                            await redis.delete(*keys(TENANT, THREAD))
                            ms, n = await _write(store, events, case, whole)
                            best = (min(best[0], ms), n)
                        got.append(best)
                    rows.append((runs, name, *got[0], *got[1]))
            await redis.aclose()
    print(f"CPU ms of the projector's fold and write, best of {repeat}; fields sent to the thread's hash")
    print(f"{'runs':>8} {'case':<9}{'whole: ms':>11}{'fields':>9}{'changes: ms':>13}{'fields':>9}")
    for runs, name, ms0, n0, ms1, n1 in rows:
        print(f"{runs:>8} {name:<9}{ms0:11.1f}{n0:9d}{ms1:13.2f}{n1:9d}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[100, 2000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.repeat))
