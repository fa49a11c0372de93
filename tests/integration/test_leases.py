"""Partition leases against a real KV bucket (runtime/leases.py), driven by a ManualClock: the lease loops
run as in production and only move when the test advances time."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import nats
import pytest

from tests.support.helpers import wait_for
from treadle.core import events as ev
from treadle.eventlog import streams, subjects
from treadle.eventlog.log import EventLog
from treadle.ops.servers import NatsServer
from treadle.runtime import partitions
from treadle.runtime.clock import ManualClock
from treadle.runtime.leases import PartitionLeases, lease_bucket

TTL = 6.0
P = 8
_kinds = itertools.count(1)


class Replica:
    """One replica's leases on its own connection, with a journal of what its work was told."""

    def __init__(self, nc, kv, kind: str, name: str, clock: ManualClock, journal: list) -> None:
        self.nc = nc
        self.name = name
        self.working: set[int] = set()
        self.stopped = False

        async def gained(p: int) -> None:
            self.working.add(p)
            journal.append((clock.now(), name, "gained", p))

        async def lost(p: int, handed_back: bool) -> None:
            self.working.discard(p)
            journal.append((clock.now(), name, "lost", p))

        self.leases = PartitionLeases(
            kv, kind=kind, replica=name, partitions=P, ttl=TTL, gained=gained, lost=lost, clock=clock
        )


@pytest.fixture
async def world(nats_url):
    clock, journal, replicas, conns = ManualClock(), [], [], []
    kind = f"kind{next(_kinds)}"

    async def replica(name: str) -> Replica:
        nc = await nats.connect(nats_url)
        conns.append(nc)
        r = Replica(nc, await lease_bucket(nc), kind, name, clock, journal)
        await r.leases.start()
        replicas.append(r)
        return r

    async def round_() -> None:
        """Advance one lease period once every live loop is parked on the clock, and wait until they park again."""
        live = [r for r in replicas if not r.stopped]
        await wait_for(lambda: clock.sleepers >= len(live), what="lease loops parked")
        clock.advance(TTL / 3)
        await wait_for(lambda: clock.sleepers >= len(live), what="lease round done")

    yield clock, journal, replica, round_
    for r in replicas:
        if not r.stopped:
            await r.leases.stop()
    for nc in conns:
        if not nc.is_closed:
            await nc.close()


async def test_two_replicas_split_the_partitions_and_a_stopped_one_hands_them_back_at_once(world):
    clock, journal, replica, round_ = world
    a = await replica("c1")
    assert a.working == set(range(P))  # a lone replica consumes everything as soon as it is up
    b = await replica("c2")

    async def split() -> bool:
        await round_()
        return len(a.working) == len(b.working) == P // 2

    await wait_for(split, timeout=30, what="an even split")
    assert a.working | b.working == set(range(P)) and not a.working & b.working
    # a partition changes hands only after its old holder stopped working on it
    for p in b.working:
        lost = [t for t, who, what, q in journal if who == "c1" and what == "lost" and q == p]
        gained = [t for t, who, what, q in journal if who == "c2" and what == "gained" and q == p]
        assert lost and gained and lost[-1] <= gained[-1]

    await b.leases.stop()  # SIGTERM: released, not abandoned
    b.stopped = True
    assert b.working == set()

    async def all_back() -> bool:
        await round_()
        return a.working == set(range(P))

    await wait_for(all_back, timeout=10, what="c1 took the released partitions")
    # no TTL to wait out: released records are free at once
    took = max(t for t, who, what, _ in journal if who == "c1" and what == "gained")
    stopped = max(t for t, who, what, _ in journal if who == "c2" and what == "lost")
    assert took - stopped < TTL


