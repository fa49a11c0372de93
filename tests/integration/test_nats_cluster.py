"""Issue 6, item 4: a 3-node JetStream cluster on loopback. Every stream and bucket is replicated on all three
nodes, the nodes share one auth.conf and reload it together, and a tenant's credential works on any node."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import nats
import pytest

from tests.support.helpers import wait_for
from treadle.checkpoints.archive import BUCKET as CHECKPOINTS_BUCKET
from treadle.core import events as ev
from treadle.eventlog import streams
from treadle.eventlog.errors import Conflict
from treadle.eventlog.log import EventLog
from treadle.ops import tenant_consumers
from treadle.ops.servers import NatsCluster
from treadle.ops.tenant_events import TenantCredential, check_consumer
from treadle.runtime import broker_urls, partitions

REPLICATED = [
    "TREADLE_EVENTS", "TREADLE_PROVIDER", "TREADLE_AUDIT", f"OBJ_{CHECKPOINTS_BUCKET}", *(f"KV_{b.bucket}" for b in streams.BUCKETS)
]  # fmt: skip


async def _service(cluster: NatsCluster):
    return await nats.connect(**broker_urls.parse(cluster.url).connect_options(), name="test-service")


async def _refused(address: str, creds: TenantCredential) -> bool:
    try:
        nc = await nats.connect(
            address, user=creds.user, password=creds.password, allow_reconnect=False, connect_timeout=2
        )
    except nats.errors.Error as exc:
        return "Authorization Violation" in str(exc)
    await nc.close()
    return False


async def _reads_on(node_address: str, creds: TenantCredential, service) -> bytes:
    """Connect as the credential to this one node and pull one new event through its consumer (which the
    operator created; tenants cannot create consumers)."""
    only_here = TenantCredential(**{**{f: getattr(creds, f) for f in creds.__struct_fields__}, "url": node_address})
    async with only_here.connect(allow_reconnect=False, connect_timeout=2) as nc:
        assert nc.connected_url.netloc.endswith(node_address.rsplit("/", 1)[1])
        await check_consumer(nc, only_here)
        js = nc.jetstream(prefix=only_here.api_prefix)
        sub = await js.pull_subscribe_bind(only_here.consumer, stream=only_here.stream)
        ack = await service.jetstream().publish(f"treadle.evt.{creds.tenant}.th1.thread.created", node_address.encode())

        async def pulled():
            try:
                return [m for m in await sub.fetch(10, timeout=1) if m.metadata.sequence.stream == ack.seq]
            except nats.errors.TimeoutError:
                return None

        (msg,) = await wait_for(pulled, timeout=20, what=f"the event through {node_address}")
        await msg.ack()
        return msg.data


async def test_a_cluster_comes_up_and_every_stream_and_bucket_is_R3(tmp_path):
    async with NatsCluster(tmp_path / "nats") as cluster:
        assert len(set(cluster.pids)) == 3
        nc = await _service(cluster)
        try:
            js = nc.jetstream()
            await streams.ensure(js, 1)  # what an earlier single-replica deployment left behind
            assert (await js.stream_info("KV_treadle-policies")).config.allow_direct  # one replica: read directly
            await streams.ensure(js, 3)  # is raised to three replicas in place
            # Any replica answers a direct get, one behind the last put too: policies are read from the leader.
            assert not (await js.stream_info("KV_treadle-policies")).config.allow_direct
            names = set(cluster.names)
            for stream in REPLICATED:

                async def placed(stream=stream):
                    info = await js.stream_info(stream)
                    peers = [r for r in info.cluster.replicas or [] if r.current]
                    return info if len(peers) == 2 and info.cluster.leader else None

                info = await wait_for(placed, timeout=30, what=f"{stream} on three current nodes")
                assert info.config.num_replicas == 3
                assert {info.cluster.leader, *(r.name for r in info.cluster.replicas)} == names
        finally:
            await nc.close()


async def test_every_node_maps_events_to_partitions_and_a_stale_append_is_a_conflict(tmp_path):
    """The partition mapping lives in the service account of the shared auth.conf, so an event appended
    through any node is stored with its thread's partition; OCC on an R3 stream answers a stale append with
    10071, or to an atomic batch 10164 (no actual sequence): both are a Conflict."""
    async with NatsCluster(tmp_path / "nats") as cluster:
        for n, node in enumerate(cluster.nodes):
            nc = await nats.connect(node.url, name=f"test-node-{n}")
            try:
                await streams.ensure(nc.jetstream(), 3)
                thread = f"thr_node{n}"
                seq = await EventLog(nc).append("acme", thread, 0, [_created(thread)])
                stored = await nc.jetstream().get_msg("TREADLE_EVENTS", seq)
                count = await partitions.discover(nc)
                assert (
                    stored.subject
                    == f"treadle.evt.acme.{thread}.thread.created.{partitions.partition_of(thread, count)}"
                )
                for stale in ([_created(thread, "again")], [_created(thread, "a"), _created(thread, "b")]):
                    with pytest.raises(Conflict):  # one event, and an atomic batch
                        await EventLog(nc).append("acme", thread, 0, stale)
                won = 0
                for race in range(20):
                    tip = await EventLog(nc).last_seq("acme", thread)
                    results = await asyncio.gather(
                        *(
                            EventLog(nc).append(
                                "acme",
                                thread,
                                tip,
                                [_created(thread, f"r{race}w{w}a"), _created(thread, f"r{race}w{w}b")],
                            )
                            for w in range(2)
                        ),
                        return_exceptions=True,
                    )
                    assert all(isinstance(r, (int, Conflict)) for r in results), results
                    wins = sum(isinstance(r, int) for r in results)
                    if wins == 0:  # a follower answered the tip's direct get before it had the last race's append
                        last = (await nc.jetstream().stream_info("TREADLE_EVENTS")).state.last_seq  # the leader's
                        assert last != tip, results
                    assert wins <= 1, results
                    won += wins
                assert won > 0  # most races start from a current tip: the fence lets exactly one through
            finally:
                await nc.close()


def _created(thread: str, suffix: str = "") -> ev.Envelope:
    data = ev.ThreadCreated(thread_id=thread, workspace=f"w/{thread}", created_by="u")
    return ev.Envelope(
        id=f"evt_{thread}{suffix}",
        type=data.TYPE,
        tenant="acme",
        thread=thread,
        at=datetime.now(UTC),
        command_id=f"cmd_{thread}{suffix}",
        actor="test",
        data=data,
    )


async def test_a_tenant_credential_works_on_every_node_and_every_node_reloads_auth(tmp_path):
    async with NatsCluster(tmp_path / "nats") as cluster:
        service = await _service(cluster)
        try:
            await streams.ensure(service.jetstream(), 3)
            creds = cluster.auth.issue("acme", cluster.address)
            assert broker_urls.parse(creds.url).servers == [n.address for n in cluster.nodes]
            await cluster.reload()
            await tenant_consumers.create(service.jetstream(), creds.consumer, creds.tenant)
            for node in cluster.nodes:
                assert await _reads_on(node.address, creds, service) == node.address.encode()

            # A node that is down when a credential is issued reads auth.conf when it comes back.
            down = cluster.nodes[2]
            down.kill()
            later = cluster.auth.issue("acme", cluster.address)
            await cluster.reload()
            await down.start()
            await cluster.wait_healthy()
            assert not await _refused(down.address, later)

            # Revocation reloads every node: the credential is refused on each of them.
            cluster.auth.revoke(creds.user)
            await cluster.reload()
            for node in cluster.nodes:
                assert await _refused(node.address, creds), node.address
        finally:
            # Closed while reconnecting (it may have been on the killed node), nats-py writes what it buffered
            # meanwhile to the transport it lost and raises: close it once it is back on a node.
            await wait_for(lambda: service.is_connected, what="the service connection back on a node")
            await service.close()
