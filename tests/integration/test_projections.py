"""The projection writer against real JetStream and Redis: replay equals live, redelivery is a no-op."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.helpers import wait_for
from treadle.core import events as ev
from treadle.core.state import ThreadState, fold
from treadle.eventlog import streams
from treadle.eventlog.errors import Unavailable
from treadle.eventlog.log import EventLog
from treadle.projections import changes as changes_
from treadle.projections import check
from treadle.projections.connect import redis_client
from treadle.projections.store import EPOCH_KEY, ProjectionStore, encode_state, keys
from treadle.projector import service
from treadle.projector.service import ACK_EVERY, Projector
from treadle.runtime import partitions
from treadle.runtime.settings import ProjectorSettings
from treadle.views import VIEW_VERSION

_n = itertools.count()
T0 = datetime(2026, 12, 2, tzinfo=UTC)


def envelope(thread: str, data: ev.Payload, i: int) -> ev.Envelope:
    return ev.Envelope(
        id=f"evt_p{next(_n)}",
        type=data.TYPE,
        tenant="proj",
        thread=thread,
        at=T0 + timedelta(seconds=i),
        command_id="cmd_p",
        actor="test",
        data=data,
    )


async def write_thread(log: EventLog, thread: str) -> int:
    seq = await log.append(
        "proj", thread, 0, [envelope(thread, ev.ThreadCreated(thread_id=thread, workspace="w", created_by="u"), 0)]
    )
    seq = await log.append(
        "proj",
        thread,
        seq,
        [
            envelope(
                thread,
                ev.RunQueued(
                    run_id="run_1",
                    ordinal=1,
                    message_id="msg_1",
                    text="hi",
                    root_node_id="node_1",
                    attempt_id="att_1",
                    mode="auto",
                    disposition="queued",
                    provider="scripted",
                ),
                2,
            ),
            envelope(thread, ev.RunDispatched(run_id="run_1"), 3),
        ],
    )
    for i in range(5):
        seq = await log.append(
            "proj",
            thread,
            seq,
            [
                envelope(
                    thread,
                    ev.MessageDelta(
                        message_id="msg_2", run_id="run_1", attempt_id="att_1", node_id="node_1", text=f"part{i} "
                    ),
                    4 + i,
                )
            ],
        )
    return seq


async def complete_reply(log: EventLog, thread: str, last: int) -> int:
    """Append the completion of ``write_thread``'s streamed reply (``msg_2``) with the text "done"."""
    done = ev.MessageCompleted(message_id="msg_2", run_id="run_1", attempt_id="att_1", node_id="node_1", text="done")
    return await log.append("proj", thread, last, [envelope(thread, done, 20)])


@pytest.fixture
async def projector(nc, redis):
    await streams.ensure(nc.jetstream())
    p = Projector(nc, redis, ProjectorSettings())
    await p.start()
    yield p
    await p.stop()


async def test_projection_equals_a_replay_of_the_log_and_ignores_redelivery(nc, redis, projector):
    log, store = EventLog(nc), ProjectionStore(redis)
    thread = f"thr_proj{next(_n)}"
    last = await write_thread(log, thread)
    replay = encode_state(fold(await log.read("proj", thread)))

    async def caught_up():
        state = await store.view("proj", thread)
        return state is not None and state.seq == last

    await wait_for(caught_up, what="projector caught up")
    assert await store.doc("proj", thread) == replay
    assert await store.thread_of("proj", "run_1") == thread

    # A redelivered batch, and an older state written late, both leave the document as it is.
    partial = fold((await log.read("proj", thread))[:3])
    await store.write([(partial, ["run_1"], None)])
    await projector._project(0, [])
    assert await store.doc("proj", thread) == replay
    state = await store.view("proj", thread)
    assert state.messages[-1].text == "part0 part1 part2 part3 part4 "


