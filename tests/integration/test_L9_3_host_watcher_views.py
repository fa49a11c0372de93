"""A host watcher reading the registry through its in-memory views (runtime/kv_view.py) judges as it would on a
complete read of the buckets (L9.3): a view whose watch stalled, or that is not read yet, never makes a beating
host look dead, and a host that really stopped is still found."""

from __future__ import annotations

from datetime import UTC, datetime

import nats

from treadle.eventlog import streams
from treadle.ops.servers import NatsServer
from treadle.provider_host.registry import HostRecord, Registry, SessionRecord
from treadle.provider_host.watcher import HOST_LOST, HostWatcher
from treadle.runtime.clock import ManualClock

EXPIRY, PERIOD = 5.0, 1.0


def _beat(host_id: str) -> HostRecord:
    return HostRecord(
        host_id=host_id,
        boot_id=f"boot-{host_id}",
        volume="local",
        capacity=4,
        live=1,
        heartbeat_seconds=PERIOD,
        at=datetime.now(UTC),
    )


async def test_L9_3_a_stalled_view_never_makes_a_beating_host_look_dead(tmp_path):
    server = NatsServer(tmp_path / "nats")
    await server.start()
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    await streams.ensure(js)
    registry = await Registry.open(js)
    reported: list[tuple[str, str]] = []

    async def report(session_id: str, record: SessionRecord, reason: str) -> None:
        reported.append((session_id, reason))

    clock = ManualClock()
    watcher = HostWatcher(registry, "h2", "boot-h2", clock, EXPIRY, PERIOD, report)
    try:
        session = SessionRecord(tenant="acme", thread="t1", provider_thread_id="pth_t1", boot_id="boot-h1")
        await registry.record_session("h1", "ps_1", session)
        await registry.record_session("h3", "ps_3", session)
        for host_id in ("h1", "h2", "h3"):
            await registry.beat(_beat(host_id))
        await registry.follow()
        assert await watcher.scan() == []  # whether the views are read yet or not: a complete read answers

        views = registry._views
        await views[Registry.HOSTS].until_complete()
        await views[Registry.SESSIONS].until_complete()
        await views[Registry.HOSTS]._sub.unsubscribe()  # the hosts' watch stalls, silently
        dead: list[str] = []
        for _ in range(int(EXPIRY / PERIOD) + 2):  # h1 and h2 beat along; h3 has stopped
            clock.advance(PERIOD)
            await registry.beat(_beat("h1"))
            await registry.beat(_beat("h2"))
            dead += await watcher.scan()
        assert dead == ["h3"]
        assert reported == [("ps_3", HOST_LOST)]
        await views[Registry.HOSTS].until_complete()
        assert views[Registry.HOSTS].opened >= 2  # opened again once it was found behind
    finally:
        await registry.close()
        await nc.close()
        await server.stop()
