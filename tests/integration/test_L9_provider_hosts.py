"""Provider hosts against a real broker, on a manual clock (L9.5): placement only on hosts with room, the
idle reaper releasing through the production lifecycle, and a host whose heartbeat stands still having its
sessions reported stopped by the hosts that are still alive (L9.3)."""

from __future__ import annotations

import asyncio

import msgspec
import nats
import pytest
from nats.errors import ConnectionClosedError

from tests.support.helpers import wait_for
from tests.support.volumes import OnVolume
from treadle.core import provider_events as pe
from treadle.eventlog import streams
from treadle.ops.servers import NatsServer
from treadle.provider_host.registry import Registry, SessionRecord
from treadle.provider_host.service import ProviderHost
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient, HostUnavailable
from treadle.runtime.clock import ManualClock
from treadle.runtime.settings import ProviderHostSettings, Shared

TENANT = "acme"
LOOPS_PER_HOST = 6  # heartbeat, host watcher, idle reaper, disk budget, warm pool, spares: parked between ticks


class Hosts:
    """A broker, the hosts under test (each on its own manual clock) and a listener for provider events."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.server = NatsServer(tmp_path / "nats")
        self.hosts: list[ProviderHost] = []
        self.stops: list[pe.ProviderEvent] = []

    async def __aenter__(self) -> Hosts:
        await self.server.start()
        self.nc = await nats.connect(self.server.url)
        await streams.ensure(self.nc.jetstream())
        self.client = OnVolume(HostClient(self.nc, timeout=2.0), "local")  # the hosts' volume (Shared's default)

        async def on_event(msg) -> None:
            event = pe.provider_event_decoder.decode(msg.data)
            if isinstance(event.body, pe.SessionStopped):
                self.stops.append(event)

        await self.nc.subscribe("treadle.prov.>", cb=on_event)
        return self

    async def __aexit__(self, *exc) -> None:
        for host in self.hosts:
            await host.stop()
        await self.nc.close()
        await self.server.stop()

    async def host(self, host_id: str, clock: ManualClock, **settings) -> ProviderHost:
        shared = Shared(state_dir=self.tmp_path, nats_url=self.server.url)
        host = ProviderHost(self.nc, shared, ProviderHostSettings(host_id=host_id, **settings), clock=clock)
        await host.start()
        self.hosts.append(host)
        await parked(clock, LOOPS_PER_HOST)
        return host

    async def place(self, thread: str, native_ref: str | None = None) -> hp.SessionPlaced:
        reply = await self.client.place(
            hp.PlaceSession(
                tenant=TENANT,
                thread=thread,
                provider="scripted",
                session_id=f"ps_{thread}_{len(self.stops)}",
                provider_thread_id=f"pth_{thread}",
                native_ref=native_ref,
                workspace="w",
            )
        )
        assert isinstance(reply, hp.SessionPlaced), reply
        return reply

    def stopped(self, session_id: str) -> list[str]:
        return [e.body.reason for e in self.stops if e.session_id == session_id]

    async def recorded_sessions(self) -> set[str]:
        kv = await self.nc.jetstream().key_value("treadle-sessions")
        try:
            return set(await kv.keys())
        except Exception:  # NoKeysError: an empty bucket
            return set()


async def parked(clock: ManualClock, loops: int) -> None:
    """Wait until every loop driven by ``clock`` has finished its tick and sleeps again."""
    await wait_for(lambda: clock.sleepers >= loops, what=f"{loops} loops parked on the clock")


async def tick(clock: ManualClock, seconds: float, loops: int) -> None:
    clock.advance(seconds)
    await asyncio.sleep(0)  # let the woken loops run before checking that they parked again
    await parked(clock, loops)
    await asyncio.sleep(0)


async def test_L9_1_placement_goes_only_to_hosts_with_room(tmp_path):
    async with Hosts(tmp_path) as env:
        await env.host("h1", ManualClock(), capacity=1)
        await env.host("h2", ManualClock(), capacity=1)
        first, second = await env.place("t1"), await env.place("t2")
        assert {first.host_id, second.host_id} == {"h1", "h2"}  # the full host left the placement group
        with pytest.raises(HostUnavailable):
            await env.place("t3")
        reply = await env.client.verb(
            first.host_id, "session.stop", hp.StopTurn(session_id=first.session_id, attempt_id="none")
        )
        assert isinstance(reply, hp.TurnAccepted)
        third = await wait_for(lambda: _try_place(env, "t3"), what="a seat freed by the stopped session")
        assert third.host_id == first.host_id
        record = msgspec.json.decode((await (await env.nc.jetstream().key_value("treadle-hosts")).get("h1")).value)
        assert (record["capacity"], record["volume"]) == (1, "local")


async def _try_place(env: Hosts, thread: str):
    try:
        return await env.place(thread)
    except HostUnavailable:
        return None


async def test_L9_5_idle_reaper_releases_only_idle_sessions_and_the_thread_resumes(tmp_path):
    clock = ManualClock()
    async with Hosts(tmp_path) as env:
        host = await env.host("h1", clock, idle_seconds=60, heartbeat_seconds=5)
        idle = await env.place("idle")
        busy = await env.place("busy")
        started = await env.client.start_turn(
            "h1",
            hp.StartTurn(
                session_id=busy.session_id,
                tenant=TENANT,
                thread="busy",
                run_id="run_b",
                attempt_id="att_b",
                root_node_id="node_b",
                text="wait",
                script={"steps": [{"type": "hang"}]},
            ),
        )
        assert isinstance(started, hp.TurnAccepted)

        await tick(clock, 59, LOOPS_PER_HOST)
        assert env.stopped(idle.session_id) == [] and len(host._sessions) == 2  # not idle long enough yet

        # The reaper looks every idle/2 seconds, so a session goes at most 1.5 idle times after its last use.
        await tick(clock, 31, LOOPS_PER_HOST)
        await wait_for(lambda: env.stopped(idle.session_id), what="the idle session reported stopped")
        assert env.stopped(idle.session_id) == ["idle"]
        assert f"h1.{idle.session_id}" not in await env.recorded_sessions()

        await tick(clock, 600, LOOPS_PER_HOST)
        assert env.stopped(busy.session_id) == []  # a playing turn is never reaped, however long it plays
        assert f"h1.{busy.session_id}" in await env.recorded_sessions()

        again = await env.place("idle", native_ref=idle.native_ref)
        assert (again.native_ref, again.resumed) == (idle.native_ref, True)


async def test_issue36_a_turn_silent_past_unresponsive_seconds_has_its_session_released(tmp_path):
    """A wedged runtime (every model request hangs) is not left playing forever: its session is stopped as
    ``unresponsive``; a turn waiting for the user's answer is not wedged, however long it waits."""
    clock = ManualClock()
    async with Hosts(tmp_path) as env:
        await env.host("h1", clock, idle_seconds=3600, unresponsive_seconds=120, heartbeat_seconds=5)
        hung, asking = await env.place("hung"), await env.place("asking")
        for placed, steps in ((hung, [{"type": "hang"}]), (asking, [{"type": "approval", "prompt": "ok?"}])):
            thread = placed.session_id.split("_")[1]
            started = await env.client.start_turn(
                "h1",
                hp.StartTurn(
                    session_id=placed.session_id,
                    tenant=TENANT,
                    thread=thread,
                    run_id=f"run_{thread}",
                    attempt_id=f"att_{thread}",
                    root_node_id=f"node_{thread}",
                    text="go",
                    script={"steps": steps},
                ),
            )
            assert isinstance(started, hp.TurnAccepted)
        host = env.hosts[0]
        await wait_for(lambda: host._sessions[asking.session_id].awaiting, what="the approval asked")

        await tick(clock, 119, LOOPS_PER_HOST)
        assert env.stopped(hung.session_id) == []
        await tick(clock, 61, LOOPS_PER_HOST)
        await wait_for(lambda: env.stopped(hung.session_id), what="the wedged session reported stopped")
        assert env.stopped(hung.session_id) == ["unresponsive"]
        await tick(clock, 1800, LOOPS_PER_HOST)
        assert env.stopped(asking.session_id) == [] and asking.session_id in host._sessions


