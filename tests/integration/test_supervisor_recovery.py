"""L9.3 in the supervisor against a real broker: a run whose provider session is lost while no provider
host is up gets its recovery attempt handed over as soon as a host comes back; a run handed to a session whose
host is dead (nobody listens on its subjects any more, and the host watcher has not reported it yet) is placed
again on a live host at once; a run another replica moved to a new session behind this supervisor's cached
thread still completes (its provider events are checked against the log, not dropped); a host killed after its
turn ended costs the run no attempt, even when its restart's report reaches a restarted supervisor before that
turn's end does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import msgspec

from tests.integration.supervised import World, thread_with_history
from tests.support.helpers import wait_for
from treadle.core import events as ev
from treadle.core import provider_events as pe
from treadle.core.ctx import reaction_ctx
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.run import supervision as sv
from treadle.core.state import ThreadState, fold
from treadle.eventlog import subjects
from treadle.provider_host.registry import Registry, SessionRecord
from treadle.provider_host.service import ProviderHost
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient
from treadle.runtime.settings import ProviderHostSettings, SupervisorSettings
from treadle.supervisor.service import Supervisor

T0 = datetime(2026, 12, 2, tzinfo=UTC)
TENANT, THREAD = "acme", "thr_recover"


def envelope(i: int, data: ev.Payload) -> ev.Envelope:
    return ev.Envelope(
        id=f"evt_r{i}", type=data.TYPE, tenant=TENANT, thread=THREAD, at=T0, command_id="cmd_r", actor="test", data=data
    )


def handed_to(session: str, host: str) -> list[ev.Payload]:
    """A dispatched run with its baseline, given a session on ``host`` (the provider thread pth_1)."""
    return [
        ev.ThreadCreated(thread_id=THREAD, workspace="w", created_by="u"),
        ev.RunQueued(
            run_id="run_1",
            ordinal=1,
            message_id="msg_1",
            text="go",
            root_node_id="node_1",
            attempt_id="att_1",
            mode="auto",
            disposition="started",
            dispatched=True,
            provider="scripted",
        ),
        ev.CheckpointCaptured(checkpoint_id="ckpt_0", ordinal=0, kind="baseline", status="baseline"),
        ev.ProviderAttached(
            session_id=session,
            provider="scripted",
            host_id=host,
            boot_id="gone",
            provider_thread_id="pth_1",
            native_ref="scripted-pth_1",
            capabilities=ProviderCapabilities(),
        ),
    ]


async def test_L9_3_recovery_attempt_waits_for_a_host_and_then_completes_the_run(tmp_path):
    # A run mid-turn on session ps_old, whose host is gone.
    history = handed_to("ps_old", "host-r") + [
        ev.RunStarted(run_id="run_1", attempt_id="att_1", session_id="ps_old", turn_id="turn_1")
    ]
    async with thread_with_history(tmp_path, [envelope(i, p) for i, p in enumerate(history)]) as world:
        nc, log, shared = world.nc, world.log, world.shared
        supervisor = Supervisor(nc, shared, SupervisorSettings(host_timeout=0.5))
        await supervisor.start()
        stopped = pe.ProviderEvent(
            id="evt_stop",
            tenant=TENANT,
            thread=THREAD,
            session_id="ps_old",
            provider_thread_id="pth_1",
            at=T0,
            body=pe.SessionStopped(reason="host_restarted"),
        )
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
            assert world.workspace_ready.git
        finally:
            await host.stop()
            await supervisor.stop()


async def test_L9_3_a_run_handed_to_a_session_on_a_dead_host_is_placed_again_on_a_live_one(tmp_path):
    """Waiting for the host watcher's report instead would hold the thread's mailbox, where that report queues
    behind the hand-over (a stall the chaos test found)."""
    history = handed_to("ps_dead", "host-dead")  # which no longer runs: the turn was never started
    async with thread_with_history(tmp_path, [envelope(i, p) for i, p in enumerate(history)]) as world:
        host = ProviderHost(world.nc, world.shared, ProviderHostSettings(host_id="host-live"))
        await host.start()
        supervisor = Supervisor(world.nc, world.shared, SupervisorSettings(host_timeout=0.5))
        await supervisor.start()
        try:

            async def completed():
                state = fold(await world.log.read(TENANT, THREAD))
                return state if state.run("run_1").status == "completed" else None

            state = await wait_for(completed, timeout=30, what="the run completed on the live host")
            stops = [e.data for e in await world.log.read(TENANT, THREAD) if isinstance(e.data, ev.ProviderStopped)]
            assert [(s.session_id, s.reason) for s in stops] == [("ps_dead", "host_unreachable")]
            assert state.live_session.host_id == "host-live"
            assert [p.id for p in state.provider_threads] == ["pth_1"]  # resumed, not replaced
            assert [a.status for a in state.run("run_1").attempts] == ["completed"]
        finally:
            await supervisor.stop()
            await host.stop()


@asynccontextmanager
async def handed_to_a_dying_host(tmp_path) -> AsyncIterator[World]:
    """A supervisor hands run_1 to ps_1 on host-1, which takes the turn and then dies (a stand-in answering on
    host-1's subjects); host-2 is up."""
    history = handed_to("ps_1", "host-1")
    async with thread_with_history(tmp_path, [envelope(i, p) for i, p in enumerate(history)]) as world:
        accepted = asyncio.Event()

        async def host_1(msg) -> None:
            accepted.set()
            await msg.respond(hp.encode(hp.TurnAccepted()))

        await world.nc.subscribe(subjects.host("host-1", "turn.start"), cb=host_1)
        supervisor = Supervisor(world.nc, world.shared, SupervisorSettings(host_timeout=0.5))
        await supervisor.start()
        host_2 = ProviderHost(world.nc, world.shared, ProviderHostSettings(host_id="host-2"))
        await host_2.start()
        try:
            await asyncio.wait_for(accepted.wait(), 30)
            yield world
        finally:
            await host_2.stop()
            await supervisor.stop()


async def moved_behind_the_cache(world: World, decided: list[ev.Payload], attempt_id: str, root_node_id: str) -> None:
    """What another replica (the one that held this thread's partition meanwhile) did without this supervisor
    seeing it: recorded ``decided`` about ps_1, placed the provider thread on ps_2 on host-2, and started
    ``attempt_id`` there."""
    hosts = HostClient(world.nc, timeout=5.0)
    placed = await hosts.place(
        hp.PlaceSession(
            tenant=TENANT,
            thread=THREAD,
            provider="scripted",
            session_id="ps_2",
            provider_thread_id="pth_1",
            native_ref="scripted-pth_1",
            workspace="w",
        ),
        volume=world.shared.volume,
    )
    assert isinstance(placed, hp.SessionPlaced), placed
    state = fold(await world.log.read(TENANT, THREAD))
    await world.log.append(
        TENANT, THREAD, state.seq, [envelope(10 + i, p) for i, p in enumerate([*decided, sv.attached(placed)])]
    )
    reply = await hosts.start_turn(
        "host-2",
        hp.StartTurn(
            session_id="ps_2",
            tenant=TENANT,
            thread=THREAD,
            run_id="run_1",
            attempt_id=attempt_id,
            root_node_id=root_node_id,
            text="go",
        ),
    )
    assert isinstance(reply, hp.TurnAccepted), reply


async def completed(log) -> ThreadState:
    async def done():
        state = fold(await log.read(TENANT, THREAD))
        return state if state.run("run_1").status == "completed" else None

    return await wait_for(done, timeout=30, what="the run completed on the session placed elsewhere")


async def test_L9_3_a_turn_on_a_session_placed_behind_the_supervisors_cache_is_folded_not_dropped(tmp_path):
    """Its provider events, of the run's current attempt from a session the cached thread never saw, are
    checked against the log before being dropped. Dropped, the run would wait for them forever."""
    async with handed_to_a_dying_host(tmp_path) as world:
        # Cached: the attempt pending on ps_1. Behind it, the other replica moved the attempt to ps_2.
        await moved_behind_the_cache(
            world, [ev.ProviderStopped(session_id="ps_1", reason="host_unreachable")], "att_1", "node_1"
        )
        state = await completed(world.log)
        assert [(a.status, a.session_id) for a in state.run("run_1").attempts] == [("completed", "ps_2")]


async def test_L9_3_a_recovery_attempt_started_behind_the_supervisors_cache_is_folded_not_dropped(tmp_path):
    """The same for an attempt the cached thread never saw: the other replica recorded ps_1 lost mid-turn and
    played the recovery attempt on ps_2."""
    async with handed_to_a_dying_host(tmp_path) as world:
        started = pe.ProviderEvent(
            id="evt_started_1",
            tenant=TENANT,
            thread=THREAD,
            session_id="ps_1",
            provider_thread_id="pth_1",
            run_id="run_1",
            attempt_id="att_1",
            index=1,
            at=T0,
            body=pe.TurnStarted(native_turn_ref="turn-1"),
        )  # host-1's last words
        await world.nc.jetstream().publish(subjects.provider(TENANT, THREAD, "pth_1"), msgspec.json.encode(started))

        async def running():
            return fold(await world.log.read(TENANT, THREAD)).run("run_1").attempt.status == "running"

        await wait_for(running, what="the supervisor folded the turn's start")  # cached: att_1 running on ps_1
        lost = sv.session_stopped(
            fold(await world.log.read(TENANT, THREAD)),
            "ps_1",
            "host_unreachable",
            reaction_ctx("elsewhere", T0, "supervisor"),
        )
        [recovery] = [e for e in lost.events if isinstance(e, ev.AttemptStarted)]
        await moved_behind_the_cache(world, list(lost.events), recovery.attempt_id, recovery.root_node_id)
        state = await completed(world.log)
        assert [(a.status, a.session_id) for a in state.run("run_1").attempts] == [
            ("lost", "ps_1"),
            ("completed", "ps_2"),
        ]


def said_by_ps_1(index: int, body: pe.AnyBody) -> bytes:
    """Event ``index`` of att_1's play on session ps_1 (host-1), as the host publishes it."""
    return msgspec.json.encode(
        pe.ProviderEvent(
            id=f"evt_ps1_{index}",
            tenant=TENANT,
            thread=THREAD,
            session_id="ps_1",
            provider_thread_id="pth_1",
            run_id="run_1",
            attempt_id="att_1",
            index=index,
            at=T0,
            body=body,
        )
    )


def _matches(pattern: str, subject: str) -> bool:
    want, got = pattern.split("."), subject.split(".")
    if want[-1] == ">":
        return len(got) >= len(want) and all(w in ("*", g) for w, g in zip(want[:-1], got))
    return len(want) == len(got) and all(w in ("*", g) for w, g in zip(want, got))


async def test_L9_3_a_host_killed_after_its_turn_ended_costs_no_attempt_when_its_stop_comes_first(tmp_path):
    """host-1 plays att_1 to its end and is killed -9; the supervisor that had the turn's last events in hand
    (finalizing, the checkpoint service away) is killed too, so the broker gives those back only once their ack
    wait ends, while host-1's restart reports ps_1 stopped: the restarted supervisor gets the stop first. The
    turn ended before its host died: the run completes with that attempt and its reply, not a recovery attempt
    (three such false losses failed runs of `make soak` with "provider lost 3 times: host_restarted")."""
    async with thread_with_history(
        tmp_path, [envelope(i, p) for i, p in enumerate(handed_to("ps_1", "host-1"))]
    ) as world:
        js, subject = world.nc.jetstream(), subjects.provider(TENANT, THREAD, "pth_1")
        accepted = asyncio.Event()

        async def host_1(msg) -> None:  # host-1 as it was before the kill: it takes the turn
            accepted.set()
            await msg.respond(hp.encode(hp.TurnAccepted()))

        stand_in = await world.nc.subscribe(subjects.host("host-1", "turn.start"), cb=host_1)
        before = Supervisor(world.nc, world.shared, SupervisorSettings(host_timeout=0.5))
        await before.start()
        await asyncio.wait_for(accepted.wait(), 30)
        await js.publish(subject, said_by_ps_1(1, pe.TurnStarted(native_turn_ref="turn-1")))

        async def running():
            return fold(await world.log.read(TENANT, THREAD)).run("run_1").attempt.status == "running"

        await wait_for(running, what="the turn's start folded")
        await before.stop()
        # The turn's end, then host-1's kill: nothing more from ps_1.
        await js.publish(subject, said_by_ps_1(2, pe.TextCompleted(message_id="msg_a", node_id="node_1", text="done")))
        await js.publish(subject, said_by_ps_1(3, pe.TurnCompleted()))
        await stand_in.unsubscribe()
        # The supervisor that took those two dies with them in hand: its consumer gives them back only later.
        stored = (await js.get_last_msg(subjects.PROVIDER_STREAM, f"{subject}.>")).subject or subject
        [durable] = [
            c.name
            for c in await js.consumers_info(subjects.PROVIDER_STREAM)
            if any(_matches(f, stored) for f in (c.config.filter_subjects or [c.config.filter_subject or ">"]))
        ]
        held = await js.pull_subscribe_bind(durable, stream=subjects.PROVIDER_STREAM)
        in_hand = await held.fetch(2, timeout=10)
        assert [pe.provider_event_decoder.decode(m.data).index for m in in_hand] == [2, 3]
        for m in in_hand:
            await m.nak(delay=120)
        # host-1 comes back (a new boot, same host id) and reports the session of its earlier life stopped.
        registry = await Registry.open(js)
        await registry.record_session(
            "host-1", "ps_1", SessionRecord(tenant=TENANT, thread=THREAD, provider_thread_id="pth_1", boot_id="gone")
        )
        host = ProviderHost(world.nc, world.shared, ProviderHostSettings(host_id="host-1"))
        await host.start()
        after = Supervisor(world.nc, world.shared, SupervisorSettings(host_timeout=0.5))
        await after.start()
        try:
            state = await completed(world.log)
            run = state.run("run_1")
            assert [(a.status, a.session_id) for a in run.attempts] == [("completed", "ps_1")]
            assert [m.text for m in state.run_messages("run_1") if m.role == "assistant"] == ["done"]
            stops = [e.data for e in await world.log.read(TENANT, THREAD) if isinstance(e.data, ev.ProviderStopped)]
            assert [(s.session_id, s.reason) for s in stops] == [("ps_1", "host_restarted")]
        finally:
            await held.unsubscribe()
            await after.stop()
            await host.stop()
