"""Issue 35 on the twins of the coordinator's and supervisor's ports: a new thread is placed on a live volume
(none: a typed 503 and nothing appended), and its workspace and sessions are asked for on that volume."""

from __future__ import annotations

from tests.unit.twins import Twins
from treadle.core.commands import Accepted, Rejected
from treadle.core.placement import Volume
from treadle.core.thread.commands import CreateThread, SendMessage


async def test_with_no_live_volume_a_creation_is_refused_and_nothing_is_appended(tmp_path):
    tw = Twins(tmp_path)
    tw.volumes.volumes = [
        Volume(name="node-1", checkpoints=True, hosts=0),
        Volume(name="node-2", checkpoints=False, hosts=1),
    ]
    refused = await tw.command(tw.coordinator(), CreateThread(title="t"))
    assert isinstance(refused, Rejected) and (refused.code, refused.status) == ("no_volume", 503), refused
    assert "no workspace volume" in refused.message
    assert tw.log.messages == [] and tw.checkpoints.volumes == []


async def test_threads_are_spread_and_each_is_prepared_and_placed_on_its_home(tmp_path):
    tw = Twins(tmp_path)
    tw.volumes.volumes = [Volume(name=f"node-{i}", checkpoints=True, hosts=1, capacity=8) for i in (1, 2, 3)]
    tw.hosts.add("host-1")
    coordinator, supervisor = tw.coordinator(), tw.supervisor()
    homes = []
    for n in range(3):
        created = await tw.command(coordinator, CreateThread(title=f"t{n}"))
        assert isinstance(created, Accepted), created
        state = await tw.state(created.thread_id)
        assert state.thread is not None
        homes.append(state.thread.volume)
        assert tw.checkpoints.volumes[-1] == state.thread.volume  # prepared on its home
        sent = await tw.command(coordinator, SendMessage(text="go"), thread=created.thread_id)
        assert isinstance(sent, Accepted), sent
        await tw.wake(supervisor)
        assert tw.hosts.volumes and set(tw.hosts.volumes[-1:]) == {state.thread.volume}  # its session too
    assert sorted(homes) == ["node-1", "node-2", "node-3"]
