"""Reads of a thread's parts (projections/parts.py) against a real Redis: each answers byte for byte what the
same view function answers from the whole document, however the projector wrote it (whole, or event by event
as changed parts), and the places and answers they go by (projections/places.py, questions.py) stay exactly
what a replay of the log gives after a projector crash mid-write and after a rebuild of another view version.

The threads are those of ``fixtures/replay-events.jsonl`` (tools, a subagent, a queue, an interrupt, a plan,
checkpoints, a fork with handoffs, a rollback) and a long thread of bench/frozen_state.py's shape."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import msgspec
import pytest
from msgspec.structs import replace

from treadle.core import events as ev
from treadle.core.events import Envelope, ThreadCreated, decode_event
from treadle.core.state import ThreadState, evolve, fold
from treadle.projections import check, document, parts, places, questions
from treadle.projections.changes import Changes
from treadle.projections.store import ProjectionStore, all_indexed, indexed, keys
from treadle.views import VIEW_VERSION, of_state
from treadle.views.thread import (
    ThreadView,
    lineage_node,
    queue_view,
    recent,
    run_change,
    run_view,
    thread_head,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from frozen_state import thread_events  # noqa: E402

from tests.support.unnamed_events import child_log, unnamed_log  # noqa: E402


def _recorded(tenant: str) -> list[Envelope]:
    """The recorded threads, under a tenant of the test's own (each test writes them afresh)."""
    rows = [json.loads(line) for line in (FIXTURES / "replay-events.jsonl").read_text().splitlines()]
    return [replace(decode_event(json.dumps(row["data"]).encode(), row["seq"]), tenant=tenant) for row in rows]


def _same(a, b) -> bool:
    return msgspec.json.encode(a) == msgspec.json.encode(b)


async def _assert_reads_equal_the_whole(store: ProjectionStore, state: ThreadState) -> None:
    """Every parts read of the thread answers what the view functions answer from the whole document, and
    the stored places are exactly those of the replay."""
    t = state.thread
    assert t is not None
    view = of_state.thread_view(state)
    stored = await check.read_stored(store._redis, t.tenant, t.id, [])
    assert check.compare_projection(state, stored) == []
    for run_id in [r.id for r in view.runs]:
        assert _same(await store.read(t.tenant, t.id, partial(parts.run, run_id=run_id)), run_view(view, run_id))
        assert _same(await store.read(t.tenant, t.id, partial(parts.change, run_id=run_id)), run_change(view, run_id))
    assert await store.read(t.tenant, t.id, lambda s: parts.run(s, "run_none")) is None
    for runs in (1, 2, 5, len(view.runs) + 1):
        assert _same(await store.read(t.tenant, t.id, partial(parts.recent, runs=runs)), recent(view, runs))
    latest = run_view(view, view.runs[-1].id) if view.runs else None
    assert _same(await store.read(t.tenant, t.id, parts.latest_run), latest)
    # the delegation tools' small views hold the whole document's values of the fields they read
    small = partial(ThreadView, thread=view.thread, seq=view.seq)
    assert _same(await store.read(t.tenant, t.id, parts.active_run), small(active_run_id=view.active_run_id))
    assert _same(await store.read(t.tenant, t.id, parts.first_run), small(lineage=view.lineage, runs=view.runs[:1]))
    for run in [*view.runs, None]:
        read = partial(parts.run_and_transfers, run_id=run.id if run else "run_none")
        runs = [r for r in view.runs if r.id == run.id][-1:] if run else []
        assert _same(await store.read(t.tenant, t.id, read), small(transfers=view.transfers, runs=runs))
    assert await store.read(t.tenant, t.id, lambda s: parts.change(s, "run_none")) is None
    assert _same(await store.read(t.tenant, t.id, parts.queue), queue_view(view))
    head = await store.read(t.tenant, t.id, parts.head)
    assert _same(head, thread_head(view))
    assert _same(lineage_node(head, []), lineage_node(thread_head(view), []))


