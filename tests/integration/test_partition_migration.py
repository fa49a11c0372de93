"""Upgrading to partitions (runtime/partition_migration.py): a broker that stored events before it had the
partition mappings, and the single durable consumer of that time with a tail of unprocessed events. After the
upgrade, two replicas handle every event once, each thread's old events before its new ones, and the old
consumer is gone."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from tests.support.helpers import wait_for
from treadle.core import events as ev
from treadle.eventlog import streams, subjects
from treadle.eventlog.log import EventLog
from treadle.ops import tenant_consumers
from treadle.ops.servers import NatsServer
from treadle.ops.tenant_events import TenantFollower, follow_tenant
from treadle.runtime import partitions
from treadle.runtime.consumer import PullConsumer
from treadle.runtime.leases import PartitionedWork
from treadle.runtime.partition_migration import Legacy, unpartitioned_event_types

TYPE = "probe.noted"  # a type of its own: no worker consumes it
THREADS = [f"thr_mig{i}" for i in range(6)]


async def _publish(js, round_: int) -> None:
    for thread in THREADS:
        await js.publish(f"treadle.evt.mig.{thread}.{TYPE}", f"{thread}/{round_}".encode())


async def test_events_stored_before_partitions_are_handled_first_and_once_after_the_upgrade(tmp_path, monkeypatch):
    # Before: a broker without the mappings, an old consumer that handled round 0 and not rounds 1-2.
    with monkeypatch.context() as before:
        before.setattr(partitions, "nats_mappings", lambda count=None: {})
        server = NatsServer(tmp_path / "nats")
        await server.start()
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    await streams.ensure(js)
    await js.add_consumer(
        subjects.EVENTS_STREAM,
        ConsumerConfig(
            durable_name="probe",
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            filter_subject=unpartitioned_event_types(TYPE)[0],
        ),
    )
    for round_ in range(3):
        await _publish(js, round_)
    old = await js.pull_subscribe_bind("probe", stream=subjects.EVENTS_STREAM)
    for msg in await old.fetch(len(THREADS), timeout=5):
        await msg.ack_sync()
    await old.unsubscribe()
    await nc.close()
    await server.stop()

    # The upgrade: the same broker with the mappings; new events arrive before any worker is back.
    server = NatsServer(tmp_path / "nats", port=server.port)
    await server.start()
    conns = [await nats.connect(server.url) for _ in range(3)]
    await _publish(conns[0].jetstream(), 3)
    await _publish(conns[0].jetstream(), 4)

    handled: list[str] = []

    async def handle(msg) -> None:
        handled.append(msg.data.decode())

    def replica(nc, name: str) -> PartitionedWork:
        js = nc.jetstream()

        def consumer(durable: str, filters: list[str]) -> PullConsumer:
            return PullConsumer(js, stream=subjects.EVENTS_STREAM, durable=durable, filters=filters, handle=handle)

        return PartitionedWork(
            nc,
            kind="probe",
            replica=name,
            ttl=3.0,
            make=lambda p: consumer(f"probe-p{p}", partitions.event_types_filters([TYPE], p)),
            legacy=Legacy(
                ((subjects.EVENTS_STREAM, "probe"),), lambda: consumer("probe", unpartitioned_event_types(TYPE))
            ),
        )

    workers = [replica(conns[1], "r1"), replica(conns[2], "r2")]
    try:
        await asyncio.gather(*(w.start() for w in workers))
        expected = [f"{t}/{r}" for r in range(1, 5) for t in THREADS]
        await wait_for(lambda: len(handled) >= len(expected), timeout=30, what="every event handled")
        assert sorted(handled) == sorted(expected)  # each once; round 0 was handled before the upgrade
        for thread in THREADS:
            assert [h for h in handled if h.startswith(thread + "/")] == [f"{thread}/{r}" for r in range(1, 5)]
        with pytest.raises(NotFoundError):
            await conns[0].jetstream().consumer_info(subjects.EVENTS_STREAM, "probe")
        # After the migration: new events flow through the partitions as usual.
        await _publish(conns[0].jetstream(), 5)
        await wait_for(lambda: len(handled) == len(expected) + len(THREADS), timeout=30, what="round 5 handled")
    finally:
        await asyncio.gather(*(w.stop() for w in workers))
        for nc in conns:
            await nc.close()
        await server.stop()


async def test_a_tenant_consumer_of_one_type_made_before_partitions_reads_both_forms_after_its_reset(
    tmp_path, monkeypatch
):
    """`treadle consumers reset --all` after the upgrade: a consumer filtered on one event type keeps its
    position and its type, and gets the events stored before partitions and after."""

    async def created(log, thread: str) -> None:
        data = ev.ThreadCreated(thread_id=thread, workspace=f"w/{thread}", created_by="u")
        await log.append(
            "acme",
            thread,
            0,
            [
                ev.Envelope(
                    id=f"evt_{thread}",
                    type=data.TYPE,
                    tenant="acme",
                    thread=thread,
                    at=datetime.now(UTC),
                    command_id=f"cmd_{thread}",
                    actor="test",
                    data=data,
                )
            ],
        )

    with monkeypatch.context() as before:
        before.setattr(partitions, "nats_mappings", lambda count=None: {})
        server = NatsServer(tmp_path / "nats")
        await server.start()
        nc = await nats.connect(server.url)
        await streams.ensure(nc.jetstream())
        creds = server.auth.issue("acme", server.address)
        # the consumer as `treadle consumers create --type thread.created` made it then
        await nc.jetstream().add_consumer(
            subjects.EVENTS_STREAM,
            ConsumerConfig(
                name=creds.consumer,
                durable_name=creds.consumer,
                ack_policy=AckPolicy.EXPLICIT,
                filter_subject="treadle.evt.acme.*.thread.created",
            ),
        )
        await server.reload()
        for thread in ("thr_old1", "thr_old2"):
            await created(EventLog(nc), thread)
        async with creds.connect() as tenant, TenantFollower(tenant, creds, types=["thread.created"]) as events:
            async for event in events:
                await events.ack(event)  # the first one is handled, the second is not
                break
        await nc.close()
        await server.stop()

    server = NatsServer(tmp_path / "nats", port=server.port)
    await server.start()
    nc = await nats.connect(server.url)
    try:
        for thread in ("thr_new1", "thr_new2"):
            await created(EventLog(nc), thread)
        await tenant_consumers.reset(nc.jetstream(), creds.consumer, "acme")
        async with creds.connect() as tenant:
            seen = [e.thread async for e in follow_tenant(tenant, creds, types=["thread.created"], idle_timeout=1)]
        assert seen == ["thr_old2", "thr_new1", "thr_new2"]
    finally:
        await nc.close()
        await server.stop()
