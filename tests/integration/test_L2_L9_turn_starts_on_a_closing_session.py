"""A run that got stuck for good (the soak test's): a provider turn reports its end before its adapter's run_turn
has returned (Codex and ACP still close the turn), the supervisor finishes that run and starts the next one on the
same session, and the adapter refused the start that came in between ("a turn is already playing on this
session"). The host reported that turn failed without a start, the supervisor ignored it, and the attempt stayed
pending. Now the host starts a session's next turn once the earlier one has closed (L2.2; an interrupt meanwhile
ends it unplayed, L8.2), and an attempt whose turn ends before it started is settled: tried again in a new
attempt, and failed once the run has had its attempts (L2.5, L9.3). Real broker, host and supervisor; test
adapters stand in for the runtimes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.integration.supervised import World, thread_with_history
from tests.support.helpers import wait_for
from treadle.core import events as ev
from treadle.core.run import supervision as sv
from treadle.core.state import fold
from treadle.provider_host.service import ProviderHost
from treadle.providers import protocol as hp
from treadle.providers import registry
from treadle.providers.base import Turn, TurnSink
from treadle.providers.hosts import HostClient
from treadle.providers.scripted import ScriptedAdapter
from treadle.runtime.settings import ProviderHostSettings, SupervisorSettings
from treadle.supervisor.service import Supervisor

from .test_supervisor_recovery import envelope

TENANT, THREAD = "acme", "thr_recover"  # what envelope() writes


class ClosingAdapter(ScriptedAdapter):
    """Plays as the scripted provider, then keeps run_turn open after the turn's end until ``closed`` is set (the
    gap a real runtime's cleanup leaves); refuses a turn inside that gap, as the Codex and ACP adapters do."""

    closed: asyncio.Event
    refused: list[str]
    played: list[str]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._playing = False

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        if self._playing:
            ClosingAdapter.refused.append(turn.attempt_id)
            raise RuntimeError("a turn is already playing on this session")
        self._playing = True
        ClosingAdapter.played.append(turn.attempt_id)
        try:
            await super().run_turn(turn, sink)  # reports the turn's end
            await ClosingAdapter.closed.wait()
        finally:
            self._playing = False


class RefusingAdapter(ScriptedAdapter):
    """Refuses its first ``refusals`` turns (across sessions) before they start, then plays as the scripted one."""

    refusals: int

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        if RefusingAdapter.refusals > 0:
            RefusingAdapter.refusals -= 1
            raise RuntimeError("a turn is already playing on this session")
        await super().run_turn(turn, sink)


def queued(run: str, ordinal: int, provider: str) -> ev.RunQueued:
    return ev.RunQueued(
        run_id=run,
        ordinal=ordinal,
        message_id=f"msg_{run}",
        text="go",
        root_node_id=f"node_{run}",
        attempt_id=f"att_{run}",
        mode="auto",
        disposition="started",
        dispatched=True,
        provider=provider,
    )


@asynccontextmanager
async def served(tmp_path, provider: str, monkeypatch) -> AsyncIterator[tuple[World, ProviderHost]]:
    """run_1 dispatched on a fresh thread, a real host serving ``provider`` with its test adapter, a supervisor."""
    adapter = {"closing": "ClosingAdapter", "refusing": "RefusingAdapter"}[provider]
    monkeypatch.setitem(registry.ADAPTERS, provider, f"{__name__}:{adapter}")
    history = [
        ev.ThreadCreated(thread_id=THREAD, workspace="w", created_by="u"),
        queued("run_1", 1, provider),
        ev.CheckpointCaptured(checkpoint_id="ckpt_0", ordinal=0, kind="baseline", status="baseline"),
    ]
    async with thread_with_history(tmp_path, [envelope(i, p) for i, p in enumerate(history)]) as world:
        host = ProviderHost(world.nc, world.shared, ProviderHostSettings(host_id="host-1"))
        await host.start()
        supervisor = Supervisor(world.nc, world.shared, SupervisorSettings(host_timeout=5.0))
        await supervisor.start()
        try:
            yield world, host
        finally:
            await supervisor.stop()
            await host.stop()


