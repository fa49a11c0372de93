"""The event log port's contract, run on the JetStream log (a real nats-server) and on its in-memory twin:
OCC on the thread's last sequence, atomic batches, de-duplication by envelope id, fences wider than a
thread, reads in order, and the subject counts admission relies on."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import nats
import pytest

from treadle.core import events as ev
from treadle.eventlog import streams, subjects
from treadle.eventlog.errors import Conflict, Rejected
from treadle.eventlog.log import EventLog
from treadle.memory import MemoryEventLog
from treadle.ports import EventLog as EventLogPort

_n = itertools.count()


@pytest.fixture(params=["jetstream", "memory"])
async def log(request, nats_url) -> AsyncIterator[EventLogPort]:
    if request.param == "memory":
        yield MemoryEventLog()
        return
    nc = await nats.connect(nats_url, connect_timeout=5)
    await streams.ensure(nc.jetstream())
    yield EventLog(nc)
    await nc.close()


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:12]}"  # the broker is shared by the session: each test its own tenant


def envelope(tenant: str, thread: str, data: ev.Payload, id_: str | None = None) -> ev.Envelope:
    return ev.Envelope(
        id=id_ or f"evt_{next(_n):06d}_{uuid.uuid4().hex[:8]}",
        type=data.TYPE,
        tenant=tenant,
        thread=thread,
        at=datetime.now(UTC),
        command_id="cmd_c",
        actor="test",
        data=data,
    )


def note(tenant: str, thread: str, text: str, id_: str | None = None) -> ev.Envelope:
    return envelope(tenant, thread, ev.MessageCreated(message_id=f"msg_{next(_n)}", role="user", text=text), id_)


def created(tenant: str, thread: str) -> ev.Envelope:
    return envelope(tenant, thread, ev.ThreadCreated(thread_id=thread, workspace="w", created_by="u"))


async def test_an_append_is_fenced_on_the_threads_last_sequence(log, tenant):
    first = await log.append(tenant, "thr_a", 0, [note(tenant, "thr_a", "a")])
    with pytest.raises(Conflict) as stale:
        await log.append(tenant, "thr_a", 0, [note(tenant, "thr_a", "b")])
    assert stale.value.actual_seq == first
    other = await log.append(tenant, "thr_b", 0, [note(tenant, "thr_b", "elsewhere")])  # not fenced on thr_a
    assert other > first and await log.last_seq(tenant, "thr_a") == first
    second = await log.append(tenant, "thr_a", first, [note(tenant, "thr_a", "b")])
    events = await log.read(tenant, "thr_a")
    assert [e.data.text for e in events] == ["a", "b"] and [e.seq for e in events] == [first, second]
    assert second > other  # one sequence over every thread


async def test_a_batch_lands_whole_with_contiguous_sequences_or_not_at_all(log, tenant):
    start = await log.append(tenant, "thr_b", 0, [note(tenant, "thr_b", "start")])
    with pytest.raises(Conflict):
        await log.append(tenant, "thr_b", 0, [note(tenant, "thr_b", x) for x in "xyz"])
    with pytest.raises(Rejected):
        await log.append(tenant, "thr_b", start, [note(tenant, "thr_b", "ok"), note(tenant, "thr_b", "x" * 2_000_000)])
    assert [e.data.text for e in await log.read(tenant, "thr_b")] == ["start"]
    last = await log.append(tenant, "thr_b", start, [note(tenant, "thr_b", x) for x in "123"])
    events = await log.read(tenant, "thr_b")
    assert [e.data.text for e in events] == ["start", "1", "2", "3"]
    assert [e.seq for e in events[1:]] == [last - 2, last - 1, last]
    assert [e.data.text for e in await log.read(tenant, "thr_b", after=events[1].seq)] == ["2", "3"]


async def test_a_repeated_envelope_is_not_stored_twice(log, tenant):
    """A retried append of events that already landed: the fence is checked first (a stale one conflicts), then
    a single envelope already stored is acknowledged with its first sequence and a batch holding one
    conflicts; either way the log holds each envelope once."""
    e = note(tenant, "thr_d", "once", id_=f"evt_once_{tenant}")
    seq = await log.append(tenant, "thr_d", 0, [e])
    with pytest.raises(Conflict) as stale:
        await log.append(tenant, "thr_d", 0, [e])
    assert stale.value.actual_seq == seq
    assert await log.append(tenant, "thr_d", seq, [e]) == seq
    later = await log.append(tenant, "thr_d", seq, [note(tenant, "thr_d", "later")])
    assert await log.append(tenant, "thr_d", later, [e]) == seq
    assert await log.append_checked(tenant, "thr_d", later, [e]) == (seq, True)  # said to be a repeat
    with pytest.raises(Conflict):
        await log.append(tenant, "thr_d", later, [note(tenant, "thr_d", "new"), e])
    assert [x.data.text for x in await log.read(tenant, "thr_d")] == ["once", "later"]


async def test_a_new_thread_fenced_on_its_tenants_creations(log, tenant):
    creations = subjects.thread_creations(tenant)
    assert await log.last_seq_of(creations) == 0
    landed = await log.append(tenant, "thr_f1", 0, [created(tenant, "thr_f1")], fence=(creations, 0))
    with pytest.raises(Conflict):
        await log.append(tenant, "thr_f2", 0, [created(tenant, "thr_f2")], fence=(creations, 0))
    assert await log.last_seq_of(creations) == landed
    await log.append(tenant, "thr_f1", landed, [note(tenant, "thr_f1", "not a creation")])
    assert await log.last_seq_of(creations) == landed
    again = await log.append(tenant, "thr_f2", 0, [created(tenant, "thr_f2")], fence=(creations, landed))
    assert await log.last_seq_of(creations) == again
    assert await log.subject_count(f"treadle.evt.{tenant}.*.thread.created.*") == 2
    assert await log.subject_count(f"treadle.evt.{tenant}.*.thread.created") == 0  # every stored subject is partitioned
    assert [e.type for e in await log.read(tenant, "thr_f1")] == ["thread.created", "message.created"]


async def test_malformed_appends_are_refused_before_the_log_is_asked(log, tenant):
    with pytest.raises(ValueError):
        await log.append(tenant, "thr_m", 0, [])
    for stray in (note("other", "thr_m", "x"), note(tenant, "thr_else", "x")):
        with pytest.raises(ValueError):
            await log.append(tenant, "thr_m", 0, [stray])
    assert await log.read(tenant, "thr_m") == [] and await log.last_seq(tenant, "thr_m") == 0
