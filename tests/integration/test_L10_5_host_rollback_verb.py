"""The provider host's ``thread.rollback`` verb (L10.5) against a real broker, with the scripted provider:
turns dropped once per rollback id, never under a playing turn, refused truthfully without the capability,
and the dropped turns stay dropped for a later session that resumes the provider thread."""

from __future__ import annotations

import nats
import pytest

from tests.support.helpers import wait_for
from treadle.core import provider_events as pe
from treadle.core.providers.capabilities import PROFILES
from treadle.eventlog import streams
from treadle.ops.servers import NatsServer
from treadle.provider_host.service import ProviderHost
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient
from treadle.runtime.clock import ManualClock
from treadle.runtime.settings import ProviderHostSettings, Shared

TENANT = "acme"
RECALL = {"steps": [{"type": "recall"}]}


@pytest.fixture
async def env(tmp_path):
    server = NatsServer(tmp_path / "nats")
    await server.start()
    nc = await nats.connect(server.url)
    await streams.ensure(nc.jetstream())
    ended: dict[str, pe.ProviderEvent] = {}
    texts: dict[str, str] = {}

    async def on_event(msg) -> None:
        for event in pe.provider_event_decoder.decode(msg.data).parts():
            if isinstance(event.body, pe.TurnCompleted):
                ended[event.attempt_id or ""] = event
            elif isinstance(event.body, pe.TextCompleted):
                texts[event.attempt_id or ""] = event.body.text

    await nc.subscribe("treadle.prov.>", cb=on_event)
    host = ProviderHost(
        nc, Shared(state_dir=tmp_path, nats_url=server.url), ProviderHostSettings(host_id="h1"), clock=ManualClock()
    )
    await host.start()
    yield nc, HostClient(nc, timeout=5.0), ended, texts
    await host.stop()
    await nc.close()
    await server.stop()


async def place(client: HostClient, session_id: str, native_ref: str | None, profile: str) -> hp.SessionPlaced:
    reply = await client.place(
        hp.PlaceSession(
            tenant=TENANT,
            thread="thr_1",
            provider="scripted",
            session_id=session_id,
            provider_thread_id="pth_1",
            native_ref=native_ref,
            workspace="w",
            capabilities=PROFILES[profile],
        ),
        volume="local",  # the host's (Shared's default)
    )
    assert isinstance(reply, hp.SessionPlaced), reply
    return reply


async def play(
    client: HostClient, ended: dict, session_id: str, attempt: str, text: str, script: dict | None = None
) -> None:
    reply = await client.start_turn(
        "h1",
        hp.StartTurn(
            session_id=session_id,
            tenant=TENANT,
            thread="thr_1",
            run_id=f"run_{attempt}",
            attempt_id=attempt,
            root_node_id=f"node_{attempt}",
            text=text,
            script=script,
        ),
    )
    assert isinstance(reply, hp.TurnAccepted), reply
    await wait_for(lambda: attempt in ended, what=f"turn {attempt} ended")


def rollback(session_id: str, rollback_id: str, turns: int) -> hp.RollbackTurns:
    return hp.RollbackTurns(session_id=session_id, rollback_id=rollback_id, turns=turns)


async def test_L10_5_the_rollback_verb_drops_turns_once_per_rollback_and_they_stay_dropped(env):
    nc, client, ended, texts = env
    placed = await place(client, "ps_1", None, "native_rollback")
    for n in ("one", "two", "three"):
        await play(client, ended, "ps_1", f"att_{n}", n)

    done = await client.rollback("h1", rollback("ps_1", "rbk_1", 2))
    assert done == hp.RolledBack(turns_dropped=2, turns_left=1)
    again = await client.rollback("h1", rollback("ps_1", "rbk_1", 2))  # a retried request: nothing more dropped
    assert again == hp.RolledBack(turns_dropped=2, turns_left=1, already=True)
    too_many = await client.rollback("h1", rollback("ps_1", "rbk_2", 5))
    assert isinstance(too_many, hp.HostFailure) and too_many.code == "bad_request"
    assert "has 1 turns, cannot drop 5" in too_many.message

    await play(client, ended, "ps_1", "att_recall", "four", RECALL)
    assert texts["att_recall"] == 'Remembered: ["one"]'
    # A later session resuming the provider thread finds the conversation as the rollback left it.
    stop = await client.verb("h1", "session.stop", hp.StopTurn(session_id="ps_1", attempt_id=""))
    assert isinstance(stop, hp.TurnAccepted)
    await place(client, "ps_2", placed.native_ref, "native_rollback")
    await play(client, ended, "ps_2", "att_resumed", "five", RECALL)
    assert texts["att_resumed"] == 'Remembered: ["one", "four"]'


async def test_L10_5_the_rollback_verb_is_refused_under_a_playing_turn_without_the_capability_and_off_host(env):
    nc, client, ended, texts = env
    await place(client, "ps_busy", None, "native_rollback")
    await play(client, ended, "ps_busy", "att_first", "first")
    started = await client.start_turn(
        "h1",
        hp.StartTurn(
            session_id="ps_busy",
            tenant=TENANT,
            thread="thr_1",
            run_id="run_h",
            attempt_id="att_hang",
            root_node_id="node_h",
            text="hang",
            script={"steps": [{"type": "hang"}]},
        ),
    )
    assert isinstance(started, hp.TurnAccepted)
    busy = await client.rollback("h1", rollback("ps_busy", "rbk_busy", 1))
    assert isinstance(busy, hp.HostFailure) and busy.code == "not_active"

    await place(client, "ps_plain", None, "no_steering")
    await play(client, ended, "ps_plain", "att_plain", "plain")
    plain = await client.rollback("h1", rollback("ps_plain", "rbk_plain", 1))
    assert isinstance(plain, hp.HostFailure) and plain.code == "unsupported"

    gone = await client.rollback("h1", rollback("ps_nowhere", "rbk_gone", 1))
    assert isinstance(gone, hp.HostFailure) and gone.code == "unknown_session"
