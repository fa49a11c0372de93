"""L3.6 across coordinator replicas: a command on an idle thread is decided on the cached state without reading
the log first, and that stays correct when another replica appended meanwhile. An append decided on a stale
cache conflicts and is decided again on the log; an answer that appends nothing (a refusal) is decided on the
log before it is given."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from treadle.coordinator.service import Coordinator
from treadle.core import events as ev
from treadle.core.commands import Accepted, Command
from treadle.core.state import fold
from treadle.core.thread.commands import EditQueued, SendMessage
from treadle.eventlog import streams, subjects
from treadle.eventlog.log import EventLog
from treadle.runtime.metrics import APPEND_CONFLICTS
from treadle.runtime.settings import CoordinatorSettings, Shared

_n = itertools.count()


@pytest.fixture
async def log(nc) -> EventLog:
    await streams.ensure(nc.jetstream())
    return EventLog(nc)


async def _thread(log: EventLog, *replicas: Coordinator) -> str:
    thread = f"thr_cache{next(_n)}_{datetime.now(UTC).timestamp():.0f}"
    created = ev.Envelope(
        id=f"evt_cache_{thread}",
        type=ev.ThreadCreated.TYPE,
        tenant="acme",
        thread=thread,
        at=datetime.now(UTC),
        command_id="cmd_create",
        actor="coordinator",
        data=ev.ThreadCreated(thread_id=thread, workspace="w", created_by="u"),
    )
    await log.append("acme", thread, 0, [created])
    for replica in replicas:
        await replica._store.load("acme", thread)  # each caches the idle thread
    return thread


async def _command(coordinator: Coordinator, thread: str, body) -> Accepted:
    reply = await coordinator._decide_and_append(
        Command(id=f"cmd_{next(_n)}", tenant="acme", user="u", thread=thread, issued_at=datetime.now(UTC), body=body)
    )
    assert isinstance(reply, Accepted), reply
    return reply


def _conflicts() -> float:
    return APPEND_CONFLICTS.labels("coordinator")._value.get()


async def test_L3_6_a_send_on_an_idle_cached_thread_reads_nothing_of_the_log(nc, log, tmp_path):
    coordinator = Coordinator(nc, Shared(state_dir=tmp_path), CoordinatorSettings())
    thread = await _thread(log, coordinator)
    reads: list[str] = []

    async def tapped(msg) -> None:
        reads.append(msg.subject)

    sub = await nc.subscribe(f"$JS.API.DIRECT.GET.{subjects.EVENTS_STREAM}", cb=tapped)
    await nc.flush()
    sent = await _command(coordinator, thread, SendMessage(text="one"))
    await nc.flush()
    await sub.unsubscribe()
    assert reads == []
    assert fold(await log.read("acme", thread)).active_run_id == sent.run_id


async def test_L3_6_a_send_decided_on_a_stale_cache_is_queued_after_what_another_replica_appended(nc, log, tmp_path):
    shared = Shared(state_dir=tmp_path)
    a, b = Coordinator(nc, shared, CoordinatorSettings()), Coordinator(nc, shared, CoordinatorSettings())
    thread = await _thread(log, a, b)
    first = await _command(a, thread, SendMessage(text="one"))
    before = _conflicts()
    second = await _command(b, thread, SendMessage(text="two", mode="queue_after_active"))  # b still sees it idle
    assert _conflicts() == before + 1  # decided on b's cache, fenced, decided again on the log
    state = fold(await log.read("acme", thread))
    assert (state.active_run_id, state.queue) == (first.run_id, [second.run_id])
    assert [m.text for m in state.messages] == ["one", "two"]


async def test_L3_6_an_edit_refused_on_a_stale_cache_is_decided_again_on_the_log(nc, log, tmp_path):
    shared = Shared(state_dir=tmp_path)
    a, b = Coordinator(nc, shared, CoordinatorSettings()), Coordinator(nc, shared, CoordinatorSettings())
    thread = await _thread(log, a, b)
    await _command(a, thread, SendMessage(text="one"))
    queued = await _command(a, thread, SendMessage(text="two", mode="queue_after_active"))
    # b's cache knows no queued run: refused there, the edit would be answered "not found" without a fence.
    await _command(b, thread, EditQueued(run_id=queued.run_id, text="two, edited"))
    state = fold(await log.read("acme", thread))
    assert state.queue == [queued.run_id]
    assert [m.text for m in state.messages][-1] == "two, edited"
