"""A new thread's first session launched ahead of its placement (provider_host/warm.py), on a real provider host
with a real broker, the real ``codex`` binary in its sandbox and the mock model API: the placement naming the warmed
session adopts its runtime and the turn reports what a cold session's reports; nothing warmed for one session is
adopted by another tenant or thread; a tenant starting many threads holds at most its share of the pool."""

from __future__ import annotations

import collections

import msgspec
import nats
import pytest

from tests.codex.codex_mock import Text
from tests.codex.codex_support import codex_env
from tests.support.helpers import wait_for
from treadle.core import provider_events as pe
from treadle.eventlog import streams, subjects
from treadle.ops.servers import NatsServer
from treadle.provider_host.service import ProviderHost
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient
from treadle.runtime.clock import ManualClock
from treadle.runtime.settings import ProviderHostSettings, Shared

pytestmark = pytest.mark.e2e
VOLUME = "local"  # the host's (Shared's default)


@pytest.fixture
async def env(tmp_path, monkeypatch, mock, homes_root):
    for name, value in codex_env(mock, homes_root).items():
        monkeypatch.setenv(name, value)
    server = NatsServer(tmp_path / "nats")
    await server.start()
    nc = await nats.connect(server.url)
    await streams.ensure(nc.jetstream())
    reported: dict[str, list[str]] = collections.defaultdict(list)  # attempt id -> the kinds its turn reported

    async def on_event(msg) -> None:
        for event in pe.provider_event_decoder.decode(msg.data).parts():
            if not isinstance(event.body, pe.TextDelta):  # streamed or folded into the text's end, as timing has it
                reported[event.attempt_id or ""].append(type(event.body).__name__)

    await nc.subscribe("treadle.prov.>", cb=on_event)
    clock = ManualClock()
    own = ProviderHostSettings(host_id="h1", warm_sessions=2, warm_seconds=30.0)
    host = ProviderHost(nc, Shared(state_dir=tmp_path, nats_url=server.url), own, clock=clock)
    await host.start()
    yield nc, host, clock, reported
    await host.stop()
    await nc.close()
    await server.stop()


def hint(session_id: str, tenant: str = "acme", thread: str = "thr_1") -> hp.WarmSession:
    return hp.WarmSession(tenant=tenant, thread=thread, provider="codex", session_id=session_id, workspace="w")


def placement(session_id: str, tenant: str = "acme", thread: str = "thr_1") -> hp.PlaceSession:
    return hp.PlaceSession(
        tenant=tenant,
        thread=thread,
        provider="codex",
        session_id=session_id,
        provider_thread_id=f"pth_{session_id}",
        workspace="w",
    )


async def warmed(nc, host: ProviderHost, request: hp.WarmSession):
    """The runtime the host launched for ``request``, once its handshake is done."""
    await nc.publish(subjects.host_warm(VOLUME), hp.encode(request))
    await nc.flush()
    warm = await wait_for(lambda: host._warmer.pool._warm.get(request.session_id), what="the warmed runtime")
    await wait_for(warm.launch.done, timeout=60, what="the warmed runtime's start")
    assert warm.launch.exception() is None and warm.adapter.pid is not None
    return warm.adapter


async def play(nc, request: hp.PlaceSession, attempt: str, text: str, reported) -> list[str]:
    hosts = HostClient(nc, timeout=60.0)
    placed = await hosts.place(request, volume=VOLUME)
    assert isinstance(placed, hp.SessionPlaced), placed
    accepted = await hosts.start_turn(
        placed.host_id,
        hp.StartTurn(
            session_id=request.session_id,
            tenant=request.tenant,
            thread=request.thread,
            run_id=f"run_{attempt}",
            attempt_id=attempt,
            root_node_id=f"node_{attempt}",
            text=text,
        ),
    )
    assert isinstance(accepted, hp.TurnAccepted), accepted
    await wait_for(lambda: "TurnCompleted" in reported[attempt], timeout=60, what="the turn's end")
    return reported[attempt]


