"""Fair share of provider capacity across real processes (L9.3): one provider host with room for four sessions,
at most four live sessions and two concurrent runs per tenant. A tenant that floods the host cannot strand
another tenant's run: a full host releases an idle session of the busiest tenant, and what cannot be placed
waits ``queued`` with its reason until a host announces room."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime

import nats
import pytest

from tests.e2e.test_cli import treadle
from tests.support.api import make_api
from tests.support.helpers import quiet, wait_for
from tests.support.scripts import HANG, script, text
from treadle.cli.stack import Stack
from treadle.core import events as ev
from treadle.eventlog.log import EventLog

pytestmark = pytest.mark.e2e

ENV = {
    "TREADLE_PROVIDER_HOST_CAPACITY": "4",
    "TREADLE_PROVIDER_HOST_TENANT_SESSIONS": "4",
    "TREADLE_PROVIDER_HOST_TENANT_RUNS": "2",
    "TREADLE_PROVIDER_HOST_HEARTBEAT_SECONDS": "0.5",
    # This host cannot build the runtime sandbox: Codex and Claude sessions are refused, scripted ones run
    "TREADLE_SANDBOX_BWRAP": "/nonexistent/bwrap",
}
HANGS = script(text("on it"), HANG)


@pytest.fixture(scope="module")
async def stack(tmp_path_factory):
    async with Stack(tmp_path_factory.mktemp("capacity"), env=ENV, on_output=quiet) as s:
        yield s


@pytest.fixture(scope="module")
async def nc(stack):
    conn = await nats.connect(stack.nats_url)
    yield conn
    await conn.close()


@pytest.fixture
def log(nc) -> EventLog:
    return EventLog(nc)


@pytest.fixture
async def tenants(stack, nc):
    made = []

    async def make(name: str):
        made.append(await make_api(stack, nc, f"{name}{time.monotonic_ns() % 1_000_000}"))
        return made[-1]

    yield make
    for api in made:
        await api.close()


async def _idle_sessions(api, count: int) -> list[str]:
    """``count`` threads, each with a finished run: as many idle sessions on the host."""
    threads = [await api.create_thread(title=f"idle {i}") for i in range(count)]
    runs = await asyncio.gather(*(api.send(t, "hello") for t in threads))
    await asyncio.gather(*(api.wait_run(r["run_id"]) for r in runs))
    return threads


async def _held(api, run_id: str, reason: str) -> dict:
    async def held():
        run = await api.run(run_id)
        return run if (run["status"], run.get("waiting_reason")) == ("queued", reason) else None

    return await wait_for(held, timeout=15, interval=0.05, what=f"run {run_id} queued for {reason}")


async def _stop(api, run_ids: list[str]) -> None:
    for run_id in run_ids:
        await api.post(f"/v1/runs/{run_id}/interrupt", {}, expect=202)
    for run_id in run_ids:
        run = await api.wait_run(run_id, status="interrupted")
        assert run["status"] == "interrupted"


async def _check(stack, tenant: str, tmp_path) -> None:
    code, out, err = await treadle(
        "check",
        "--nats-url",
        stack.nats_url,
        "--redis-url",
        stack.redis_url,
        "--tenant",
        tenant,
        "--json",
        cwd=tmp_path,
    )
    assert code == 0, out + err
    assert json.loads(out)["problems"] == []


async def test_L9_3_a_full_host_releases_the_busiest_tenants_idle_session_for_another_tenants_run(tenants, log):
    flooder, other = await tenants("flood"), await tenants("other")
    threads = await _idle_sessions(flooder, 4)  # the host is full of the flooder's idle sessions

    thread = await other.create_thread(title="mine")
    sent_at = time.monotonic()
    sent = await other.send(thread, "my turn")
    run = await other.wait_run(sent["run_id"], timeout=10)
    print(
        f"\ncapacity: another tenant's run on a host full of idle sessions completed in {time.monotonic() - sent_at:.2f}s"
    )
    assert run["status"] == "completed"

    stopped = []
    for t in threads:
        stopped += [e.data.reason for e in await log.read(flooder.tenant, t) if isinstance(e.data, ev.ProviderStopped)]
    assert stopped == ["capacity"]  # exactly one idle session of the flooding tenant made room
    again = await flooder.send(threads[0], "still there?")  # a released thread resumes (L9.3), as after a reap
    assert (await flooder.wait_run(again["run_id"]))["status"] == "completed"


async def test_L9_3_one_tenant_floods_sessions_threads_queue_and_streams_and_another_tenants_run_starts_in_seconds(
    stack, tenants, tmp_path
):
    flooder, other = await tenants("flood"), await tenants("other")
    idle = await _idle_sessions(flooder, 4)
    busy = [await flooder.create_thread(title=f"busy {i}") for i in range(4)]
    hangs = [(await flooder.send(t, "work forever", script=HANGS))["run_id"] for t in busy]
    queued = [(await flooder.send(busy[0], f"later {i}", mode="queue_after_active"))["run_id"] for i in range(3)]
    streams = [asyncio.create_task(_follow(flooder, t)) for t in busy]  # open SSE streams
    try:
        # Two runs play (the tenant's run limit; they may first wait out the grace time of the sessions the tenant
        # releases for them); the other two wait queued, saying why.
        async def two_playing():
            runs = {r: await flooder.run(r) for r in hangs}
            playing = [r for r, doc in runs.items() if doc["status"] == "running"]
            held = [
                r for r, doc in runs.items() if (doc["status"], doc.get("waiting_reason")) == ("queued", "tenant_quota")
            ]
            return held if (len(playing), len(held)) == (2, 2) else None

        waiting = await wait_for(two_playing, timeout=15, interval=0.05, what="two runs playing, two held")

        thread = await other.create_thread(title="mine")
        sent_at = time.monotonic()
        sent = await other.send(thread, "my turn")
        run = await other.wait_run(sent["run_id"], timeout=10)
        done_in = time.monotonic() - sent_at
        started_in = (
            datetime.fromisoformat(run["started_at"]) - datetime.fromisoformat(run["queued_at"])
        ).total_seconds()
        print(
            f"\nfairness: the other tenant's run started {started_in:.2f}s and completed {done_in:.2f}s after it was "
            "sent, while the flooder held the host"
        )
        assert run["status"] == "completed"

        # The flooder's held runs start as its playing ones end: one ends, one held starts within seconds.
        playing = [r for r in hangs if r not in waiting]
        freed_at = time.monotonic()
        await _stop(flooder, playing[:1])
        started = await wait_for(lambda: _any_running(flooder, waiting), timeout=10, what="a held run started")
        print(f"fairness: a run held for tenant_quota started {time.monotonic() - freed_at:.2f}s after a turn ended")
        await _stop(flooder, [started] + playing[1:])
        last = next(r for r in waiting if r != started)
        await flooder.wait_running(last, timeout=10)
        await _stop(flooder, [last])
        for run_id in queued:  # the queue behind the first busy thread drains once its hang run ended
            assert (await flooder.wait_run(run_id, timeout=20))["status"] == "completed"
    finally:
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    # Nothing stuck: every message of the flood has exactly one run, ended as it should.
    ended = {}
    for t in idle + busy:
        ended.update({r["id"]: r["status"] for r in (await flooder.thread(t))["runs"]})
    assert sorted(ended.values()) == sorted(["completed"] * (len(idle) + len(queued)) + ["interrupted"] * len(hangs))
    await _check(stack, flooder.tenant, tmp_path)
    await _check(stack, other.tenant, tmp_path)


async def test_L9_3_a_run_no_host_can_take_waits_queued_for_capacity_and_starts_when_a_session_frees(
    stack, tenants, tmp_path
):
    one, two, late = await tenants("one"), await tenants("two"), await tenants("late")
    hangs = []
    for api in (one, one, two, two):  # four busy sessions: nothing on the host can be released
        t = await api.create_thread(title="busy")
        hangs.append((api, (await api.send(t, "work forever", script=HANGS))["run_id"]))
    for api, run_id in hangs:
        await api.wait_running(run_id, timeout=15)

    thread = await late.create_thread(title="late")
    sent = await late.send(thread, "my turn")
    held = await _held(late, sent["run_id"], "capacity")
    assert held["status"] == "queued" and held["waiting_reason"] == "capacity"
    doc = await late.thread(thread)
    assert any(a["kind"] == "run.held" for a in doc["activity"])
    # A held run stays interruptible: it ends at once, before any provider saw it (L8).
    other_thread = await late.create_thread(title="changed my mind")
    cancelled = await late.send(other_thread, "never mind")
    await _held(late, cancelled["run_id"], "capacity")
    asked_at = time.monotonic()
    await _stop(late, [cancelled["run_id"]])
    print(f"\ncapacity: a held run was interrupted {time.monotonic() - asked_at:.2f}s after it was asked to")

    freed_at = time.monotonic()
    await _stop(two, [hangs[3][1]])  # its session turns idle: the host releases it for the waiting run
    run = await late.wait_run(sent["run_id"], timeout=10)
    print(f"capacity: a run held for capacity completed {time.monotonic() - freed_at:.2f}s after a turn ended")
    assert run["status"] == "completed" and run["waiting_reason"] is None
    await _stop(one, [r for _, r in hangs[:2]])
    await _stop(two, [hangs[2][1]])
    for api in (one, two, late):
        await _check(stack, api.tenant, tmp_path)


async def _any_running(api, run_ids: list[str]) -> str | None:
    for run_id in run_ids:
        if (await api.run(run_id))["status"] == "running":
            return run_id
    return None


async def _follow(api, thread: str) -> None:
    """An open SSE stream of the flooding tenant, read until the test ends."""
    async for _ in api.events(thread):
        pass


async def test_L9_3_a_run_no_host_can_sandbox_waits_queued_with_that_reason_and_stays_interruptible(tenants, log):
    api = await tenants("nosandbox")
    thread = await api.create_thread(title="codex without a sandbox", provider="codex")
    sent = await api.send(thread, "run something")
    await _held(api, sent["run_id"], "sandbox_unavailable")
    events = await log.read(api.tenant, thread)
    assert [e.data.reason for e in events if isinstance(e.data, ev.RunHeld)] == ["sandbox_unavailable"]  # once
    await _stop(api, [sent["run_id"]])
