"""Tenant policies from a watched cache (ops/policy_cache.py), with the bound decided in issue 38: a change applies
to every command accepted more than one second after its PUT answered, and at once on the replica that took it.
Time is a ManualClock, so "after one second" is a step of the clock, and "the watch has it" is awaited."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator

import msgspec
import nats
import pytest
from nats.aio.client import Client as NatsClient

from treadle.core.policy import TenantPolicy
from treadle.eventlog import streams
from treadle.ops.policies import PolicyStore
from treadle.ops.policy_cache import BOUND, PolicyCache
from treadle.runtime.clock import ManualClock


class CountingStore(PolicyStore):
    """The bucket reads the cache falls back to, counted (the real store underneath)."""

    reads = 0

    async def get(self, tenant: str) -> TenantPolicy:
        self.reads += 1
        return await super().get(tenant)


def _tenant() -> str:
    return "pol" + uuid.uuid4().hex[:8]


@pytest.fixture
async def reader(nats_url: str) -> AsyncIterator[tuple[PolicyCache, CountingStore, ManualClock]]:
    """A cache on a connection of its own (another replica than the writer's), confirmed once."""
    nc = await nats.connect(nats_url)
    await streams.ensure(nc.jetstream())
    clock = ManualClock()
    store = CountingStore(nc.jetstream())
    cache = PolicyCache(store, clock)
    await cache.start()
    while not cache.fresh():  # the first probe runs at start, before the loop parks on the clock
        await nc.flush()
    try:
        yield cache, store, clock
    finally:
        await cache.stop()
        await nc.close()


async def test_a_put_elsewhere_reaches_the_cache_through_the_watch_with_no_bucket_read(nc, reader):
    cache, store, _ = reader
    tenant = _tenant()
    _, revision = await PolicyStore(nc.jetstream()).write(tenant, TenantPolicy(max_queued_runs=3), actor="admin")
    await cache.delivered(revision)
    assert (await cache.get(tenant)).max_queued_runs == 3
    assert (await cache.get(_tenant())) == TenantPolicy()  # none stored: the default, from memory too
    assert store.reads == 0


async def test_a_put_applies_at_once_on_the_replica_that_took_it(reader):
    cache, store, _ = reader
    tenant = _tenant()
    for limit in (3, 4, 5):
        await cache.put(tenant, TenantPolicy(max_queued_runs=limit), actor="admin")
        assert (await cache.get(tenant)).max_queued_runs == limit  # no wait on the watch, never the one before
    assert store.reads == 0


async def test_a_put_applies_to_every_read_more_than_the_bound_after_it_answered_whatever_the_watch(nc, reader):
    """The cache is stale at most until its confirmation is BOUND old: from then on, until a probe sent after the
    PUT confirms it again, a read asks the bucket, so even a watch that never delivered cannot serve the old policy.
    """
    cache, store, clock = reader
    tenant = _tenant()
    await cache.put(tenant, TenantPolicy(max_queued_runs=1), actor="admin")
    await PolicyStore(nc.jetstream()).put(tenant, TenantPolicy(max_queued_runs=2), actor="admin")  # answered now
    for task in cache._tasks:
        task.cancel()  # the watch and probe stop: only the bound protects the reader now
    clock.advance(BOUND)
    assert not cache.fresh()
    assert (await cache.get(tenant)).max_queued_runs == 2
    assert store.reads == 1


async def test_an_unreadable_record_raises_as_the_bucket_read_does(nc, reader):
    cache, _, _ = reader
    tenant = _tenant()
    kv = await nc.jetstream().key_value("treadle-policies")
    revision = await kv.put(tenant, b"{not json")
    await cache.delivered(revision)
    with pytest.raises(msgspec.DecodeError):
        await cache.get(tenant)
    assert (await cache.get(_tenant())) == TenantPolicy()  # the others still served


async def test_a_deleted_policy_is_the_default_again(nc: NatsClient, reader):
    cache, _, _ = reader
    tenant = _tenant()
    await cache.put(tenant, TenantPolicy(max_queued_runs=3), actor="admin")
    kv = await nc.jetstream().key_value("treadle-policies")
    await kv.delete(tenant)
    info = await nc.jetstream().stream_info("KV_treadle-policies")
    await cache.delivered(info.state.last_seq)
    assert (await cache.get(tenant)) == TenantPolicy()


async def test_a_bucket_without_direct_gets_is_probed_through_its_leader(nc, nats_url):
    """On a cluster the bucket answers no direct gets (``streams.DIRECT``): the probe asks the stream's leader."""
    js = nc.jetstream()
    await streams.ensure(js)
    info = await js.stream_info("KV_treadle-policies")
    await js.update_stream(dataclasses.replace(info.config, allow_direct=False))
    reader = await nats.connect(nats_url)
    store = CountingStore(reader.jetstream())
    cache = PolicyCache(store, ManualClock())
    try:
        await cache.start()
        while not cache.fresh():
            await reader.flush()
        tenant = _tenant()
        _, revision = await PolicyStore(js).write(tenant, TenantPolicy(max_threads=4), actor="admin")
        await cache.delivered(revision)
        assert (await cache.get(tenant)).max_threads == 4 and store.reads == 0
    finally:
        await cache.stop()
        await reader.close()
        await js.update_stream(dataclasses.replace(info.config, allow_direct=True))


async def test_an_idle_cache_stops_probing_and_the_first_read_after_goes_to_the_bucket_and_wakes_it(nc, reader):
    cache, store, clock = reader
    tenant = _tenant()
    await PolicyStore(nc.jetstream()).put(tenant, TenantPolicy(max_threads=6), actor="admin")
    clock.advance(BOUND)  # no read for a bound: the probe loop parks until one comes
    assert not cache.fresh()
    assert (await cache.get(tenant)).max_threads == 6 and store.reads == 1  # from the bucket, as before the cache
    while not cache.fresh():  # the read woke the probe, which confirms the cache again
        await nc.flush()
    assert (await cache.get(tenant)).max_threads == 6 and store.reads == 1


async def test_a_command_carrying_a_newer_revision_reads_the_bucket_even_while_the_cache_is_confirmed(nc, reader):
    """Read-your-writes across processes: the gateway that took a PUT stamps its revision on the commands it sends
    (``Command.policy_revision``), and a coordinator whose watch has not brought it yet reads the bucket."""
    cache, store, _ = reader
    tenant = _tenant()
    await cache.get(tenant)  # the default, from memory
    _, revision = await PolicyStore(nc.jetstream()).write(tenant, TenantPolicy(max_queued_runs=7), actor="admin")
    if cache.revision(tenant) < revision:  # the watch may have brought it already: then memory is as good
        reads = store.reads
        assert (await cache.get(tenant, at_least=revision)).max_queued_runs == 7
        assert store.reads == reads + 1
    await cache.delivered(revision)
    reads = store.reads
    assert (await cache.get(tenant, at_least=revision)).max_queued_runs == 7
    assert store.reads == reads  # once the watch has it, from memory again
