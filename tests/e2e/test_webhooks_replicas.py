"""Two replicas of the webhook delivery worker share the thread partitions: every event is delivered, as one
delivery whichever replica holds its partition, and when one replica stops the other takes its partitions over."""

from __future__ import annotations

import asyncio
import collections

import msgspec
import nats
import pytest

from tests.support.api import Api
from tests.support.helpers import quiet, wait_for
from tests.support.receiver import Received, Receiver
from treadle.cli.stack import Stack
from treadle.ops.tokens import TokenStore
from treadle.runtime.leases import LeaseTable
from treadle.runtime.partitions import for_machine

P = for_machine(replicas=2)  # what the embedded stack of two replicas chose on this machine

pytestmark = pytest.mark.e2e


async def test_two_replicas_deliver_each_event_as_one_delivery_and_one_takes_over_when_the_other_stops(
    tmp_path,
) -> None:
    env = {"TREADLE_WEBHOOKS_ALLOW_HOSTS": '["127.0.0.1/32"]'}
    receiver = await Receiver().start()
    async with Stack(tmp_path / "stack", env=env, replicas=2, on_output=quiet) as stack:
        nc = await nats.connect(stack.nats_url)
        token = await TokenStore(nc.jetstream()).create("replicas", "admin", "admin")
        api = Api(stack.api_url, token, "replicas")
        try:
            async with LeaseTable(nc) as table:  # settled: no partition changes hands while the events come

                def even() -> bool:
                    held = table.holders("webhooks")
                    return len(held) == P and sorted(collections.Counter(held.values()).values()) == [P // 2] * 2

                await wait_for(even, timeout=30, what="partitions split between the two replicas")
            r = await api.request("POST", "/v1/webhooks", json={"url": receiver.url(), "events": ["thread.created"]})
            assert r.status_code == 201, r.text
            first = await asyncio.gather(*(api.create_thread(title=f"t{i}") for i in range(16)))
            await receiver.wait(16, timeout=60)

            await stack.processes.halt("webhooks-2")  # its partitions pass to "webhooks" once its leases lapse
            later = await asyncio.gather(*(api.create_thread(title=f"u{i}") for i in range(8)))
            expected = {*first, *later}
            await wait_for(lambda: _threads(receiver.requests) >= expected, timeout=60, what="every thread delivered")
            got = list(receiver.requests)
        finally:
            await api.close()
            await receiver.stop()
            await nc.close()
    deliveries: dict[str, set[str]] = collections.defaultdict(set)
    for g in got:
        deliveries[msgspec.json.decode(g.body)["thread_id"]].add(g.headers["treadle-delivery"])
    assert set(deliveries) == expected
    # At least once: a post whose record the halted replica had not written yet is sent again by the one that
    # takes its partition over, as the same delivery (one id per thread), so a receiver can drop the repeat.
    assert all(len(ids) == 1 for ids in deliveries.values()), deliveries


def _threads(requests: list[Received]) -> set[str]:
    return {msgspec.json.decode(r.body)["thread_id"] for r in requests}