async def test_the_first_placement_adopts_its_warmed_runtime_and_reports_what_a_cold_one_does(env, mock):
    nc, host, _, reported = env
    mock.on("warm hello", [Text("Hello from a warm runtime.", chunks=3)])
    mock.on("cold hello", [Text("Hello from a warm runtime.", chunks=3)])
    adapter = await warmed(nc, host, hint("ps_warm"))
    pid, provider_thread = adapter.pid, adapter.thread_id
    assert provider_thread is not None  # opened ahead too

    warm_events = await play(nc, placement("ps_warm"), "att_warm", "warm hello", reported)
    assert host._sessions["ps_warm"].adapter is adapter and adapter.pid == pid  # the same process, adopted
    assert host._sessions["ps_warm"].native_ref == provider_thread == adapter.thread_id
    assert "ps_warm" not in host._warmer.pool

    cold_events = await play(nc, placement("ps_cold", thread="thr_2"), "att_cold", "cold hello", reported)
    assert warm_events == cold_events and "TextCompleted" in warm_events and warm_events[-1] == "TurnCompleted"


async def test_a_warmed_runtime_is_never_adopted_by_another_tenant_or_thread(env):
    nc, host, _, _ = env
    adapter = await warmed(nc, host, hint("ps_shared"))
    acme = adapter._prepared.ids

    hosts = HostClient(nc, timeout=60.0)
    placed = await hosts.place(placement("ps_shared", tenant="globex"), volume=VOLUME)
    assert isinstance(placed, hp.SessionPlaced), placed
    session = host._sessions["ps_shared"]
    assert session.adapter is not adapter and adapter.pid is None  # the warmed one was stopped, not handed over
    assert session.adapter._prepared.ids != acme and session.request.tenant == "globex"

    other = await warmed(nc, host, hint("ps_other"))
    placed = await hosts.place(placement("ps_other", thread="thr_9"), volume=VOLUME)
    assert isinstance(placed, hp.SessionPlaced), placed
    assert host._sessions["ps_other"].adapter is not other and other.pid is None


async def test_a_tenant_starting_many_threads_holds_at_most_its_share_of_the_pool(env):
    nc, host, clock, _ = env
    pool = host._warmer.pool
    launched = []
    for n in range(6):
        launched.append(await warmed(nc, host, hint(f"ps_flood{n}", tenant="hostile", thread=f"thr_{n}")))
        assert len(pool.of("hostile")) <= pool.per_tenant == 1
    await wait_for(lambda: not pool.discarding, timeout=30, what="the evicted runtimes' stops")
    assert [a.pid is not None for a in launched] == [False] * 5 + [True]  # one runtime left, the newest

    mine = await warmed(nc, host, hint("ps_mine"))  # another tenant still gets its own
    assert len(pool) == 2 and len(pool.of("acme")) == 1

    clock.advance(pool.seconds)  # not adopted in time: stopped
    await wait_for(lambda: len(pool) == 0 and not pool.discarding, timeout=30, what="the pool's expiry")
    assert mine.pid is None and launched[-1].pid is None


async def test_a_hint_sent_at_a_threads_creation_launches_only_into_free_room(env):
    """Issue 38 (the first turn): a creation's hint is a guess (the thread may never get a message), so it never
    stops another runtime; a tenant creating threads in a loop cannot churn the host's runtimes."""
    nc, host, _, _ = env
    pool = host._warmer.pool
    typed = await warmed(nc, host, hint("ps_typed", thread="thr_a"))
    guess = msgspec.structs.replace(hint("ps_created", thread="thr_b"), speculative=True)
    assert host._warmer.offer(guess) is False  # acme holds its share
    assert list(pool._warm) == ["ps_typed"] and typed.pid is not None and not pool.discarding

    elsewhere = await warmed(nc, host, msgspec.structs.replace(hint("ps_g", "globex", "thr_c"), speculative=True))
    assert elsewhere.pid is not None and len(pool) == pool.size  # room for globex: launched
    assert host._warmer.offer(msgspec.structs.replace(hint("ps_g2", "globex", "thr_d"), speculative=True)) is False