async def _project(store: ProjectionStore, events: list[Envelope], batch: int) -> dict[str, ThreadState]:
    """Write ``events`` as the projector does: per batch and thread, the changed parts of a cached state (the
    first write of a thread whole), the ids the batch made addressable."""
    states: dict[str, ThreadState] = {}
    for i in range(0, len(events), batch):
        touched: dict[str, tuple[ThreadState, list[str], Changes]] = {}
        for e in events[i : i + batch]:
            state = states.setdefault(e.thread, ThreadState())
            entry = touched.get(e.thread)
            if entry is None:
                entry = touched[e.thread] = (state, [], Changes(state if state.thread is not None else None))
            entry[2].fold(state, e)
            entry[1].extend(indexed(e.data))
        await store.write(touched.values())
    return states


@pytest.mark.parametrize("batch", [1, 7, 1000])
async def test_part_reads_answer_what_the_whole_document_answers_however_it_was_written(redis, batch):
    store = ProjectionStore(redis)
    recorded = _recorded(f"parts{batch}")
    # Read along the way too: a queue that fills and drains, runs before their checkpoints.
    for upto in (30, 60, len(recorded)):
        states = await _project(store, recorded[:upto], batch)
        for state in states.values():
            await _assert_reads_equal_the_whole(store, state)
        await redis.delete(*[k for s in states.values() if s.thread for k in keys(s.thread.tenant, s.thread.id)])
    assert len(states) == 3


async def test_part_reads_of_a_long_thread_written_run_by_run(redis):
    store = ProjectionStore(redis)
    events = [replace(e, tenant="partslong") for e in thread_events(60)]
    [state] = (await _project(store, events, 10)).values()
    assert len(state.runs) == 60
    await _assert_reads_equal_the_whole(store, state)


async def test_places_stay_the_replays_after_a_projector_crash_mid_write(redis):
    """A projector wrote one thread of its batch and died before the other's write and the ack: the next one
    folds both threads from the log (nothing cached) and writes them whole; a places hash lost on its own
    (or written before places existed) makes a changed-parts write refused and sent whole."""
    store = ProjectionStore(redis)
    recorded = _recorded("partscrash")
    half = len(recorded) // 2
    threads = list(dict.fromkeys(e.thread for e in recorded[: half + 20]))
    assert len(threads) > 1
    states = await _project(store, recorded[:half], 5)
    # The batch after `half`: the first projector's write of the first thread landed, the second's did not.
    after = recorded[half : half + 20]
    first = fold([e for e in recorded[: half + 20] if e.thread == threads[0]])
    await store.write([(first, [], Changes(None))])
    # The next projector: every state folded from the log before the batch, written whole with the batch.
    again: dict[str, tuple[ThreadState, list[str], Changes]] = {}
    for e in after:
        if e.thread not in again:
            state = fold([x for x in recorded[:half] if x.thread == e.thread])
            again[e.thread] = (state, all_indexed(state), Changes(None))
        evolve(again[e.thread][0], e)
        again[e.thread][1].extend(indexed(e.data))
    await store.write(again.values())
    for thread in threads:
        await _assert_reads_equal_the_whole(store, fold([e for e in recorded[: half + 20] if e.thread == thread]))

    # Places and answers lost on their own: reads that follow them fall back (Missing), the next changed-parts
    # write is sent whole.
    state = states[threads[0]] = fold([e for e in recorded[: half + 20] if e.thread == threads[0]])
    tenant, thread = state.thread.tenant, state.thread.id
    await redis.delete(keys(tenant, thread)[4])
    for reader in (partial(parts.recent, runs=3), partial(parts.run, run_id=state.runs[0].id), parts.queue):
        with pytest.raises(parts.Missing):
            await store.read(tenant, thread, reader)
    rest = [e for e in recorded[half + 20 :] if e.thread == thread]
    for i, e in enumerate(rest):  # a fork (changed parts), then a rollback (changed parts its fold recorded)
        changes = Changes(state)
        evolve(state, e)
        changes.note(e.data)
        assert not changes.everything
        if i == 0:
            assert await store._pipeline([(state, [], changes)]) == [-1]  # refused: the write resends it whole
        await store.write([(state, [], changes)])
        await _assert_reads_equal_the_whole(store, state)


