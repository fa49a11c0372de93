"""Issue 6 (chaos seed 2): a provider host's turn publisher keeps retrying a provider event while the broker
is away (the event must not be lost), but not once the host's own connection is closed: that connection never
comes back, and retrying on it forever kept a stopping host from ever exiting."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.errors import ConnectionClosedError

from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.eventlog import streams
from treadle.provider_host.publisher import TurnPublisher


async def test_a_turn_publisher_on_a_closed_connection_gives_up_instead_of_retrying(nats_url, nc):
    await streams.ensure(nc.jetstream())
    host_nc = await nats.connect(nats_url, name="provider-host-under-test")
    publisher = TurnPublisher(
        host_nc,
        tenant="acme",
        thread="thr_closed",
        session_id="ps_1",
        provider_thread_id="pth_1",
        run_id="run_1",
        attempt_id="att_1",
        ids=IdFactory("att_1", 0),
    )
    await publisher.event(pe.TurnStarted(native_turn_ref="turn-1"))  # stored while the connection is open
    await host_nc.close()
    with pytest.raises(ConnectionClosedError):
        await asyncio.wait_for(publisher.event(pe.TurnCompleted(status="completed")), 10)
    publisher.close()
