"""Issue 6, the chaos stall: on a replicated stream, a queued run whose dispatch lost a race with another append
of its thread was never started.

While an append of a thread is still being replicated, the stream leader answers every other append fenced on
that thread with err 10164 ("wrong last sequence", no number) and a re-send of the same event with err 10158
("duplicate message id is in process"). Both are a race whose outcome is not known yet, not a refusal; taken for
refusals, the coordinator dead-lettered the run.completed it reacted to and the next queued run never started
(and the supervisor dropped provider events, so later ones waited forever for them).

The order is driven explicitly: with the stream's two followers down, an append of the thread stays in flight
at the leader for as long as the test needs, so the dispatch meets it every time.
"""

from __future__ import annotations

from datetime import UTC, datetime

import nats
import pytest
from nats.js.errors import ServiceUnavailableError

from tests.support.helpers import wait_for
from treadle.coordinator.service import Coordinator
from treadle.core import events as ev
from treadle.core.commands import Command
from treadle.core.state import fold
from treadle.core.thread.commands import SendMessage
from treadle.eventlog import streams, subjects
from treadle.eventlog.errors import Conflict, Unavailable
from treadle.eventlog.log import EventLog
from treadle.ops.servers import NatsCluster
from treadle.runtime import broker_urls
from treadle.runtime.settings import CoordinatorSettings, Shared

TENANT, THREAD = "acme", "thr_race1"


def envelope(n: int, data: ev.Payload, actor: str = "supervisor") -> ev.Envelope:
    return ev.Envelope(
        id=f"evt_race_{n}",
        type=data.TYPE,
        tenant=TENANT,
        thread=THREAD,
        at=datetime.now(UTC),
        command_id=f"cmd_race_{n}",
        actor=actor,
        data=data,
    )


async def send(coordinator: Coordinator, n: int, text: str) -> str:
    reply = await coordinator._decide_and_append(
        Command(
            id=f"cmd_send_{n}",
            tenant=TENANT,
            user="u",
            thread=THREAD,
            issued_at=datetime.now(UTC),
            body=SendMessage(text=text, mode="queue_after_active"),
        )
    )
    return reply.run_id


async def redelivered(coordinator: Coordinator, msg) -> bool:
    """The consumer's retry of ``msg``: a race still unsettled (a conflict, or a replica that has not stored
    what it was delivered) is redelivered, not dropped."""
    try:
        await coordinator._on_run_ended(msg)
    except (Conflict, Unavailable):
        return False
    return True


async def reaching(log: EventLog, seq: int) -> list[ev.Envelope] | None:
    events = await log.read(TENANT, THREAD)
    return events if events and events[-1].seq >= seq else None


async def test_L3_6_a_queued_run_starts_after_its_dispatch_lost_a_race_with_an_append_in_flight(tmp_path):
    async with NatsCluster(tmp_path / "nats") as cluster:
        setup = await nats.connect(**broker_urls.parse(cluster.url).connect_options())
        await streams.ensure(setup.jetstream(), 3)
        leader = cluster.node((await setup.jetstream().stream_info(subjects.EVENTS_STREAM)).cluster.leader)
        await setup.close()
        nc = await nats.connect(leader.url)  # the one node that stays up
        try:
            js, log = nc.jetstream(), EventLog(nc, timeout=1.0)
            coordinator = Coordinator(nc, Shared(state_dir=tmp_path), CoordinatorSettings())
            await log.append(
                TENANT,
                THREAD,
                0,
                [envelope(0, ev.ThreadCreated(thread_id=THREAD, workspace="w", created_by="u"), actor="coordinator")],
            )
            first, second = await send(coordinator, 1, "one"), await send(coordinator, 2, "two")
            state = fold(await log.read(TENANT, THREAD))
            assert (state.active_run_id, state.queue) == (first, [second])
            attempt = state.run(first).attempt.id
            completed = await log.append(
                TENANT, THREAD, state.seq, [envelope(1, ev.RunCompleted(run_id=first, attempt_id=attempt))]
            )
            ended = await js.pull_subscribe(f"treadle.evt.{TENANT}.{THREAD}.>", stream=subjects.EVENTS_STREAM)

            async def fetched() -> list:
                try:
                    return await ended.fetch(completed, timeout=5)  # as the coordinator's consumer gets it
                except ServiceUnavailableError:  # a new replicated consumer answers once its leader is elected
                    return []

            (msg,) = [m for m in await wait_for(fetched, timeout=30) if m.metadata.sequence.stream == completed]

            for node in cluster.nodes:
                if node is not leader:
                    node.kill()
            in_flight = [envelope(2, ev.MessageCreated(message_id="msg_note", role="assistant", text="late"))]
            with pytest.raises(Unavailable):  # no quorum: replication waits for a follower
                await log.append(TENANT, THREAD, completed, in_flight)
            with pytest.raises(Conflict):  # the dispatch loses the race: retried on a fresh state, not refused
                await coordinator._on_run_ended(msg)
            with pytest.raises(Unavailable):  # the very same event again: it may yet land
                await log.append(TENANT, THREAD, completed, in_flight)

            for node in cluster.nodes:
                await node.start()
            await cluster.wait_healthy()
            await wait_for(lambda: log.read(TENANT, THREAD, after=completed), timeout=30, what="the append in flight")
            await wait_for(lambda: redelivered(coordinator, msg), timeout=30, what="the consumer's retries")

            # Direct gets are answered by any replica, and a follower that just rejoined may not hold the
            # coordinator's append yet: read until the log reaches the sequence the coordinator was acked.
            cached = coordinator._store.cached(TENANT, THREAD)
            appended = cached.seq if cached else 0
            events = await wait_for(lambda: reaching(log, appended), timeout=30, what=f"a log read reaching {appended}")
            dispatched = [e for e in events if isinstance(e.data, ev.RunDispatched)]
            seen = f"{cached.seq}, active {cached.active_run_id}, queue {cached.queue}" if cached else "none"
            assert [e.data.run_id for e in dispatched] == [second] and dispatched[0].seq > completed, (
                f"after the end at {completed} the log holds {[(e.seq, e.type) for e in events if e.seq >= completed]};"
                f" the coordinator decided on its cached state at {seen}"
            )
            assert [e.id for e in events].count(in_flight[0].id) == 1
            assert fold(events).active_run_id == second
        finally:
            await nc.close()