async def test_a_rebuild_of_another_view_version_replaces_the_places_whole(redis):
    """Parts of another view version read as missing (the reader takes the whole path, which folds the log),
    changed parts are refused on top of them, and the whole write of a rebuild leaves no place behind."""
    store = ProjectionStore(redis)
    recorded = _recorded("partsversion")
    states = await _project(store, recorded, 10)
    state = next(s for s in states.values() if s.runs)
    tenant, thread = state.thread.tenant, state.thread.id
    doc_key, places_key = keys(tenant, thread)[0], keys(tenant, thread)[4]
    await redis.hset(doc_key, "v", VIEW_VERSION + 1)
    await redis.hset(places_key, mapping={"v": VIEW_VERSION + 1, "r:run_gone": "0"})
    with pytest.raises(parts.Missing):
        await store.read(tenant, thread, lambda s: parts.run(s, state.runs[0].id))
    assert await store._pipeline([(state, [], Changes(state))]) == [-1]
    await store.write([(state, all_indexed(state), None)])  # as rebuild() writes every thread
    assert await redis.hget(places_key, "r:run_gone") is None
    assert await redis.hgetall(places_key) == places.stored(state) | questions.stored(state)
    await _assert_reads_equal_the_whole(store, state)


async def test_part_reads_never_answer_with_another_threads_or_tenants_items(redis):
    """A run of one thread read through another (ids are looked up per thread), a thread read under another
    tenant (its keys are the tenant's), and ids shaped like places or positions, all find nothing."""
    store = ProjectionStore(redis)
    states = await _project(store, _recorded("partshostile"), 10)
    a, b = [s for s in states.values() if s.runs][:2]
    run_a = a.runs[0].id
    assert await store.read("partshostile", b.thread.id, partial(parts.run, run_id=run_a)) is None
    assert await store.read("partshostile", b.thread.id, partial(parts.change, run_id=run_a)) is None
    with pytest.raises(parts.Missing):
        await store.read("partsother", a.thread.id, partial(parts.run, run_id=run_a))
    for odd in ("", "0", f"{run_a},0", "seq", f"r:{run_a}", "*"):
        assert await store.read("partshostile", a.thread.id, partial(parts.run, run_id=odd)) is None
    # A document with a hole (a part gone) is not answered from: the reader takes the whole path.
    await redis.hdel(keys("partshostile", a.thread.id)[0], f"l:messages:{len(a.messages) - 1}")
    await redis.hdel(keys("partshostile", a.thread.id)[4], "q:queue")
    for reader in (parts.queue, partial(parts.recent, runs=3)):
        with pytest.raises(parts.Missing):
            await store.read("partshostile", a.thread.id, reader)