async def test_a_thread_lost_from_redis_is_refolded_from_the_log(nc, redis, projector):
    log, store = EventLog(nc), ProjectionStore(redis)
    thread = f"thr_proj{next(_n)}"
    last = await write_thread(log, thread)
    await wait_for(lambda: store.doc("proj", thread), what="first projection")
    await redis.delete(f"treadle:{{proj}}:thread:{thread}")
    await redis.hdel("treadle:{proj}:runs", "run_1", "node_1")  # a restarted Redis lost the index with it
    projector._states.clear()  # as after a restart: nothing cached in memory either
    seq = await complete_reply(log, thread, last)

    async def refolded():
        state = await store.view("proj", thread)
        return state if state is not None and state.seq == seq else None

    state = await wait_for(refolded, what="thread refolded after losing its document")
    assert state.thread is not None and len(state.runs) == 1 and state.messages[-1].text == "done"
    assert await store.thread_of("proj", "run_1") == thread and await store.thread_of("proj", "node_1") == thread
    assert await store.doc("proj", thread) == encode_state(fold(await log.read("proj", thread)))


async def test_a_restarted_projector_writes_only_what_the_next_event_changed(nc, redis, projector):
    """A thread whose document Redis holds at the event's base is not written whole by a projector that had to
    fold it again from the log (a restart, a partition's new owner): its write costs what the event changed."""
    log, store = EventLog(nc), ProjectionStore(redis)
    thread = f"thr_proj{next(_n)}"
    last = await write_thread(log, thread)
    await wait_for(lambda: store.doc("proj", thread), what="first projection")
    key = f"treadle:{{proj}}:thread:{thread}"
    await redis.hset(key, "l:messages:0", b"untouched")  # the user's message: the next event does not change it
    projector._states.clear()  # as after a restart: nothing cached in memory
    seq = await complete_reply(log, thread, last)

    async def written():
        return int(await redis.hget(key, "seq") or 0) >= seq

    await wait_for(written, what="the event projected")
    assert await redis.hget(key, "l:messages:0") == b"untouched"  # a whole write would have replaced it
    assert b'"text":"done"' in await redis.hget(key, "l:messages:1")


async def test_changed_parts_are_never_written_on_top_of_a_flushed_document(nc, redis, projector):
    log, store = EventLog(nc), ProjectionStore(redis)
    thread = f"thr_proj{next(_n)}"
    last = await write_thread(log, thread)
    await wait_for(lambda: store.doc("proj", thread), what="first projection")
    await redis.delete(f"treadle:{{proj}}:thread:{thread}")  # the projector still caches the thread
    seq = await complete_reply(log, thread, last)

    async def whole():
        state = await store.view("proj", thread)
        return state if state is not None and state.seq == seq else None

    await wait_for(whole, what="the whole document written again")
    assert await store.doc("proj", thread) == encode_state(fold(await log.read("proj", thread)))


async def test_L9_1_the_projector_never_folds_past_an_event_its_read_did_not_return(nc, redis):
    """Issue 6 (a chaos mismatch): any replica answers a direct get, and one that is catching up returns a
    thread without its newest events. Folded on, the delivered event would land on a state missing them, for
    good. The read ending before the event's predecessor (its append's fence) is retried instead; here the
    predecessor is gone from the stream, as it is from a lagging replica's answer."""
    await streams.ensure(nc.jetstream())
    log, store = EventLog(nc), ProjectionStore(redis)
    projector = Projector(nc, redis, ProjectorSettings())  # not consuming: the test hands it its batch
    thread = f"thr_proj{next(_n)}"
    seq = await log.append(
        "proj", thread, 0, [envelope(thread, ev.ThreadCreated(thread_id=thread, workspace="w", created_by="u"), 0)]
    )
    await store.write([(fold(await log.read("proj", thread)), [], None)])
    before = await store.doc("proj", thread)
    unseen = await log.append(
        "proj", thread, seq, [envelope(thread, ev.MessageCreated(message_id="msg_1", role="user", text="unseen"), 1)]
    )
    await log.append(
        "proj",
        thread,
        unseen,
        [envelope(thread, ev.MessageCreated(message_id="msg_2", role="user", text="delivered"), 2)],
    )
    delivered = await nc.jetstream().pull_subscribe(f"treadle.evt.proj.{thread}.>", stream="TREADLE_EVENTS")
    msgs = [m for m in await delivered.fetch(3, timeout=5) if m.metadata.sequence.stream > unseen]
    await nc.jetstream().delete_msg("TREADLE_EVENTS", unseen)  # the read will not return it

    try:
        with pytest.raises(Unavailable):
            await projector._project(0, msgs)
        assert await store.doc("proj", thread) == before
    finally:  # a projector sharing this stream later must not wait for the deleted event either
        await nc.jetstream().purge_stream("TREADLE_EVENTS", subject=f"treadle.evt.proj.{thread}.>")


