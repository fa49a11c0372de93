"""L9.4 against a real broker: a run's provider host is lost mid-turn while a request waits, and its
provider thread then cannot be resumed. The graph is kept, the old provider thread is marked unusable, the
request is not_resumable, and the run is retried on a replacement provider thread that starts from the app
thread's own history."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from tests.integration.supervised import thread_with_history
from tests.support.helpers import wait_for
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.state import fold
from treadle.eventlog import subjects
from treadle.provider_host.service import ProviderHost
from treadle.runtime.settings import ProviderHostSettings, SupervisorSettings
from treadle.supervisor.service import Supervisor

T0 = datetime(2026, 12, 3, tzinfo=UTC)
TENANT, THREAD = "acme", "thr_replace"


def envelope(i: int, data: ev.Payload) -> ev.Envelope:
    return ev.Envelope(
        id=f"evt_x{i}", type=data.TYPE, tenant=TENANT, thread=THREAD, at=T0, command_id="cmd_x", actor="test", data=data
    )


def queued(run: str, ordinal: int, text: str) -> ev.RunQueued:
    return ev.RunQueued(
        run_id=run,
        ordinal=ordinal,
        message_id=f"msg_u{ordinal}",
        text=text,
        root_node_id=f"node_{run}",
        attempt_id=f"att_{run}",
        mode="auto",
        disposition="started",
        dispatched=True,
        provider="scripted",
    )


HISTORY = [
    ev.ThreadCreated(thread_id=THREAD, workspace="w", created_by="u"),
    queued("run_1", 1, "my name is Ada"),
    ev.CheckpointCaptured(checkpoint_id="ckpt_0", ordinal=0, kind="baseline", status="baseline"),
    # A native ref the scripted runtime never minted: it cannot be resumed.
    ev.ProviderAttached(
        session_id="ps_old",
        provider="scripted",
        host_id="host-gone",
        boot_id="b0",
        provider_thread_id="pth_old",
        native_ref="elsewhere-thread-7",
        capabilities=ProviderCapabilities(approvals=["command"]),
    ),
    ev.RunStarted(run_id="run_1", attempt_id="att_run_1", session_id="ps_old", turn_id="turn_1"),
    ev.MessageCompleted(
        message_id="msg_a1", run_id="run_1", attempt_id="att_run_1", node_id="node_run_1", text="Hello Ada."
    ),
    ev.RunCompleted(
        run_id="run_1",
        attempt_id="att_run_1",
        checkpoint=ev.CheckpointCaptured(
            checkpoint_id="ckpt_1", run_id="run_1", ordinal=1, kind="run", status="completed"
        ),
    ),
    queued("run_2", 2, "what is my name?"),
    ev.RunStarted(run_id="run_2", attempt_id="att_run_2", session_id="ps_old", turn_id="turn_2"),
    ev.RequestOpened(
        request_id="req_1", run_id="run_2", node_id="node_req", attempt_id="att_run_2", kind="command", prompt="ls?"
    ),
]


async def test_L9_4_a_failed_resume_continues_on_a_replacement_provider_thread_built_from_app_context(tmp_path):
    async with thread_with_history(tmp_path, [envelope(i, p) for i, p in enumerate(HISTORY)]) as world:
        nc, log, shared = world.nc, world.log, world.shared
        supervisor = Supervisor(nc, shared, SupervisorSettings(host_timeout=2.0))
        host = ProviderHost(nc, shared, ProviderHostSettings(host_id="host-new"))
        await supervisor.start()
        await host.start()
        try:
            lost = pe.ProviderEvent(
                id="evt_lost",
                tenant=TENANT,
                thread=THREAD,
                session_id="ps_old",
                provider_thread_id="pth_old",
                at=T0,
                body=pe.SessionStopped(reason="host_lost"),
            )
            await nc.jetstream().publish(subjects.provider(TENANT, THREAD, "pth_old"), msgspec.json.encode(lost))

            async def completed():
                state = fold(await log.read(TENANT, THREAD))
                return state if state.run("run_2").status == "completed" else None

            state = await wait_for(completed, timeout=30, what="run_2 completed on a replacement provider thread")

            old, new = state.provider_threads
            assert (old.id, old.status, old.native_ref) == ("pth_old", "unusable", "elsewhere-thread-7")
            assert (new.status, new.replaces) == ("active", "pth_old") and new.id != "pth_old"
            assert state.live_session.host_id == "host-new"
            run = state.run("run_2")
            assert [(a.status, a.reason) for a in run.attempts] == [
                ("lost", "initial"),
                ("completed", "provider_recovery"),
            ]
            assert run.attempts[-1].provider_thread_id == new.id
            assert state.request("req_1").status == "not_resumable"
            # The graph is kept: the first run and its answer are untouched.
            assert state.run("run_1").status == "completed"
            assert [m.text for m in state.messages if m.run_id == "run_1"] == ["my name is Ada", "Hello Ada."]
            # The replacement started from the conversation (the scripted reply echoes what it was given).
            reply = next(
                m.text
                for m in state.messages
                if m.run_id == "run_2" and m.role == "assistant" and m.status == "completed"
            )
            assert "my name is Ada" in reply and "Hello Ada." in reply
            events = await log.read(TENANT, THREAD)
            failed = [e.data for e in events if isinstance(e.data, ev.ProviderResumeFailed)]
            assert [f.provider_thread_id for f in failed] == ["pth_old"]
            assert "elsewhere-thread-7" in failed[0].reason
        finally:
            await host.stop()
            await supervisor.stop()