@pytest.mark.parametrize("batch", [1, 5])
async def test_events_that_change_what_they_do_not_name_write_only_what_changed(redis, monkeypatch, batch):
    """Rollbacks to the middle (runs rolled back, checkpoints gone stale), edits, a delegation, context
    deliveries, steers joined and carried over, renames, a resume failure: not local, or moving messages, their
    writes carry the items their folds recorded rewriting (``core.touched``), never the whole thread; after
    every write the document, places, answers, summary and index are a replay's byte for byte (``treadle
    check``'s comparison), and every read answers what the whole document answers."""
    written: list[list] = []

    def recording(state, changes=None):
        written.append(out := fields(state, changes))
        return out

    fields = document.fields
    monkeypatch.setattr(document, "fields", recording)
    store = ProjectionStore(redis)
    tenant = f"partsunnamed{batch}"
    logs = [_recorded(tenant), *([replace(e, tenant=tenant) for e in log] for log in (unnamed_log(), child_log()))]
    states: dict[str, ThreadState] = {}
    unnamed = 0
    for log in logs:
        for i in range(0, len(log), batch):
            by_thread: dict[str, list[Envelope]] = {}
            for e in log[i : i + batch]:
                by_thread.setdefault(e.thread, []).append(e)
            for thread, events in by_thread.items():
                state = states.setdefault(thread, ThreadState())
                changes = Changes(state if state.thread is not None else None)
                ids: list[str] = []
                for e in events:
                    changes.fold(state, e)
                    ids.extend(indexed(e.data))
                await store.write([(state, ids, changes)])
                if changes.everything:
                    continue
                await _assert_reads_equal_the_whole(store, state)
                if all(e.data.TRAITS.local for e in events):
                    continue
                unnamed += 1
                items = [str(k) for k in written[-1][0::2] if str(k).startswith("l:")]
                total = sum(len(getattr(state, n)) for n in document.LISTS)
                assert len(items) < total or total == 0, [e.type for e in events]
                assert "l:messages:0" not in items
    assert unnamed >= 25 // batch  # the recorded rollback and deliveries, and every kind of unnamed_log()
    for state in states.values():
        await _assert_reads_equal_the_whole(store, state)


async def test_steers_that_move_are_written_as_their_folds_recorded_and_placed_anew(redis):
    """L3: a steer joining where its runtime took it in (later messages shift), a late steer queued as its own
    run, and undelivered steers carried over to the run that supersedes theirs move messages their events do
    not all name: their folds record what moved and the runs it left, and each write carries what moved and
    re-places those runs, never the whole thread."""
    store = ProjectionStore(redis)
    events = [replace(e, tenant="partssteers") for e in thread_events(3)]
    [state] = (await _project(store, events, 100)).values()
    last = events[-1]

    def queued(n: int, message: str, **kw) -> ev.RunQueued:
        return ev.RunQueued(
            run_id=f"run_{n}",
            ordinal=n,
            message_id=message,
            text=f"request {n}",
            root_node_id=f"nod_{n}",
            attempt_id=f"att_{n}",
            mode="auto",
            disposition="queued",
            provider="scripted",
            **kw,
        )

    payloads: list[ev.Payload] = [
        queued(4, "msg_4"),
        ev.RunSteered(run_id="run_4", message_id="msg_s1", text="first", steering="native"),
        ev.RunSteered(run_id="run_4", message_id="msg_s2", text="second", steering="native"),
        ev.SteerJoined(run_id="run_4", attempt_id="att_4", message_id="msg_s1"),
        queued(5, "msg_s2"),
        queued(6, "msg_6", supersedes_run_id="run_4"),
        queued(7, "msg_s2"),  # run 5 is left without a message: its place goes
    ]
    for i, p in enumerate(payloads, 1):
        changes = Changes(state)
        changes.fold(state, replace(last, id=f"evt_steer{i}", type=p.TYPE, seq=last.seq + i, data=p))
        await store.write([(state, list(indexed(p)), changes)])
        assert not changes.everything, p.TYPE
        await _assert_reads_equal_the_whole(store, state)
    assert state.run_message_positions("run_5") == []
    assert [m.run_id for m in state.messages if m.id in ("msg_s1", "msg_s2")] == ["run_7", "run_6"]