async def test_events_delivered_to_a_replica_that_died_are_projected_by_the_next_and_not_acked_unseen(nc, redis):
    """A projector replica that dies with a pull answered but not acked: its partition's next reader starts
    after the acknowledged floor, so the thread is projected now, not after the ack wait (AckPolicy.ALL
    would otherwise acknowledge those deliveries with the next batch, unseen)."""
    await streams.ensure(nc.jetstream())
    log, store = EventLog(nc), ProjectionStore(redis)
    first = Projector(nc, redis, ProjectorSettings())
    await first.start()
    count = first.work.partitions
    await first.stop()
    stray, later = f"thr_proj{next(_n)}", None
    while later is None or partitions.partition_of(later, count) != partitions.partition_of(stray, count):
        later = f"thr_proj{next(_n)}"
    partition = partitions.partition_of(stray, count)
    last = await write_thread(log, stray)
    dead = await nc.jetstream().pull_subscribe_bind(f"projector-p{partition}", stream="TREADLE_EVENTS")
    delivered = await dead.fetch(1000, timeout=2)  # the dying replica's last pull
    assert delivered[-1].metadata.sequence.stream == last
    await dead.unsubscribe()
    await write_thread(log, later)  # a batch after it: acking it must not acknowledge the stray ones unseen

    second = Projector(nc, redis, ProjectorSettings())
    await second.start()
    try:
        replay = encode_state(fold(await log.read("proj", stray)))
        await wait_for(lambda: _doc_is(store, stray, replay), timeout=10, what="the stray thread projected")
    finally:
        await second.stop()


async def test_batches_written_share_an_ack_and_a_stopped_projector_acks_what_it_wrote(nc, redis):
    """Batches written within ``ACK_EVERY`` are acknowledged by one ack (AckPolicy.ALL); a projector stopped
    before that ack went acknowledges what it wrote, so its next reader does not read it again."""
    await streams.ensure(nc.jetstream())
    log, store = EventLog(nc), ProjectionStore(redis)
    projector = Projector(nc, redis, ProjectorSettings())
    await projector.start()
    thread = f"thr_proj{next(_n)}"
    partition = partitions.partition_of(thread, projector.work.partitions)
    service.ACK_EVERY = 3600.0  # held back until the stop
    try:
        last = await write_thread(log, thread)
        replay = encode_state(fold(await log.read("proj", thread)))
        await wait_for(lambda: _doc_is(store, thread, replay), timeout=10, what="the thread projected")
        info = await nc.jetstream().consumer_info("TREADLE_EVENTS", f"projector-p{partition}")
        assert info.ack_floor.stream_seq < last and info.num_ack_pending > 0
    finally:
        service.ACK_EVERY = ACK_EVERY
        await projector.stop()
    info = await nc.jetstream().consumer_info("TREADLE_EVENTS", f"projector-p{partition}")
    assert info.ack_floor.stream_seq >= last and info.num_ack_pending == 0


async def _doc_is(store: ProjectionStore, thread: str, expected: bytes) -> bool:
    return await store.doc("proj", thread) == expected


def _created(thread: str) -> ThreadState:
    return fold(
        [
            ev.Envelope(
                id=f"evt_w{next(_n)}",
                type="thread.created",
                tenant="proj",
                thread=thread,
                at=T0,
                command_id="cmd_w",
                actor="test",
                seq=next(_n) + 1,
                data=ev.ThreadCreated(thread_id=thread, workspace="w", created_by="u"),
            )
        ]
    )


