"""Issue 35: volumes announce themselves (a checkpoint service's heartbeat in ``treadle-volumes``, the provider
hosts' in ``treadle-hosts``, drain marks) and the reader gives each one's liveness, capacity and load."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec

from treadle.core import placement
from treadle.eventlog import streams
from treadle.runtime.volumes import Announcer, Volumes, drain


def host_record(host_id: str, volume: str, capacity: int, live: int) -> bytes:
    return msgspec.json.encode(
        {
            "host_id": host_id,
            "boot_id": "b",
            "volume": volume,
            "capacity": capacity,
            "live": live,
            "heartbeat_seconds": 2.0,
            "at": datetime.now(UTC),
        }
    )


async def test_announced_volumes_with_their_hosts_load_and_drain_marks(nc, tmp_path):
    js = nc.jetstream()
    await streams.ensure(js)
    a, b = f"va{uuid.uuid4().hex[:8]}", f"vb{uuid.uuid4().hex[:8]}"
    (tmp_path / a / "acme" / "threads" / "thr_1").mkdir(parents=True)
    (tmp_path / a / "acme" / "proj").mkdir()
    (tmp_path / a / "other" / "threads" / "thr_2").mkdir(parents=True)
    announcer = Announcer(js, a, tmp_path / a)
    await announcer.start()
    hosts = await js.key_value("treadle-hosts")
    await hosts.put(f"h-{a}", host_record(f"h-{a}", a, capacity=4, live=1))
    await hosts.put(f"h-{b}", host_record(f"h-{b}", b, capacity=4, live=0))  # hosts, but no checkpoint service
    reader = Volumes(js, cache_seconds=0)
    try:
        mine = {v.name: v for v in (await reader.snapshot()).volumes if v.name in (a, b)}
        assert mine[a].checkpoints and (mine[a].hosts, mine[a].capacity, mine[a].live) == (1, 4, 1)
        assert mine[a].workspaces == 3 and mine[a].disk_free and placement.placeable(mine[a])
        assert not mine[b].checkpoints and not placement.placeable(mine[b])
        snapshot = await reader.snapshot()
        assert snapshot.tenant_threads("acme")[a] == 2 and snapshot.tenant_threads("other")[a] == 1

        # a placement counts at once, and once: when the heartbeat has it, it is not counted twice
        reader.placed(a, "acme")
        assert (await reader.snapshot()).tenant_threads("acme")[a] == 3
        (tmp_path / a / "acme" / "threads" / "thr_3").mkdir()
        await announcer.beat()
        snapshot = await reader.snapshot()
        assert snapshot.tenant_threads("acme")[a] == 3
        assert next(v for v in snapshot.volumes if v.name == a).workspaces == 4

        await drain(js, a)
        assert next(v for v in (await reader.snapshot()).volumes if v.name == a).draining
        await drain(js, a, draining=False)
        assert not next(v for v in (await reader.snapshot()).volumes if v.name == a).draining
    finally:
        await announcer.stop()
        await hosts.delete(f"h-{a}")
        await hosts.delete(f"h-{b}")
    gone = {v.name: v for v in (await reader.snapshot()).volumes}
    assert a not in gone or not gone[a].checkpoints  # a stopped service takes its volume out of placement