async def test_messages_that_change_runs_are_placed_anew_whatever_event_moved_them(redis):
    """A message leaves its run only when messages move (a steer carried over to the run that supersedes its
    own): the fold that moves them says where they are and which runs they left, so the old run's places lose
    them even under an event that looked local, and the write is not whole."""
    store = ProjectionStore(redis)
    [state] = (await _project(store, [replace(e, tenant="partsmoves") for e in thread_events(3)], 100)).values()
    changes = Changes(state)
    first, last = state.runs[0].id, state.runs[-1].id
    moved = [i for i, m in enumerate(state.messages) if m.run_id == first]
    for i in moved:  # as the fold of a carried-over steer does, under an event noted as local
        state.messages[i].run_id = last
    state.messages_moved(moved, [first])
    state.seq += 1  # the event that moved them
    await store.write([(state, [], changes)])
    assert not changes.everything
    await _assert_reads_equal_the_whole(store, state)
    got = await store.read("partsmoves", state.thread.id, partial(parts.run, run_id=first))
    assert got is not None and got.messages == []


async def test_small_fields_are_written_when_they_change_and_only_on_top_of_their_base(redis, monkeypatch):
    """Issue 24: a write leaves out the small fields its state wrote last with the same JSON (a provider thread's
    covered ordinals grow with every run), so changed parts are only written on top of the document at their
    base: another writer's document in between (a reader's refold) makes the write go whole."""
    carried: list[list] = []

    def recording(state, changes=None):
        carried.append(out := fields(state, changes))
        return out

    fields = document.fields
    monkeypatch.setattr(document, "fields", recording)
    store = ProjectionStore(redis)
    events = [replace(e, tenant="partssmall") for e in thread_events(12)]
    [state] = (await _project(store, events[:20], 20)).values()
    doc_key = keys(state.thread.tenant, state.thread.id)[0]
    seen: set[str] = set()
    for e in events[20:]:
        changes = Changes(state)
        evolve(state, e)
        changes.note(e.data)
        await store.write([(state, [], changes)])
        written = {str(k) for k in carried[-1][0::2] if str(k).startswith("f:")}
        assert "f:thread" not in written  # never changes once the thread is created
        seen |= written
        assert document.assemble(await redis.hgetall(doc_key)) == msgspec.json.encode(of_state.thread_view(state))
    assert {"f:provider_threads", "f:active_run_id", "f:last_activity_at"} <= seen
    await _assert_reads_equal_the_whole(store, state)

    # Another writer (a reader that folded the log further) wrote a newer document meanwhile.
    events = [replace(e, tenant="partssmall2") for e in events]
    cached, other = fold(events[:40]), fold(events[:45])
    await store.write([(cached, [], None)])
    await store.write([(other, all_indexed(other), None)])
    changes = Changes(cached)
    for e in events[40:50]:
        evolve(cached, e)
        changes.note(e.data)
    assert changes.base < other.seq < cached.seq and not changes.everything
    assert await store._pipeline([(cached, [], changes)]) == [-1]  # refused: the write resends it whole
    await store.write([(cached, [], changes)])
    await _assert_reads_equal_the_whole(store, cached)


async def test_a_thread_without_runs_has_no_latest_run(redis):
    store = ProjectionStore(redis)
    created = next(e for e in _recorded("partsempty") if isinstance(e.data, ThreadCreated))
    [state] = (await _project(store, [created], 1)).values()
    assert state.thread is not None and not state.runs
    assert await store.read(state.thread.tenant, state.thread.id, parts.latest_run) is None
    alone = await store.read(state.thread.tenant, state.thread.id, partial(parts.recent, runs=3))
    assert _same(alone, recent(of_state.thread_view(state), 3))


async def test_reads_by_script_survive_a_redis_that_lost_its_scripts(redis):
    """The reads that follow an answer to its items are sent by their SHA: a Redis restarted or flushed of its
    scripts gets them again, and the answer is the same."""
    store = ProjectionStore(redis)
    [state] = (await _project(store, [replace(e, tenant="partsflush") for e in thread_events(3)], 100)).values()
    await _assert_reads_equal_the_whole(store, state)
    await redis.script_flush()
    await _assert_reads_equal_the_whole(store, state)