async def test_L9_3_a_host_whose_heartbeat_stands_still_has_its_sessions_reported_stopped(tmp_path):
    dying, watching = ManualClock(), ManualClock()
    async with Hosts(tmp_path) as env:
        await env.host("h1", dying, heartbeat_seconds=1, host_expiry_seconds=5)
        placed = await env.place("t1")
        assert placed.host_id == "h1"
        await env.host("h2", watching, heartbeat_seconds=1, host_expiry_seconds=5)

        for _ in range(8):  # h1 beats along: h2 never takes it for dead, however long it watches
            await tick(dying, 1, LOOPS_PER_HOST)
            await tick(watching, 1, LOOPS_PER_HOST)
        assert env.stopped(placed.session_id) == []

        for _ in range(4):  # h1's heartbeat stops (its clock stands still): not yet expired
            await tick(watching, 1, LOOPS_PER_HOST)
        assert env.stopped(placed.session_id) == []
        await tick(watching, 1, LOOPS_PER_HOST)
        await wait_for(lambda: env.stopped(placed.session_id), what="h1's session reported stopped")
        assert env.stopped(placed.session_id) == ["host_lost"]
        assert await env.recorded_sessions() == set()
        event = next(e for e in env.stops if e.session_id == placed.session_id)
        assert (event.tenant, event.thread, event.provider_thread_id) == (TENANT, "t1", "pth_t1")