async def ended(world: World, run_id: str):
    async def check():
        state = fold(await world.log.read(TENANT, THREAD))
        run = state.run(run_id)
        return state if run is not None and run.terminal else None

    return await wait_for(check, timeout=30, what=f"{run_id} ended")


async def next_run_in_the_gap(world: World, host: ProviderHost) -> str:
    """run_1 ends (its run_turn held open), then run_2 is sent; returns the session once run_2's start is on
    the host. The turn task exists from the start (made before the host answers), so whatever it does first
    runs before anything the test does after."""
    state = await ended(world, "run_1")  # its turn ended; its run_turn has not returned
    assert state.run("run_1").status == "completed"
    session = state.live_session
    assert session is not None and host._sessions[session.id].busy
    await world.log.append(TENANT, THREAD, state.seq, [envelope(10, queued("run_2", 2, "closing"))])
    await wait_for(lambda: "att_run_2" in host._sessions[session.id].started, what="run_2's start on the host")
    return session.id


async def test_L2_2_the_next_run_starts_on_its_session_once_the_previous_turn_has_closed(tmp_path, monkeypatch):
    ClosingAdapter.closed, ClosingAdapter.refused, ClosingAdapter.played = asyncio.Event(), [], []
    async with served(tmp_path, "closing", monkeypatch) as (world, host):
        session = await next_run_in_the_gap(world, host)
        ClosingAdapter.closed.set()

        state = await ended(world, "run_2")
        run = state.run("run_2")
        assert (run.status, [a.status for a in run.attempts]) == ("completed", ["completed"])
        assert ClosingAdapter.refused == []  # the turn waited for the earlier one instead of racing into it
        assert ClosingAdapter.played == ["att_run_1", "att_run_2"]
        assert state.live_session is not None and state.live_session.id == session


async def test_L8_2_a_turn_interrupted_while_it_waits_for_the_previous_one_ends_interrupted_unplayed(
    tmp_path, monkeypatch
):
    ClosingAdapter.closed, ClosingAdapter.refused, ClosingAdapter.played = asyncio.Event(), [], []
    async with served(tmp_path, "closing", monkeypatch) as (world, host):
        session = await next_run_in_the_gap(world, host)
        reply = await HostClient(world.nc, timeout=5.0).verb(
            "host-1", "turn.interrupt", hp.StopTurn(session_id=session, attempt_id="att_run_2")
        )
        assert isinstance(reply, hp.TurnAccepted), reply  # not "not_active": the interrupt is not lost
        ClosingAdapter.closed.set()

        state = await ended(world, "run_2")
        assert state.run("run_2").status == "interrupted"
        assert ClosingAdapter.played == ["att_run_1"] and ClosingAdapter.refused == []


async def test_L9_3_a_turn_the_provider_ends_before_it_started_is_tried_again_in_a_new_attempt(tmp_path, monkeypatch):
    RefusingAdapter.refusals = 1
    async with served(tmp_path, "refusing", monkeypatch) as (world, _):
        state = await ended(world, "run_1")
        run = state.run("run_1")
        assert run.status == "completed"
        assert [(a.reason, a.status) for a in run.attempts] == [("initial", "failed"), ("retry", "completed")]
        assert "a turn is already playing" in (run.attempts[0].error or "")
        failed = [e for e in await world.log.read(TENANT, THREAD) if isinstance(e.data, ev.AttemptEnded)]
        assert len(failed) == 1  # settled once, not once per redelivery


@pytest.mark.parametrize("refusals", [sv.MAX_RECOVERY_ATTEMPTS, 100])
async def test_L2_5_a_run_whose_turn_never_starts_fails_once_it_has_had_its_attempts(tmp_path, monkeypatch, refusals):
    RefusingAdapter.refusals = refusals
    async with served(tmp_path, "refusing", monkeypatch) as (world, _):
        state = await ended(world, "run_1")
        run = state.run("run_1")
        assert run.status == "failed"
        assert [a.status for a in run.attempts] == ["failed"] * sv.MAX_RECOVERY_ATTEMPTS
        assert "did not start the turn" in (run.error or "") and "already playing" in (run.error or "")
        assert state.active_run_id is None and state.checkpoint(1) is not None  # through the barrier (L2.3)
    assert RefusingAdapter.refusals == refusals - sv.MAX_RECOVERY_ATTEMPTS  # no turn asked for after the run failed
