"""Pages read from the projection store (projections/store.py) against a real Redis: a slice of a thread's
list is exactly those items of its document, read with the list's length and sequence at once; the tenant's
threads page newest first by rank, threads created in the same millisecond included, never skipping or
repeating one whatever is created meanwhile."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta

from treadle.core import events as ev
from treadle.core.state import ThreadState, fold
from treadle.projections.store import ProjectionStore, all_indexed, encode_state, keys

_n = itertools.count(1)
T0 = datetime(2026, 12, 4, tzinfo=UTC)


def _state(tenant: str, thread: str, runs: int, created: datetime = T0) -> ThreadState:
    def envelope(data: ev.Payload) -> ev.Envelope:
        n = next(_n)
        return ev.Envelope(
            id=f"evt_pg{n}",
            type=data.TYPE,
            tenant=tenant,
            thread=thread,
            at=created + timedelta(milliseconds=n),
            command_id="cmd_pg",
            actor="test",
            seq=n,
            data=data,
        )

    events = [envelope(ev.ThreadCreated(thread_id=thread, workspace="w", created_by="u"))]
    for i in range(1, runs + 1):
        events.append(envelope(ev.MessageCreated(message_id=f"msg_{thread}_{i}", role="user", text=f"m{i}")))
        events.append(
            envelope(
                ev.RunQueued(
                    run_id=f"run_{thread}_{i}",
                    ordinal=i,
                    message_id=f"msg_{thread}_{i}",
                    text=f"m{i}",
                    root_node_id=f"node_{thread}_{i}",
                    attempt_id=f"att_{thread}_{i}",
                    mode="auto",
                    disposition="queued",
                    provider="scripted",
                )
            )
        )
    state = fold(events)
    state.thread.created_at = created  # threads made in the same ms, on purpose
    return state


async def test_a_slice_is_those_items_of_the_document_with_its_length_and_sequence(redis):
    store = ProjectionStore(redis)
    state = _state("pages", "thr_slice", runs=7)
    await store.write([(state, all_indexed(state), None)])
    runs = [json.dumps(r, separators=(",", ":")).encode() for r in json.loads(encode_state(state))["runs"]]
    for start, count in ((0, 3), (3, 3), (6, 3), (7, 5), (0, 200)):
        got = await store.slice("pages", "thr_slice", "runs", start, count)
        assert got is not None and (got.seq, got.total) == (state.seq, 7)
        assert [json.loads(i) for i in got.items] == [json.loads(r) for r in runs[start : start + count]]
    part = await store.part("pages", "thr_slice", "requests")
    assert part == (state.seq, b"[]")
    assert await store.slice("pages", "thr_none", "runs", 0, 3) is None  # not projected: the caller folds the log
    assert await store.slice("other", "thr_slice", "runs", 0, 3) is None  # another tenant's keys
    await redis.hset(keys("pages", "thr_slice")[0], "v", "0")  # another view version counts as nothing
    assert await store.slice("pages", "thr_slice", "runs", 0, 3) is None
    assert await store.part("pages", "thr_slice", "requests") is None


async def test_threads_page_newest_first_by_rank_through_ties_and_new_threads(redis):
    store = ProjectionStore(redis)
    tenant = "pagesties"
    same_ms = [f"thr_tie{i}" for i in range(5)]
    for thread in ["thr_old", *same_ms]:
        created = T0 if thread == "thr_old" else T0 + timedelta(seconds=1)
        await store.write([(_state(tenant, thread, runs=1, created=created), [], None)])
    first = await store.threads(tenant, 2)
    seen = [t for _, t, _ in first]
    assert all(summary for _, _, summary in first)
    later = _state(tenant, "thr_new", runs=1, created=T0 + timedelta(seconds=2))
    await store.write([(later, [], None)])  # newer than all: at the top, ahead of the cursor
    after = first[-1][:2]
    while page := await store.threads(tenant, 2, after):
        seen += [t for _, t, _ in page]
        after = page[-1][:2]
    assert seen == sorted(same_ms, reverse=True) + ["thr_old"]
    assert [t for _, t, _ in await store.threads(tenant, 10)] == ["thr_new", *sorted(same_ms, reverse=True), "thr_old"]