async def test_L9_3_a_session_of_an_earlier_boot_missed_at_start_is_reported_by_the_hosts_own_watcher(tmp_path):
    clock = ManualClock()
    async with Hosts(tmp_path) as env:
        host = await env.host("h1", clock, heartbeat_seconds=1)
        # As if the start's report had missed it: a record of this host id from an earlier boot appears later.
        earlier = SessionRecord(tenant=TENANT, thread="t9", provider_thread_id="pth_t9", boot_id="earlier-boot")
        await (await Registry.open(env.nc.jetstream())).record_session("h1", "ps_missed", earlier)
        placed = await env.place("t1")  # this boot's own session is left alone
        await tick(clock, 1, LOOPS_PER_HOST)
        await wait_for(lambda: env.stopped("ps_missed"), what="the earlier boot's session reported stopped")
        assert env.stopped("ps_missed") == ["host_restarted"] and env.stopped(placed.session_id) == []
        assert await env.recorded_sessions() == {f"h1.{placed.session_id}"}
        assert host.boot_id != "earlier-boot"


async def test_L9_3_a_watcher_whose_own_heartbeat_stands_still_reports_nobody(tmp_path):
    """A broker failing over stalls every heartbeat at once: a watcher that cannot beat either must not take
    the others for dead (it reported every host's sessions lost in the chaos run, and runs failed)."""
    dying, watching = ManualClock(), ManualClock()
    async with Hosts(tmp_path) as env:
        await env.host("h1", dying, heartbeat_seconds=1, host_expiry_seconds=5)
        placed = await env.place("t1")
        watcher = await env.host("h2", watching, heartbeat_seconds=1, host_expiry_seconds=5)
        heartbeat = next(loop for loop in watcher._loops if loop.get_name() == "host:heartbeat")
        heartbeat.cancel()  # h2's own heartbeat stands still too
        for _ in range(8):
            await tick(watching, 1, LOOPS_PER_HOST - 1)
        assert env.stopped(placed.session_id) == []


async def test_L9_3_stopping_a_session_ends_a_turn_that_swallowed_its_cancellation(tmp_path):
    """In Python 3.11 ``asyncio.wait_for`` (under nats-py's requests, e.g. a provider event's publish) returns
    its result when a cancellation races it, and the turn carries on: the stop must still end it."""
    async with Hosts(tmp_path) as env:
        host = await env.host("h1", ManualClock())
        placed = await env.place("t1")
        started = asyncio.Event()

        async def stubborn(turn, sink) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                pass  # lost, as wait_for loses it
            await asyncio.Event().wait()

        host._sessions[placed.session_id].adapter.run_turn = stubborn
        turn = hp.StartTurn(
            session_id=placed.session_id,
            tenant=TENANT,
            thread="t1",
            run_id="run_t1",
            attempt_id="att_t1",
            root_node_id="node_t1",
            text="go",
        )
        assert isinstance(await env.client.start_turn(placed.host_id, turn), hp.TurnAccepted)
        await started.wait()
        stop = hp.StopTurn(session_id=placed.session_id, attempt_id="")
        assert isinstance(await env.client.verb(placed.host_id, "session.stop", stop), hp.TurnAccepted)
        await wait_for(lambda: env.stopped(placed.session_id), what="the session stopped")


async def test_L9_3_a_host_stopped_after_its_broker_connection_closed_leaves_no_loop_or_turn_running(
    nats_url, tmp_path
):
    """A stop that fails (its connection already closed) still stops the heartbeat, the watcher, the reaper and
    every session's turn: a leaked watcher logged 'host watch failed' every period for the rest of the process,
    and the sessions after the first whose report failed kept their runtimes."""
    nc = await nats.connect(nats_url)
    await streams.ensure(nc.jetstream())
    before = asyncio.all_tasks()  # the suite shares one loop: other tests' tasks are not this host's
    host = ProviderHost(nc, Shared(state_dir=tmp_path, volume="closing"), ProviderHostSettings(host_id="host-closing"))
    await host.start()
    client = OnVolume(HostClient(nc, timeout=10.0), "closing")
    for n in (1, 2):
        placed = await client.place(
            hp.PlaceSession(
                tenant="acme",
                thread=f"thr_{n}",
                provider="scripted",
                session_id=f"ps_{n}",
                provider_thread_id="pth",
                workspace=f"w{n}",
            )
        )
        assert isinstance(placed, hp.SessionPlaced), placed
        started = await client.start_turn(
            "host-closing",
            hp.StartTurn(
                session_id=f"ps_{n}",
                tenant="acme",
                thread=f"thr_{n}",
                run_id=f"run_{n}",
                attempt_id=f"att_{n}",
                root_node_id=f"node_{n}",
                text="hang",
                script={"steps": [{"type": "hang"}]},
            ),
        )
        assert isinstance(started, hp.TurnAccepted), started
    running = [t for t in asyncio.all_tasks() - before if t.get_name().startswith(("host:", "turn:"))]
    names = {t.get_name() for t in running}
    assert names == {
        "host:heartbeat",
        "host:watcher",
        "host:reaper",
        "host:disk",
        "host:warm",
        "host:spares",
        "turn:att_1",
        "turn:att_2",
    }, names
    await nc.close()
    with pytest.raises(ConnectionClosedError):
        await host.stop()
    await asyncio.wait(running, timeout=10)
    assert all(t.done() for t in running)
