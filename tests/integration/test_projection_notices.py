"""projections/notices.py against real JetStream, Redis and the projector: a read waiting for the projection
to reach a sequence is woken by the projector's notice, finds a write made without one on its next look, and
gives up (False: the caller folds the log) when the projection never gets there."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.integration.test_projections import write_thread
from tests.support.helpers import wait_for
from treadle.core.state import fold
from treadle.eventlog import streams, subjects
from treadle.eventlog.log import EventLog
from treadle.projections import notices
from treadle.projections.store import ProjectionStore
from treadle.projector.service import Projector
from treadle.runtime.settings import ProjectorSettings

_n = itertools.count()
FOREVER = 120.0  # longer than the test's deadline: only a notice can end a wait this long


def _thread() -> str:
    return f"thr_notice{next(_n)}"


async def test_a_read_behind_the_projection_is_woken_by_the_projectors_notice(nc, redis):
    await streams.ensure(nc.jetstream())
    log, store = EventLog(nc), ProjectionStore(redis)
    thread = _thread()
    last = await write_thread(log, thread)  # in the log, not projected: no projector runs yet
    waiting = asyncio.create_task(notices.reached(nc, store, "proj", thread, last, FOREVER, recheck=FOREVER))
    # Subscribed on the connection the projector will publish on, so the server has the interest first
    await wait_for(
        lambda: any(s.subject == subjects.projected("proj", thread) for s in nc._subs.values()),
        what="the read waiting on the thread's notices",
    )
    assert not waiting.done()
    projector = Projector(nc, redis, ProjectorSettings())
    await projector.start()
    try:
        assert await waiting is True
        assert await store.seq("proj", thread) >= last
    finally:
        await projector.stop()
    assert not any(s.subject == subjects.projected("proj", thread) for s in nc._subs.values())  # unsubscribed


async def test_a_projection_written_without_a_notice_is_found_on_the_next_look(nc, redis):
    """The gateway's own fold of the log writes the document and announces nothing."""
    await streams.ensure(nc.jetstream())
    log, store = EventLog(nc), ProjectionStore(redis)
    thread = _thread()
    last = await write_thread(log, thread)
    waiting = asyncio.create_task(notices.reached(nc, store, "proj", thread, last, FOREVER, recheck=0.05))
    await store.refold(await log.read("proj", thread))
    assert await waiting is True


@pytest.mark.parametrize("projected", [False, True])
async def test_a_projection_that_never_gets_there_is_given_up_on(nc, redis, projected):
    await streams.ensure(nc.jetstream())
    log, store = EventLog(nc), ProjectionStore(redis)
    thread = _thread()
    last = await write_thread(log, thread)
    if projected:  # behind by one event, announced
        state = fold((await log.read("proj", thread))[:-1])
        await store.write([(state, [], None)])
        await notices.announce(nc, [("proj", thread, state.seq)])
    assert await notices.reached(nc, store, "proj", thread, last, 0.3, recheck=0.05) is False
    assert await notices.reached(nc, store, "proj", thread, 0, 0.3) is True  # a thread with nothing to wait for
