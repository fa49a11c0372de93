"""L9.3 in the supervisor against a real broker: a run handed to a session whose host is dead (nobody listens on
its subjects any more, and the host watcher has not reported it yet) is placed again on a live host at once.
Waiting for the watcher's report instead would hold the thread's mailbox, where that report queues behind the
hand-over (a stall the chaos test found)."""

from __future__ import annotations

from datetime import datetime, timezone

import nats

from helpers import wait_for
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints_service.service import CheckpointService
from treadle.domain import events as ev
from treadle.domain.entities import ProviderCapabilities
from treadle.domain.thread import fold
from treadle.eventlog import streams
from treadle.eventlog.log import EventLog
from treadle.provider_host.service import ProviderHost
from treadle.runtime.servers import NatsServer
from treadle.runtime.settings import ProviderHostSettings, Shared, SupervisorSettings
from treadle.supervisor.service import Supervisor

T0 = datetime(2026, 12, 3, tzinfo=timezone.utc)
TENANT, THREAD = "acme", "thr_unreachable"


def envelope(i: int, data: ev.Payload) -> ev.Envelope:
    return ev.Envelope(id=f"evt_u{i}", type=data.TYPE, tenant=TENANT, thread=THREAD, at=T0, command_id="cmd_u",
                       actor="test", data=data)


async def test_L9_3_a_run_handed_to_a_session_on_a_dead_host_is_placed_again_on_a_live_one(tmp_path):
    async with NatsServer(tmp_path / "nats") as server:  # a broker of its own: no other test's hosts
        nc = await nats.connect(server.url)
        await streams.ensure(nc.jetstream())
        shared = Shared(state_dir=tmp_path, nats_url=server.url)
        workspaces = Workspaces(shared.workspaces, tmp_path / "shadow")
        await workspaces.prepare(TENANT, THREAD, "w")
        checkpoints = CheckpointService(nc, workspaces, shared.volume)
        await checkpoints.start()
        log = EventLog(nc)
        # A dispatched run whose session lives on host-dead, which no longer runs: its turn was never started.
        history = [
            ev.ThreadCreated(thread_id=THREAD, workspace="w", created_by="u"),
            ev.RunQueued(run_id="run_1", ordinal=1, message_id="msg_1", text="go", root_node_id="node_1",
                         attempt_id="att_1", mode="auto", disposition="started", dispatched=True, provider="scripted"),
            ev.CheckpointCaptured(checkpoint_id="ckpt_0", ordinal=0, kind="baseline", status="baseline"),
            ev.ProviderAttached(session_id="ps_dead", provider="scripted", host_id="host-dead", boot_id="gone",
                                provider_thread_id="pth_1", native_ref="scripted-pth_1",
                                capabilities=ProviderCapabilities()),
        ]
        seq = 0
        for i, payload in enumerate(history):
            seq = await log.append(TENANT, THREAD, seq, [envelope(i, payload)])
        host = ProviderHost(nc, shared, ProviderHostSettings(host_id="host-live"))
        await host.start()
        supervisor = Supervisor(nc, shared, SupervisorSettings(host_timeout=0.5))
        await supervisor.start()
        try:
            async def completed():
                state = fold(await log.read(TENANT, THREAD))
                return state if state.run("run_1").status == "completed" else None
            state = await wait_for(completed, timeout=30, what="the run completed on the live host")
            stops = [e.data for e in await log.read(TENANT, THREAD) if isinstance(e.data, ev.ProviderStopped)]
            assert [(s.session_id, s.reason) for s in stops] == [("ps_dead", "host_unreachable")]
            assert state.live_session.host_id == "host-live"
            assert [p.id for p in state.provider_threads] == ["pth_1"]  # resumed, not replaced
            assert [a.status for a in state.run("run_1").attempts] == ["completed"]
        finally:
            await supervisor.stop()
            await host.stop()
            await checkpoints.stop()
            await nc.close()