async def test_writes_made_while_redis_forgot_the_script_load_it_again(redis):
    store = ProjectionStore(redis)
    state = _created(f"thr_script{next(_n)}")
    await redis.script_flush()
    await store.write([(state, [], None)])
    assert (await store.view("proj", state.thread.id)).seq == state.seq


async def test_a_write_on_a_connection_redis_dropped_goes_again_on_a_fresh_one(redis_url, redis):
    """The store packs and sends its writes on a pooled connection itself: one that died with a restarted
    Redis is retried once on a fresh connection (as ``connect.redis_client`` retries any command), and every
    reply is read, so the connection goes back to the pool in step with Redis."""
    client = redis_client(redis_url)
    store = ProjectionStore(client)
    first, second = _created(f"thr_dropped{next(_n)}"), _created(f"thr_dropped{next(_n)}")
    await store.write([(first, [], None)])
    await redis.client_kill_filter(_type="normal", skipme=True)  # the store's pooled connection too
    await store.write([(first, [], None), (second, [], None)])  # the first again: refused as not newer
    assert await store._pipeline([(first, [], None), (second, [], None)]) == [0, 0]
    assert (await store.view("proj", second.thread.id)).seq == second.seq
    await client.aclose()


async def test_overlapping_writes_all_land_and_a_cancelled_writer_strands_nobody(redis):
    """Writes of several partitions at once share pipelines; one whose caller is cancelled (its partition
    stopped) neither loses the others' writes nor keeps them waiting."""
    store = ProjectionStore(redis)
    states = [_created(f"thr_group{next(_n)}") for _ in range(12)]
    cancelled = asyncio.create_task(store.write([(states[0], [], None)]))
    await asyncio.sleep(0)  # let it queue its write: ordering the two tasks, not waiting for time
    cancelled.cancel()
    await asyncio.wait_for(asyncio.gather(*(store.write([(s, [], None)]) for s in states[1:])), 10)
    for s in states[1:]:
        assert (await store.view("proj", s.thread.id)).seq == s.seq


async def test_a_document_of_another_view_version_is_missing_to_readers_and_replaced_whole(redis):
    """Bumping the view version rebuilds: a stored document of another version reads as missing, changed
    parts are refused on top of it, and the whole document written again replaces every part of it."""
    store = ProjectionStore(redis)
    state = _created(f"thr_version{next(_n)}")
    await store.write([(state, [], None)])
    key = f"treadle:{{proj}}:thread:{state.thread.id}"
    await redis.hset(key, mapping={"v": VIEW_VERSION + 1, "f:left_over": "1"})
    assert await store.doc("proj", state.thread.id) is None
    changes = changes_.Changes(state)
    assert await store._pipeline([(state, [], changes)]) == [-1]
    assert await store._pipeline([(state, [], None)]) == [1]
    assert await store.doc("proj", state.thread.id) == encode_state(state)
    assert await redis.hget(key, "f:left_over") is None


async def test_a_projector_whose_view_version_has_no_epoch_rebuilds_every_document(nc, redis):
    """The epoch marker is per view version: a projector of a new version finds none and rebuilds from the log."""
    await streams.ensure(nc.jetstream())
    log, store = EventLog(nc), ProjectionStore(redis)
    thread = f"thr_proj{next(_n)}"
    last = await write_thread(log, thread)
    await redis.delete(EPOCH_KEY)  # as a projector of a new version finds it: no epoch of its version yet
    key = f"treadle:{{proj}}:thread:{thread}"
    await redis.hset(key, mapping={"seq": last, "v": VIEW_VERSION - 1})
    await redis.hset(keys("proj", thread)[4], mapping={"seq": last, "v": VIEW_VERSION - 1, "r:run_gone": "0"})
    projector = Projector(nc, redis, ProjectorSettings())
    await projector._ensure_epoch()
    state = fold(await log.read("proj", thread))
    assert await store.doc("proj", thread) == encode_state(state)
    # Its places too: of this version, exactly the replay's (nothing of the old ones left), as `treadle check` sees.
    assert check.compare_projection(state, await check.read_stored(redis, "proj", thread, [])) == []
    assert await store.epoch() is not None
