"""L9.3 in the supervisor against a real broker: a run whose provider session is lost while no provider
host is up gets its recovery attempt handed over as soon as a host comes back."""

from __future__ import annotations

from datetime import datetime, timezone

import msgspec
import nats

from helpers import wait_for
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints_service.service import CheckpointService
from treadle.domain import events as ev
from treadle.domain import provider_events as pe
from treadle.domain.entities import ProviderCapabilities
from treadle.domain.thread import fold
from treadle.eventlog import streams, subjects
from treadle.eventlog.log import EventLog
from treadle.provider_host.service import ProviderHost
from treadle.runtime.servers import NatsServer
from treadle.runtime.settings import ProviderHostSettings, Shared, SupervisorSettings
from treadle.supervisor.service import Supervisor

T0 = datetime(2026, 12, 2, tzinfo=timezone.utc)
TENANT, THREAD = "acme", "thr_recover"


def envelope(i: int, data: ev.Payload) -> ev.Envelope:
    return ev.Envelope(id=f"evt_r{i}", type=data.TYPE, tenant=TENANT, thread=THREAD, at=T0, command_id="cmd_r",
                       actor="test", data=data)


async def test_L9_3_recovery_attempt_waits_for_a_host_and_then_completes_the_run(tmp_path):
    async with NatsServer(tmp_path / "nats") as server:  # a broker of its own: no other test's runs
        nc = await nats.connect(server.url)
        await streams.ensure(nc.jetstream())
        shared = Shared(state_dir=tmp_path, nats_url=server.url)
        workspaces = Workspaces(shared.workspaces, tmp_path / "shadow")
        ready = await workspaces.prepare(TENANT, THREAD, "w")
        checkpoints = CheckpointService(nc, workspaces, shared.volume)
        await checkpoints.start()
        log = EventLog(nc)
        # A run mid-turn on session ps_old, whose host is gone.
        history = [
            ev.ThreadCreated(thread_id=THREAD, workspace="w", created_by="u"),
            ev.RunQueued(run_id="run_1", ordinal=1, message_id="msg_1", text="go", root_node_id="node_1",
                         attempt_id="att_1", mode="auto", disposition="started", dispatched=True, provider="scripted"),
            ev.CheckpointCaptured(checkpoint_id="ckpt_0", ordinal=0, kind="baseline", status="baseline"),
            ev.ProviderAttached(session_id="ps_old", provider="scripted", host_id="host-r", boot_id="gone",
                                provider_thread_id="pth_1", native_ref="scripted-pth_1",
                                capabilities=ProviderCapabilities()),
            ev.RunStarted(run_id="run_1", attempt_id="att_1", session_id="ps_old", turn_id="turn_1"),
        ]
        seq = 0
        for i, payload in enumerate(history):
            seq = await log.append(TENANT, THREAD, seq, [envelope(i, payload)])
        supervisor = Supervisor(nc, shared, SupervisorSettings(host_timeout=0.5))
        await supervisor.start()
        stopped = pe.ProviderEvent(id="evt_stop", tenant=TENANT, thread=THREAD, session_id="ps_old",
                                   provider_thread_id="pth_1", at=T0, body=pe.SessionStopped(reason="host_restarted"))
        await nc.jetstream().publish(subjects.provider(TENANT, THREAD, "pth_1"), msgspec.json.encode(stopped))

        async def recovery_pending():
            run = fold(await log.read(TENANT, THREAD)).run("run_1")
            return run.attempt.reason == "provider_recovery" and run.attempt.status == "pending"
        await wait_for(recovery_pending, what="the recovery attempt recorded while no host is up")

        host = ProviderHost(nc, shared, ProviderHostSettings(host_id="host-new"))
        await host.start()
        try:
            async def completed():
                state = fold(await log.read(TENANT, THREAD))
                return state if state.run("run_1").status == "completed" else None
            state = await wait_for(completed, timeout=30, what="the run completed on the new host")
            run = state.run("run_1")
            assert [a.status for a in run.attempts] == ["lost", "completed"]
            assert state.live_session.host_id == "host-new"
            assert [p.id for p in state.provider_threads] == ["pth_1"]  # resumed, not replaced
            assert ready.git
        finally:
            await host.stop()
            await supervisor.stop()
            await checkpoints.stop()
            await nc.close()
