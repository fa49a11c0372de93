"""The event log against a real JetStream: OCC, atomic batches, receipts across coordinator replicas."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import msgspec
import pytest

from treadle.coordinator.service import Coordinator
from treadle.core import events as ev
from treadle.core.commands import Accepted, Command, Reply
from treadle.core.state import fold
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.eventlog import streams, subjects
from treadle.eventlog.errors import Conflict, Rejected, Unavailable
from treadle.eventlog.log import EventLog
from treadle.eventlog.store import ThreadStore
from treadle.runtime.settings import CoordinatorSettings, Shared

_n = itertools.count()


@pytest.fixture
async def log(nc) -> EventLog:
    await streams.ensure(nc.jetstream())
    return EventLog(nc)


def envelope(thread: str, data: ev.Payload, tenant: str = "acme") -> ev.Envelope:
    return ev.Envelope(
        id=f"evt_{next(_n):06d}_{thread}",
        type=data.TYPE,
        tenant=tenant,
        thread=thread,
        at=datetime.now(UTC),
        command_id="cmd_test",
        actor="test",
        data=data,
    )


def note(thread: str, text: str, tenant: str = "acme") -> ev.Envelope:
    return envelope(thread, ev.MessageCreated(message_id=f"msg_{next(_n)}", role="user", text=text), tenant)


async def test_append_is_fenced_by_the_threads_last_sequence(log):
    thread = f"thr_occ{next(_n)}"
    first = await log.append("acme", thread, 0, [note(thread, "a")])
    with pytest.raises(Conflict) as stale:
        await log.append("acme", thread, 0, [note(thread, "b")])
    assert stale.value.actual_seq == first
    other = f"thr_occ{next(_n)}"
    await log.append("acme", other, 0, [note(other, "elsewhere")])  # other threads do not move the fence
    second = await log.append("acme", thread, stale.value.actual_seq, [note(thread, "b")])
    assert [e.data.text for e in await log.read("acme", thread)] == ["a", "b"] and second > first


async def test_an_atomic_batch_lands_whole_or_not_at_all(log):
    thread = f"thr_batch{next(_n)}"
    await log.append("acme", thread, 0, [note(thread, "start")])
    with pytest.raises(Conflict):
        await log.append("acme", thread, 0, [note(thread, "x"), note(thread, "y"), note(thread, "z")])
    too_big = note(thread, "x" * 2_000_000)
    with pytest.raises(Rejected):
        await log.append("acme", thread, 1, [note(thread, "ok"), too_big, note(thread, "ok2")])
    assert [e.data.text for e in await log.read("acme", thread)] == ["start"]
    last = await log.append(
        "acme", thread, (await log.last_seq("acme", thread)), [note(thread, "1"), note(thread, "2"), note(thread, "3")]
    )
    events = await log.read("acme", thread)
    assert [e.data.text for e in events] == ["start", "1", "2", "3"]
    assert [e.seq for e in events][-3:] == [last - 2, last - 1, last]


async def test_reading_a_thread_pages_past_the_direct_get_batch(log):
    thread = f"thr_long{next(_n)}"
    seq = 0
    for chunk in range(3):
        seq = await log.append("acme", thread, seq, [note(thread, f"{chunk}-{i}") for i in range(500)])
    events = await log.read("acme", thread)
    assert len(events) == 1500 and events[-1].seq == seq
    assert len(await log.read("acme", thread, after=events[1199].seq)) == 300


_reply = msgspec.json.Decoder(Reply)


async def _command(nc, body, thread: str | None, command_id: str) -> Accepted:
    cmd = Command(
        id=command_id, tenant="acme", user="u", thread=thread, issued_at=datetime(2026, 12, 2, tzinfo=UTC), body=body
    )
    verb = "create" if isinstance(body, CreateThread) else "send"
    reply = _reply.decode((await nc.request(subjects.command("acme", verb), msgspec.json.encode(cmd), timeout=10)).data)
    assert isinstance(reply, Accepted), reply
    return reply


async def test_a_retried_command_gets_its_original_receipt_even_through_a_conflict(nc, log, tmp_path):
    shared = Shared(state_dir=tmp_path)
    # Two coordinator replicas; the checkpoint service is not needed for a thread created earlier.
    a, b = Coordinator(nc, shared, CoordinatorSettings()), Coordinator(nc, shared, CoordinatorSettings())
    thread = f"thr_rcpt{next(_n)}"
    created = envelope(thread, ev.ThreadCreated(thread_id=thread, workspace="w", created_by="u"))
    await log.append("acme", thread, 0, [created])
    await a._store.load("acme", thread)
    await b._store.load("acme", thread)  # b now caches the thread as it was before the send
    reply_a = await a._decide_and_append(
        Command(
            id="cmd_send_1",
            tenant="acme",
            user="u",
            thread=thread,
            issued_at=datetime.now(UTC),
            body=SendMessage(text="hi"),
        )
    )
    # The retry reaches the other replica, whose stale cache makes its append hit err 10071 first.
    reply_b = await b._decide_and_append(
        Command(
            id="cmd_send_1",
            tenant="acme",
            user="u",
            thread=thread,
            issued_at=datetime.now(UTC),
            body=SendMessage(text="hi"),
        )
    )
    assert isinstance(reply_a, Accepted) and isinstance(reply_b, Accepted)
    assert reply_b.duplicate and (reply_b.run_id, reply_b.message_id) == (reply_a.run_id, reply_a.message_id)
    state = fold(await log.read("acme", thread))
    assert len(state.messages) == 1 and len(state.runs) == 1


async def test_a_distrusted_cached_thread_is_read_again_before_the_next_decision(log):
    """A supervisor replica gaining a partition distrusts its cached threads of it: another replica may
    have appended meanwhile, and a decision on the stale state that appends nothing would never be fenced."""
    mine, theirs = ThreadStore(log, "mine"), ThreadStore(log, "theirs")
    thread = f"thr_trust{next(_n)}"
    await log.append("acme", thread, 0, [note(thread, "a")])
    await mine.load("acme", thread)
    state = await theirs.load("acme", thread)
    await log.append("acme", thread, state.seq, [note(thread, "b")])  # the other replica's append
    assert [m.text for m in (await mine.load("acme", thread)).messages] == ["a"]  # cached: it cannot know
    mine.distrust(lambda tenant, t: t == thread)
    assert [m.text for m in (await mine.load("acme", thread)).messages] == ["a", "b"]


async def test_a_new_thread_fenced_on_its_tenants_creations_conflicts_when_another_landed_first(log):
    """Issue 16: threads per tenant is exact across coordinator replicas. Both counted the tenant's threads at the
    same last creation; the second append finds the fence moved, so it is counted (and refused) again."""
    tenant = f"fence{next(_n)}"
    creations = subjects.thread_creations(tenant)
    seen = await log.last_seq_of(creations)
    assert seen == 0
    first, second = f"thr_fa{next(_n)}", f"thr_fb{next(_n)}"
    landed = await log.append(
        tenant,
        first,
        0,
        [envelope(first, ev.ThreadCreated(thread_id=first, workspace="w", created_by="u"), tenant)],
        fence=(creations, seen),
    )
    with pytest.raises(Conflict):
        await log.append(
            tenant,
            second,
            0,
            [envelope(second, ev.ThreadCreated(thread_id=second, workspace="w", created_by="u"), tenant)],
            fence=(creations, seen),
        )
    assert await log.last_seq_of(creations) == landed
    await log.append(tenant, first, landed, [note(first, "not a creation", tenant)])  # other events do not move it
    assert await log.last_seq_of(creations) == landed
    await log.append(
        tenant,
        second,
        0,
        [envelope(second, ev.ThreadCreated(thread_id=second, workspace="w", created_by="u"), tenant)],
        fence=(creations, landed),
    )
    assert await log.last_seq_of(creations) > landed
    assert [e.type for e in await log.read(tenant, second)] == ["thread.created"]  # stored where its thread is read
    assert [e.type for e in await log.read(tenant, first)] == ["thread.created", "message.created"]


async def test_an_event_of_another_thread_is_never_appended(log):
    """A reader finds a thread by its envelopes; one stored under another thread's subjects would stall the
    projector's partition on a thread whose log it cannot find."""
    thread = f"thr_own{next(_n)}"
    for stray in (note(thread, "x", tenant="other"), note(f"thr_else{next(_n)}", "x")):
        with pytest.raises(ValueError):
            await log.append("acme", thread, 0, [stray])
    assert await log.read("acme", thread) == []


async def test_an_append_nobody_answers_or_nobody_hears_is_unavailable_and_the_next_one_is_answered(nc, log):
    """Appends wait for their acknowledgement on the log's own reply inbox: silence past the timeout, or a
    subject no stream listens on (the server's 503), is Unavailable (retryable), not a hang; the inbox goes on
    answering the appends after them."""
    silent = await nc.subscribe(f"silent.{next(_n)}")  # hears, never answers
    quick = EventLog(nc, timeout=0.3)
    with pytest.raises(Unavailable, match="timed out"):
        await quick._request(silent.subject, b"{}", {})
    with pytest.raises(Unavailable, match="no responders"):
        await quick._request(f"nobody.{next(_n)}", b"{}", {})
    await silent.unsubscribe()
    thread = f"thr_after{next(_n)}"
    assert await quick.append("acme", thread, 0, [note(thread, "x")]) > 0
    assert not quick._answers  # nothing left waiting
