"""Tenant policies are read on every command (ops/policies.py): on one replica with a direct get, which costs the
server no stream-API request and no advisory, and still sees a put made just before it, from any connection.
A bucket an earlier deployment made without direct gets is given them by ``streams.ensure``."""

from __future__ import annotations

import dataclasses
import uuid

import nats
from nats.aio.client import Client as NatsClient

from treadle.core.policy import TenantPolicy
from treadle.eventlog import streams
from treadle.ops.policies import BUCKET, PolicyStore

STREAM = f"KV_{BUCKET}"


async def _allow_direct(nc: NatsClient) -> bool:
    return bool((await nc.jetstream().stream_info(STREAM)).config.allow_direct)


async def test_ensure_gives_an_earlier_policy_bucket_direct_gets(nc):
    js = nc.jetstream()
    await streams.ensure(js)
    info = await js.stream_info(STREAM)
    await js.update_stream(dataclasses.replace(info.config, allow_direct=False))  # as an earlier deployment left it
    assert not await _allow_direct(nc)
    await streams.ensure(js)
    assert await _allow_direct(nc)
    assert not (await js.stream_info("KV_treadle-idempotency")).config.allow_direct  # only the buckets in DIRECT


async def test_a_policy_put_is_read_by_the_next_command_with_a_direct_get_and_no_stream_api_call(nc, nats_url):
    await streams.ensure(nc.jetstream())
    tenant = "pol" + uuid.uuid4().hex[:8]
    coordinator = await nats.connect(nats_url)  # the reader is another process than the admin who puts
    tap = await nats.connect(nats_url)
    api: list[str] = []
    try:
        reader = PolicyStore(coordinator.jetstream())
        assert await reader.get(tenant) == TenantPolicy()  # none stored: the default

        async def tapped(msg) -> None:
            api.append(msg.subject)

        sub = await tap.subscribe("$JS.API.>", cb=tapped)
        await tap.flush()
        for limit in (3, 4, 5):
            await PolicyStore(nc.jetstream()).put(tenant, TenantPolicy(max_queued_runs=limit), actor="admin")
            assert (await reader.get(tenant)).max_queued_runs == limit  # at once, never the policy before
        await coordinator.flush()
        await tap.flush()
        await sub.unsubscribe()
        reads = [s for s in api if s.startswith(f"$JS.API.DIRECT.GET.{STREAM}.")]
        assert len(reads) == 3
        assert not [s for s in api if s.startswith("$JS.API.STREAM.MSG.GET")]
    finally:
        await coordinator.close()
        await tap.close()
