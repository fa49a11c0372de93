"""L9.5 and L9.4 without I/O: the manual clock, the idle reaper's loop driven by it, and the pure decisions
behind a replacement provider thread."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime

from treadle.core import events as ev
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.run import recovery
from treadle.core.state import ThreadState, evolve
from treadle.provider_host.reaper import IdleReaper
from treadle.runtime.clock import ManualClock

T0 = datetime(2026, 12, 3, tzinfo=UTC)


@dataclass
class FakeSession:
    last_active: float
    playing: bool = False
    heard: float = 0.0
    awaiting: bool = False

    @property
    def busy(self) -> bool:
        return self.playing

    @property
    def quiet_since(self) -> float | None:
        return None if self.awaiting or not self.playing else max(self.heard, self.last_active)


async def settle() -> None:
    for _ in range(5):  # let woken tasks run to their next await
        await asyncio.sleep(0)


async def test_L9_5_manual_clock_wakes_sleepers_in_deadline_order_only_when_advanced():
    clock = ManualClock(start=0)
    woke: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [asyncio.create_task(sleeper("late", 10)), asyncio.create_task(sleeper("early", 5))]
    await settle()
    assert clock.sleepers == 2 and woke == []
    clock.advance(4.9)
    await settle()
    assert woke == []
    clock.advance(10)
    await settle()
    assert woke == ["early", "late"] and clock.now() == 14.9
    await asyncio.gather(*tasks)


async def test_L9_5_idle_reaper_releases_idle_sessions_once_and_never_busy_ones():
    clock = ManualClock(start=0)
    sessions = {"idle": FakeSession(0), "busy": FakeSession(0, playing=True), "fresh": FakeSession(0)}
    released: list[tuple[str, str]] = []

    async def release(session_id: str, reason: str) -> None:
        released.append((session_id, reason))
        sessions.pop(session_id)

    reaper = IdleReaper(sessions, clock, idle_seconds=60, release=release)
    loop = asyncio.create_task(reaper.run())
    try:
        await settle()
        clock.advance(30)
        await settle()
        assert released == []
        sessions["fresh"].last_active = 50  # used again: its idle time starts over
        clock.advance(30)  # t=60
        await settle()
        assert released == [("idle", "idle")]
        clock.advance(60)  # t=120: "fresh" idle for 70s; "busy" plays on
        await settle()
        assert released == [("idle", "idle"), ("fresh", "idle")]
        clock.advance(3600)
        await settle()
        assert list(sessions) == ["busy"]
    finally:
        loop.cancel()


async def test_issue36_a_playing_turn_heard_from_for_too_long_releases_its_session_as_unresponsive():
    clock = ManualClock(start=0)
    sessions = {
        "wedged": FakeSession(0, playing=True),
        "talking": FakeSession(0, playing=True),
        "asking": FakeSession(0, playing=True, awaiting=True),  # waits for the user's answer: never wedged
        "idle": FakeSession(0),
    }
    released: list[tuple[str, str]] = []

    async def release(session_id: str, reason: str) -> None:
        released.append((session_id, reason))
        sessions.pop(session_id)

    reaper = IdleReaper(sessions, clock, idle_seconds=3600, release=release, unresponsive_seconds=600)
    loop = asyncio.create_task(reaper.run())
    try:
        await settle()
        clock.advance(300)
        await settle()
        sessions["talking"].heard = 300  # an event: its quiet time starts over
        clock.advance(300)  # t=600
        await settle()
        assert released == [("wedged", "unresponsive")]
        clock.advance(600)  # t=1200: "talking" quiet for 900s now
        await settle()
        assert released == [("wedged", "unresponsive"), ("talking", "unresponsive")]
        clock.advance(3600)
        await settle()
        assert released[2:] == [("idle", "idle")] and list(sessions) == ["asking"]
    finally:
        loop.cancel()


def _state(*payloads: ev.Payload) -> ThreadState:
    state = ThreadState()
    for i, data in enumerate(payloads, 1):
        evolve(
            state,
            ev.Envelope(
                id=f"evt_{i}",
                seq=i,
                type=data.TYPE,
                tenant="t",
                thread="th",
                at=T0,
                command_id="c",
                actor="test",
                data=data,
            ),
        )
    return state


def _queued(run: str, ordinal: int, text: str) -> ev.RunQueued:
    return ev.RunQueued(
        run_id=run,
        ordinal=ordinal,
        message_id=f"m{ordinal}",
        text=text,
        root_node_id=f"n{ordinal}",
        attempt_id=f"a{ordinal}",
        mode="auto",
        disposition="started",
        dispatched=True,
        provider="scripted",
    )


def _attached(pth: str, replaces: str | None = None) -> ev.ProviderAttached:
    return ev.ProviderAttached(
        session_id=f"ps_{pth}",
        provider="scripted",
        host_id="h",
        boot_id="b",
        provider_thread_id=pth,
        native_ref=f"scripted-{pth}",
        replaces=replaces,
        capabilities=ProviderCapabilities(),
    )


HISTORY = [
    ev.ThreadCreated(thread_id="th", workspace="w", created_by="u"),
    _queued("r1", 1, "my name is Ada"),
    _attached("p1"),
    ev.RunStarted(run_id="r1", attempt_id="a1", session_id="ps_p1", turn_id="t1"),
    ev.MessageCompleted(message_id="x1", run_id="r1", attempt_id="a1", node_id="n1", text="Hello Ada."),
    ev.RunCompleted(run_id="r1", attempt_id="a1"),
    _queued("r2", 2, "what is my name?"),
    ev.RunStarted(run_id="r2", attempt_id="a2", session_id="ps_p1", turn_id="t2"),
    ev.RequestOpened(request_id="q1", run_id="r2", node_id="nq", attempt_id="a2", kind="command"),
]


def test_L9_4_a_failed_resume_keeps_the_thread_marks_it_unusable_and_requests_not_resumable():
    state = _state(*HISTORY)
    events = recovery.resume_failed(state, "p1", "gone")
    assert [type(e) for e in events] == [ev.ProviderResumeFailed, ev.RequestResolved]
    assert events[1].status == "not_resumable" and events[1].request_id == "q1"
    state = _state(*HISTORY, *events)
    assert [(p.id, p.status) for p in state.provider_threads] == [("p1", "unusable")]
    assert state.provider_thread is None  # the next placement starts a new provider thread
    assert state.run("r1").status == "completed"


def test_L9_4_only_the_first_turn_of_a_replacement_carries_the_earlier_conversation():
    state = _state(*HISTORY)
    assert not recovery.needs_context(state)  # the original provider thread has it all
    replaced = _state(
        *HISTORY,
        ev.ProviderResumeFailed(provider_thread_id="p1", reason="gone"),
        ev.AttemptEnded(run_id="r2", attempt_id="a2", status="lost"),
        ev.AttemptStarted(run_id="r2", attempt_id="a3", root_node_id="n3", reason="provider_recovery"),
        _attached("p2", replaces="p1"),
    )
    assert recovery.needs_context(replaced)
    context = recovery.replacement_context(replaced, replaced.run("r2"))
    assert "user: my name is Ada\nassistant: Hello Ada." in context
    assert "what is my name?" not in context  # the run's own input follows the context, once
    started = _state(
        *HISTORY,
        ev.ProviderResumeFailed(provider_thread_id="p1", reason="gone"),
        ev.AttemptEnded(run_id="r2", attempt_id="a2", status="lost"),
        ev.AttemptStarted(run_id="r2", attempt_id="a3", root_node_id="n3", reason="provider_recovery"),
        _attached("p2", replaces="p1"),
        ev.RunStarted(run_id="r2", attempt_id="a3", session_id="ps_p2", turn_id="t3"),
    )
    assert not recovery.needs_context(started)