async def test_a_replica_cut_off_from_the_broker_lets_go_before_its_partitions_are_taken_over(world):
    clock, journal, replica, round_ = world
    a = await replica("c1")
    b = await replica("c2")

    async def split() -> bool:
        await round_()
        return len(a.working) == len(b.working) == P // 2

    await wait_for(split, timeout=30, what="an even split")
    theirs = set(b.working)
    cut_at = clock.now()
    await b.nc.close()  # b's process lives on, but cannot renew: its loop keeps running on the clock

    async def taken_over() -> bool:
        clock.advance(TTL / 3)  # b's loop (parked or not) and a's loop wake
        await wait_for(lambda: clock.sleepers >= 2, what="lease loops parked")
        return a.working == set(range(P))

    await wait_for(taken_over, timeout=30, what="c1 took over c2's partitions")
    assert b.working == set()
    for p in theirs:
        let_go = [t for t, who, what, q in journal if who == "c2" and what == "lost" and q == p][-1]
        taken = [t for t, who, what, q in journal if who == "c1" and what == "gained" and q == p][-1]
        assert let_go < taken, f"partition {p}: c2 let go at {let_go}, c1 took it at {taken}"
        assert taken - cut_at >= TTL  # the records had to stand still for a whole TTL first


async def test_a_lost_lease_stops_its_work_at_the_next_renewal(world, nats_url):
    clock, journal, replica, round_ = world
    a = await replica("c1")
    victim = sorted(a.working)[0]
    # Someone else holds the record now (as a replica that took it over would).
    await a.leases._kv.put(f"{a.leases.kind}.lease.{victim}", b"intruder")
    await round_()
    assert victim not in a.working and (clock.now(), "c1", "lost", victim) in journal
    assert a.working == set(range(P)) - {victim}


async def test_the_broker_maps_events_to_the_partition_of_their_thread(nc):
    """The partition is the broker's (the config's mapping); Python's partition_of agrees with it."""
    count = await partitions.discover(nc)
    assert count == partitions.DEFAULT_PARTITIONS
    js = nc.jetstream()
    await streams.ensure(js)
    log = EventLog(nc)
    threads = [f"thr_part{next(_kinds)}x{i}" for i in range(24)]
    for thread in threads:
        created = ev.ThreadCreated(thread_id=thread, workspace=f"w/{thread}", created_by="u")
        await log.append(
            "parts",
            thread,
            0,
            [
                ev.Envelope(
                    id=f"evt_{thread}",
                    type=created.TYPE,
                    tenant="parts",
                    thread=thread,
                    at=datetime.now(UTC),
                    command_id="cmd_test",
                    actor="test",
                    data=created,
                )
            ],
        )
        msg = await js.get_last_msg(subjects.EVENTS_STREAM, subjects.thread_events("parts", thread), direct=True)
        assert msg.subject == f"treadle.evt.parts.{thread}.thread.created.{partitions.partition_of(thread, count)}"
        assert subjects.parse_event_subject(msg.subject) == ("parts", thread, "thread.created")
    assert len({partitions.partition_of(t, count) for t in threads}) > 1


async def test_a_broker_without_the_partition_mappings_is_refused_by_name(tmp_path):
    async with NatsServer(tmp_path / "plain", auth=False) as server:  # no auth.conf: none of Treadle's config
        conn = await nats.connect(server.url)
        try:
            with pytest.raises(partitions.PartitionsNotConfigured, match="no partition mappings"):
                await partitions.discover(conn)
        finally:
            await conn.close()
    assert "partition(4,2)" in partitions.nats_mappings(4)["treadle.evt.*.*.*.*"]


async def test_a_restarted_replica_adopts_its_own_partitions_at_once_and_a_twin_name_is_reported(world, caplog):
    clock, journal, replica, round_ = world
    first = await replica("c1")
    assert first.working == set(range(P))
    await first.nc.close()  # its process dies: the records stay, still fresh
    first.stopped = True  # (its loop is left parked on the clock; it never ticks again)
    for task in first.leases._tasks:
        task.cancel()
    again = await replica("c1")  # the supervisor restarts it under the same name, well within the TTL
    assert again.working == set(range(P))  # its previous life's records are its own: no TTL to wait out

    twin = await replica("c1")  # a misconfiguration: a second live process with the same name
    caplog.set_level("ERROR", logger="treadle.runtime.leases")

    async def reported() -> bool:
        await round_()
        return any("another process heartbeats as c1" in r.getMessage() for r in caplog.records)

    await wait_for(reported, timeout=20, what="the shared replica name reported")
    assert twin.working | again.working <= set(range(P))
