"""L9 across real processes, on a stack of its own with three provider hosts, a short idle time and a short
heartbeat expiry: the idle reaper releases a session and the next message resumes the same provider thread;
a provider host lost mid-turn (kill -9, kept down) has its run recovered on another host; a whole-stack
restart while a run waits on an approval leaves that request not_resumable and the thread usable."""

from __future__ import annotations

import time

import nats
import pytest

from tests.support.api import make_api
from tests.support.helpers import quiet, wait_for
from tests.support.scripts import approval, script, text
from treadle.cli.stack import Stack
from treadle.core import events as ev
from treadle.core.state import fold
from treadle.eventlog.log import EventLog

pytestmark = pytest.mark.e2e

ENV = {
    "TREADLE_PROVIDER_HOST_IDLE_SECONDS": "1.5",
    "TREADLE_PROVIDER_HOST_HEARTBEAT_SECONDS": "0.5",
    "TREADLE_PROVIDER_HOST_HOST_EXPIRY_SECONDS": "2.5",
}
REPLY = "".join(f"piece {i:02d}. " for i in range(40))
LONG = {"steps": [{"type": "text", "text": REPLY, "chunk": 10, "delay_ms": 50}]}  # about 2 s of streaming


@pytest.fixture(scope="module")
async def stack(tmp_path_factory):
    async with Stack(tmp_path_factory.mktemp("hosts"), env=ENV, provider_hosts=3, on_output=quiet) as s:
        yield s


@pytest.fixture(scope="module")
async def nc(stack):
    conn = await nats.connect(stack.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.25)
    yield conn
    await conn.close()


@pytest.fixture
def log(nc) -> EventLog:
    return EventLog(nc)


@pytest.fixture
async def api(stack, nc, request):
    client = await make_api(stack, nc, f"hosts{request.node.name.split('_')[2]}{id(request) % 10_000}")
    yield client
    await client.close()


async def _events(log: EventLog, api, thread: str):
    try:
        return await log.read(api.tenant, thread)
    except Exception:  # the test's own connection is reconnecting after a broker restart
        return []


async def test_L9_3_the_idle_reaper_releases_a_session_and_the_next_message_resumes_its_provider_thread(api, log):
    thread = await api.create_thread(title="idle")
    first = await api.send(thread, "hello")
    await api.wait_run(first["run_id"])

    async def released():
        return [e.data for e in await log.read(api.tenant, thread) if isinstance(e.data, ev.ProviderStopped)]

    stops = await wait_for(released, timeout=20, what="the idle session released by the reaper")
    assert [s.reason for s in stops] == ["idle"]

    second = await api.send(thread, "again")
    run = await api.wait_run(second["run_id"])
    assert [m["text"] for m in run["messages"] if m["role"] == "assistant"] == [
        "Scripted reply to your 1-word message: again"
    ]
    attached = [e.data for e in await log.read(api.tenant, thread) if isinstance(e.data, ev.ProviderAttached)]
    assert len(attached) == 2 and attached[0].session_id != attached[1].session_id
    assert (attached[0].resumed, attached[1].resumed) == (False, True)
    assert attached[1].native_ref == attached[0].native_ref
    assert attached[1].provider_thread_id == attached[0].provider_thread_id
    state = fold(await log.read(api.tenant, thread))
    assert [s.reason for s in state.sessions] == ["idle", None] and len(state.provider_threads) == 1


