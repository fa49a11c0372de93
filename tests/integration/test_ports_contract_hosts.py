"""The host directory port's contract, run on provider hosts over a real broker (the scripted provider) and
on the in-memory twin: placement only where there is room (a full host sheds an idle session when asked
to), resuming a provider thread by its ref, the replies of every verb a session answers, and a host
nobody serves being gone."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import msgspec
import nats
import pytest

from tests.support.helpers import wait_for
from tests.support.volumes import OnVolume
from treadle.core import provider_events as pe
from treadle.core.providers.capabilities import PROFILES
from treadle.eventlog import streams
from treadle.memory import MemoryHosts
from treadle.ops.servers import NatsServer
from treadle.provider_host.service import ProviderHost
from treadle.providers import protocol as hp
from treadle.providers.base import Response
from treadle.providers.hosts import HostClient, HostGone, HostUnavailable
from treadle.providers.scripted import DEFAULT_CAPABILITIES
from treadle.runtime.settings import ProviderHostSettings, Shared

TENANT = "acme"
# A turn that says something, then plays until it is steered, interrupted or stopped.
HELD = {"steps": [{"type": "text", "text": "working"}, {"type": "delay", "ms": 600_000}]}


class RealHosts:
    """ProviderHost workers on a broker of this module's own, on a volume of each test's own."""

    def __init__(self, nc, url: str, tmp_path) -> None:
        self.volume = f"v{uuid.uuid4().hex[:8]}"
        self.shared = Shared(state_dir=tmp_path, nats_url=url, volume=self.volume)
        self.nc, self.running = nc, {}
        self.directory = OnVolume(HostClient(nc, timeout=5.0), self.volume)
        self.reported: dict[str, int] = {}  # attempt id -> provider events seen

    async def listen(self) -> None:
        async def seen(msg) -> None:
            event = pe.provider_event_decoder.decode(msg.data)
            self.reported[event.attempt_id or ""] = self.reported.get(event.attempt_id or "", 0) + len(event.parts())

        await self.nc.subscribe("treadle.prov.>", cb=seen)

    async def playing(self, attempt_id: str) -> None:
        """Until the turn's play has begun: it reported more than its start (its first text)."""
        await wait_for(lambda: self.reported.get(attempt_id, 0) >= 2, what=f"{attempt_id} playing")

    async def ended(self, host_id: str, session_id: str, attempt_id: str) -> None:
        """Until the turn has ended and its host no longer holds it among the session's turns."""
        session = self.running[host_id]._sessions[session_id]
        await wait_for(lambda: attempt_id not in session.turns, what=f"{attempt_id} ended")

    async def start(self, host_id: str, capacity: int = 4) -> None:
        host = ProviderHost(
            self.nc, self.shared, ProviderHostSettings(host_id=host_id, capacity=capacity, shed_grace_seconds=0)
        )
        await host.start()
        self.running[host_id] = host

    async def stop(self, host_id: str) -> None:
        await self.running.pop(host_id).stop()

    async def close(self) -> None:
        for host_id in list(self.running):
            await self.stop(host_id)


class TwinHosts:
    def __init__(self) -> None:
        self.directory = OnVolume(MemoryHosts(), "local")

    async def start(self, host_id: str, capacity: int = 4) -> None:
        self.directory.add(host_id, capacity)

    async def stop(self, host_id: str) -> None:
        self.directory.remove(host_id)

    async def playing(self, attempt_id: str) -> None:
        pass  # a twin's turn plays from its start

    async def ended(self, host_id: str, session_id: str, attempt_id: str) -> None:
        pass  # a twin's turn never ends on its own

    async def close(self) -> None:
        pass


@pytest.fixture(scope="module")
async def broker(tmp_path_factory) -> AsyncIterator[str]:
    async with NatsServer(tmp_path_factory.mktemp("hosts-nats")) as server:
        yield server.url


@pytest.fixture(params=["nats", "memory"])
async def hosts(request, broker, tmp_path) -> AsyncIterator[RealHosts | TwinHosts]:
    if request.param == "memory":
        yield TwinHosts()
        return
    nc = await nats.connect(broker)
    await streams.ensure(nc.jetstream())
    real = RealHosts(nc, broker, tmp_path)
    await real.listen()
    try:
        yield real
    finally:
        await real.close()
        await nc.close()


def placement(session_id: str, pth: str = "pth_1", **kw) -> hp.PlaceSession:
    return hp.PlaceSession(
        tenant=TENANT,
        thread="thr_1",
        provider="scripted",
        session_id=session_id,
        provider_thread_id=pth,
        workspace="w",
        **kw,
    )


def turn(session_id: str, attempt_id: str) -> hp.StartTurn:
    return hp.StartTurn(
        session_id=session_id,
        tenant=TENANT,
        thread="thr_1",
        run_id="run_1",
        attempt_id=attempt_id,
        root_node_id="node_1",
        text="go",
        script=HELD,
    )


def code(reply) -> str:
    return reply.code if isinstance(reply, hp.HostFailure) else type(reply).__name__


async def test_with_no_host_up_nobody_answers(hosts):
    with pytest.raises(HostGone):
        await hosts.directory.place(placement("ps_1"))
    with pytest.raises(HostGone):
        await hosts.directory.verb("host-none", "session.stop", hp.StopTurn(session_id="ps_1", attempt_id=""))
    with pytest.raises(HostGone):
        await hosts.directory.start_turn("host-none", turn("ps_1", "att_1"))
    with pytest.raises(HostUnavailable):
        await hosts.directory.summarise(hp.Summarise(tenant=TENANT, provider="scripted", text="x", timeout=1.0))


