"""Provider hosts against a real broker on a manual clock (L9.5), making room (L9.3): a full host releases the
busiest tenant's least recently used idle session through the production lifecycle, never a session used within
the grace time or one playing a turn, refuses with the reason a run waits under, and announces freed room."""

from __future__ import annotations

from tests.integration.test_L9_provider_hosts import LOOPS_PER_HOST, Hosts, tick
from tests.support.helpers import wait_for
from treadle.eventlog import subjects
from treadle.providers import protocol as hp
from treadle.runtime.clock import ManualClock


async def _place(env: Hosts, tenant: str, thread: str, full: bool = False):
    return await env.client.place(
        hp.PlaceSession(
            tenant=tenant,
            thread=thread,
            provider="scripted",
            session_id=f"ps_{thread}",
            provider_thread_id=f"pth_{thread}",
            workspace="w",
        ),
        full=full,
    )


async def _hang(env: Hosts, placed: hp.SessionPlaced, tenant: str, thread: str):
    return await env.client.start_turn(
        placed.host_id,
        hp.StartTurn(
            session_id=placed.session_id,
            tenant=tenant,
            thread=thread,
            run_id=f"run_{thread}",
            attempt_id=f"att_{thread}",
            root_node_id=f"node_{thread}",
            text="wait",
            script={"steps": [{"type": "hang"}]},
        ),
    )


async def test_L9_3_a_full_host_releases_the_busiest_tenants_lru_idle_session_after_its_grace_time(tmp_path):
    clock = ManualClock()
    async with Hosts(tmp_path) as env:
        freed: list[str] = []

        async def heard(msg) -> None:
            freed.append(msg.data.decode())

        await env.nc.subscribe(subjects.host_freed("local"), cb=heard)
        await env.host("h1", clock, capacity=3, shed_grace_seconds=10, heartbeat_seconds=30)
        oldest = await _place(env, "a", "a1")
        await tick(clock, 1, LOOPS_PER_HOST)
        await _place(env, "a", "a2")
        await _place(env, "b", "b1")
        assert isinstance(await _hang(env, oldest, "a", "a1"), hp.TurnAccepted)  # a1 plays: never released

        refused = await _place(env, "c", "c1", full=True)  # a2 and b1 are idle, but used just now
        assert isinstance(refused, hp.HostFailure) and refused.code == "capacity" and refused.retry_after == 10

        await tick(clock, 10, LOOPS_PER_HOST)
        placed = await _place(env, "c", "c1", full=True)
        assert isinstance(placed, hp.SessionPlaced)
        await wait_for(lambda: env.stopped("ps_a2"), what="a's idle session released")
        assert env.stopped("ps_a2") == ["capacity"] and env.stopped("ps_b1") == [] and env.stopped("ps_a1") == []

        reply = await env.client.verb("h1", "session.stop", hp.StopTurn(session_id="ps_b1", attempt_id=""))
        assert isinstance(reply, hp.TurnAccepted)
        await wait_for(lambda: "b" in freed, what="the freed room announced for b")


async def test_L9_3_tenant_limits_refuse_with_tenant_quota_and_a_tenant_pays_with_its_own_idle_session(tmp_path):
    clock = ManualClock()
    async with Hosts(tmp_path) as env:
        await env.host("h1", clock, capacity=10, tenant_sessions=2, tenant_runs=1, shed_grace_seconds=0)
        first = await _place(env, "a", "a1")
        second = await _place(env, "a", "a2")
        assert isinstance(await _hang(env, first, "a", "a1"), hp.TurnAccepted)

        refused = await _hang(env, second, "a", "a2")  # one turn at a time for a
        assert isinstance(refused, hp.HostFailure) and refused.code == "tenant_quota"
        refused = await _place(env, "a", "a3")  # and no session for a run that could not start
        assert isinstance(refused, hp.HostFailure) and refused.code == "tenant_quota"
        assert isinstance(await _place(env, "b", "b1"), hp.SessionPlaced)  # other tenants are not affected


async def test_L9_3_a_tenant_at_its_session_limit_pays_with_its_own_idle_session(tmp_path):
    async with Hosts(tmp_path) as env:
        await env.host("h1", ManualClock(), capacity=10, tenant_sessions=2, shed_grace_seconds=0)
        first = await _place(env, "a", "a1")
        await _place(env, "a", "a2")
        assert isinstance(await _hang(env, first, "a", "a1"), hp.TurnAccepted)
        third = await _place(env, "a", "a3")  # at two sessions: its own idle one goes
        assert isinstance(third, hp.SessionPlaced)
        await wait_for(lambda: env.stopped("ps_a2"), what="a's own idle session released")
        assert env.stopped("ps_a2") == ["capacity"] and env.stopped("ps_a1") == []
        assert isinstance(await _hang(env, third, "a", "a3"), hp.TurnAccepted)
        refused = await _place(env, "a", "a4")  # two sessions again, both playing: nothing of its own to release
        assert isinstance(refused, hp.HostFailure) and refused.code == "tenant_quota"


async def test_L9_3_freed_room_goes_to_the_waiting_tenant_holding_fewer_sessions(tmp_path):
    async with Hosts(tmp_path) as env:
        await env.host("h1", ManualClock(), capacity=2, shed_grace_seconds=0)
        first, other = await _place(env, "a", "a1"), await _place(env, "c", "c1")
        assert isinstance(await _hang(env, first, "a", "a1"), hp.TurnAccepted)
        assert isinstance(await _hang(env, other, "c", "c1"), hp.TurnAccepted)
        for tenant, thread in (("a", "a2"), ("b", "b1")):  # both wait: nothing can be released
            refused = await _place(env, tenant, thread, full=True)
            assert isinstance(refused, hp.HostFailure) and refused.code == "capacity"

        await env.client.verb("h1", "session.stop", hp.StopTurn(session_id="ps_c1", attempt_id=""))
        refused = await _place(env, "a", "a2", full=True)  # a already holds a session; b holds none
        assert isinstance(refused, hp.HostFailure) and refused.code == "capacity" and "b" in refused.message
        assert isinstance(await _place(env, "b", "b1", full=True), hp.SessionPlaced)