async def test_L9_3_kill_9_of_a_provider_host_mid_turn_recovers_the_run_on_another_host(api, stack, log):
    thread = await api.create_thread(title="host loss")
    sent = await api.send(thread, "stream a while", script=LONG)
    run_id = sent["run_id"]

    async def streaming():
        state = fold(await log.read(api.tenant, thread))
        return state if any(m.run_id == run_id and m.role == "assistant" and m.text for m in state.messages) else None

    state = await wait_for(streaming, timeout=20, what="the first durable delta")
    lost_host = state.live_session.host_id
    lost_at = time.monotonic()
    await stack.processes.halt(stack.host_processes[lost_host])  # the machine is gone: nothing restarts it
    try:

        async def resumed():
            run = fold(await log.read(api.tenant, thread)).run(run_id)
            return run.attempt.reason == "provider_recovery" and run.attempt.status in ("running", "completed")

        await wait_for(resumed, timeout=30, what="the recovery attempt running on another host")
        recovered_in = time.monotonic() - lost_at
        completed = await api.wait_run(run_id, timeout=30)
        done_in = time.monotonic() - lost_at
        print(f"\nL9.3 host loss -> run resumed on another host: {recovered_in:.2f}s; -> run completed: {done_in:.2f}s")

        events = await log.read(api.tenant, thread)
        state = fold(events)
        run = state.run(run_id)
        assert completed["status"] == "completed"
        assert [a.status for a in run.attempts] == ["lost", "completed"]
        ended = [e.data for e in events if isinstance(e.data, ev.AttemptEnded)]
        assert [(a.status, a.reason) for a in ended] == [("lost", "host_lost")]
        assert state.live_session.host_id != lost_host
        attached = [e.data for e in events if isinstance(e.data, ev.ProviderAttached)]
        assert attached[-1].resumed and len({a.provider_thread_id for a in attached}) == 1
        final = [m for m in state.messages if m.role == "assistant" and m.attempt_id == run.attempt.id]
        assert [(m.text, m.status) for m in final] == [(REPLY, "completed")]
        assert [e.type for e in events if isinstance(e.data, ev.RunEnded)] == ["run.completed"]
    finally:
        await stack.processes.start()  # the lost host comes back for the next test
        await stack.wait_ready()


async def test_L9_3_a_crashing_provider_runtime_is_retried_on_its_resumed_thread_then_fails_clearly(api, log):
    thread = await api.create_thread(title="crash")
    sent = await api.send(thread, "crash please", script=script(text("working on it"), {"type": "crash"}))
    run = await api.wait_run(sent["run_id"], status="failed")
    assert run["error"] == "provider lost 3 times: provider_crashed (the scripted runtime crashed)"
    events = await log.read(api.tenant, thread)
    state = fold(events)
    attempts = state.run(sent["run_id"]).attempts
    assert [(a.status, a.reason) for a in attempts] == [
        ("lost", "initial"),
        ("lost", "provider_recovery"),
        ("failed", "provider_recovery"),
    ]
    assert [s.reason for s in state.sessions] == ["provider_crashed"] * 3
    attached = [e.data for e in events if isinstance(e.data, ev.ProviderAttached)]
    assert [a.resumed for a in attached] == [False, True, True] and len(state.provider_threads) == 1
    follow = await api.send(thread, "still there?")
    assert (await api.wait_run(follow["run_id"]))["status"] == "completed"


async def test_L9_3_L9_4_whole_stack_restart_with_a_waiting_approval_leaves_it_not_resumable(api, stack, log):
    thread = await api.create_thread(title="restart")
    sent = await api.send(thread, "deploy", script=script(approval("deploy?"), text("deployed")))
    waiting = await api.wait_request(thread)

    await stack.processes.stop()
    await stack.nats.stop()
    await stack.nats.start()
    await stack.processes.start()
    await stack.wait_ready()

    stale = await api.wait_request(thread, status="not_resumable")
    assert stale["id"] == waiting["id"]
    gone = await api.request("POST", f"/v1/requests/{waiting['id']}/respond", json={"decision": "accept"})
    assert gone.status_code == 409
    # The run was retried on a resumed provider thread, which asks again; the thread carries on from there.
    again = await api.wait_request(thread)
    assert again["id"] != waiting["id"] and again["prompt"] == "deploy?"
    await api.post(f"/v1/requests/{again['id']}/respond", {"decision": "accept"}, expect=200)
    run = await api.wait_run(sent["run_id"])
    assert [m["text"] for m in run["messages"] if m["role"] == "assistant" and m["status"] == "completed"] == [
        "deployed"
    ]
    follow = await api.send(thread, "status?")
    await api.wait_run(follow["run_id"])
    state = fold(await _events(log, api, thread))
    # Lost once at the stop (more only if a host took the run while the stack was stopping), then completed.
    statuses = [a.status for a in state.run(sent["run_id"]).attempts]
    assert statuses[-1] == "completed" and set(statuses[:-1]) == {"lost"}, statuses
    assert len(state.provider_threads) == 1