async def test_a_session_is_placed_once_and_its_provider_thread_resumed_by_ref(hosts):
    await hosts.start("host-a")
    placed = await hosts.directory.place(placement("ps_1"))
    assert isinstance(placed, hp.SessionPlaced), placed
    assert (placed.host_id, placed.session_id, placed.native_ref, placed.resumed) == (
        "host-a",
        "ps_1",
        "scripted-pth_1",
        False,
    )
    assert placed.capabilities == DEFAULT_CAPABILITIES
    again = await hosts.directory.place(placement("ps_1"))  # a retried placement finds the live session
    assert isinstance(again, hp.SessionPlaced) and (again.boot_id, again.native_ref) == (
        placed.boot_id,
        placed.native_ref,
    )
    resumed = await hosts.directory.place(placement("ps_2", native_ref=placed.native_ref))
    assert isinstance(resumed, hp.SessionPlaced) and (resumed.native_ref, resumed.resumed) == (placed.native_ref, True)
    assert code(await hosts.directory.place(placement("ps_3", native_ref="codex-elsewhere"))) == "resume_failed"
    assert code(await hosts.directory.place(placement("ps_4", fork_from=placed.native_ref))) == "unsupported"
    full = await hosts.directory.place(placement("ps_5", capabilities=PROFILES["full"]))
    assert isinstance(full, hp.SessionPlaced) and full.capabilities == PROFILES["full"]


async def test_a_sessions_verbs_answer_as_the_turn_stands(hosts):
    await hosts.start("host-a")
    placed = await hosts.directory.place(placement("ps_1", capabilities=PROFILES["full"]))
    assert isinstance(placed, hp.SessionPlaced), placed
    d, host = hosts.directory, placed.host_id
    assert code(await d.start_turn(host, turn("ps_1", "att_1"))) == "TurnAccepted"
    again = await d.start_turn(host, turn("ps_1", "att_1"))  # a redelivered start
    assert isinstance(again, hp.TurnAccepted) and again.already

    def steer(attempt: str, message: str) -> hp.SteerTurn:
        return hp.SteerTurn(session_id="ps_1", attempt_id=attempt, message_id=message, text="more")

    assert code(await d.verb(host, "turn.steer", steer("att_2", "msg_2"))) == "not_active"
    assert (
        code(await d.verb(host, "turn.interrupt", hp.StopTurn(session_id="ps_1", attempt_id="att_2"))) == "not_active"
    )
    assert (
        code(await d.rollback(host, hp.RollbackTurns(session_id="ps_1", rollback_id="rb_1", turns=1))) == "not_active"
    )
    answer = hp.Respond(session_id="ps_1", request_id="req_none", response=Response(decision="accept"))
    assert code(await d.verb(host, "request.respond", answer)) == "unsupported"  # no such request is waiting
    assert (
        code(await d.verb(host, "turn.nonsense", hp.StopTurn(session_id="ps_1", attempt_id="att_1"))) == "bad_request"
    )
    for verb, request in (
        ("turn.start", turn("ps_9", "att_9")),
        ("turn.steer", steer("att_1", "msg_3")),
        ("session.stop", hp.StopTurn(session_id="ps_9", attempt_id="")),
    ):
        assert code(await d.verb(host, verb, msgspec.structs.replace(request, session_id="ps_9"))) == "unknown_session"
    # Each of these ends its turn (the scripted provider answers a steer and stops): one per turn. A steer racing
    # the start of its turn's play may be refused (the supervisor then queues it as the next run): not raced here.
    await hosts.playing("att_1")
    assert code(await d.verb(host, "turn.steer", steer("att_1", "msg_1"))) == "TurnAccepted"
    await hosts.ended(host, "ps_1", "att_1")
    again = await d.start_turn(host, turn("ps_1", "att_1"))  # redelivered after its turn ended: not played again
    assert isinstance(again, hp.TurnAccepted) and again.already
    assert code(await d.start_turn(host, turn("ps_1", "att_2"))) == "TurnAccepted"
    assert (
        code(await d.verb(host, "turn.interrupt", hp.StopTurn(session_id="ps_1", attempt_id="att_2"))) == "TurnAccepted"
    )
    assert code(await d.verb(host, "session.stop", hp.StopTurn(session_id="ps_1", attempt_id=""))) == "TurnAccepted"
    assert code(await d.start_turn(host, turn("ps_1", "att_3"))) == "unknown_session"


async def test_a_full_host_takes_no_placement_unless_asked_to_shed_and_a_stopped_host_is_gone(hosts):
    await hosts.start("host-b", capacity=1)
    first = await hosts.directory.place(placement("ps_a"))
    assert isinstance(first, hp.SessionPlaced)
    with pytest.raises(HostGone):  # the full host left the placement queue group
        await hosts.directory.place(placement("ps_b", pth="pth_2"))
    shed = await hosts.directory.place(placement("ps_b", pth="pth_2"), full=True)  # ps_a is idle: released
    assert isinstance(shed, hp.SessionPlaced) and shed.host_id == "host-b", shed
    assert code(await hosts.directory.start_turn("host-b", turn("ps_a", "att_1"))) == "unknown_session"
    await hosts.stop("host-b")
    with pytest.raises(HostGone):
        await hosts.directory.start_turn("host-b", turn("ps_b", "att_1"))
    with pytest.raises(HostGone):
        await hosts.directory.place(placement("ps_c", pth="pth_3"))
