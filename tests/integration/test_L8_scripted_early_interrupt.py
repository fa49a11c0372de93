"""L8: an interrupt that reaches the scripted provider after its turn began but before it plays its steps is
not lost (it was: the host had answered the interrupt, and the hanging turn played on for ever — two quick
steers on a provider without native steering left their run `running`)."""

from __future__ import annotations

import asyncio

from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.providers.base import Turn
from treadle.providers.protocol import PlaceSession
from treadle.providers.scripted import ScriptedAdapter


class _HeldAtStart:
    """A sink that holds the turn at its TurnStarted event until released: the window before the play exists."""

    def __init__(self) -> None:
        self.events: list = []
        self.started, self.release = asyncio.Event(), asyncio.Event()

    async def event(self, body) -> None:
        self.events.append(body)
        if isinstance(body, pe.TurnStarted):
            self.started.set()
            await self.release.wait()

    async def text(self, message_id, node_id, chunk) -> None:
        return None

    async def text_done(self, message_id, node_id, text) -> None:
        return None


async def test_L8_1_an_interrupt_before_the_turn_plays_ends_it(tmp_path):
    request = PlaceSession(
        tenant="acme", thread="thr_1", provider="scripted", session_id="ps_1", provider_thread_id="pth_1", workspace="w"
    )
    adapter = ScriptedAdapter(tmp_path, request)
    await adapter.open_thread(None, "scripted-t1")
    turn = Turn(
        run_id="run_1",
        attempt_id="att_1",
        root_node_id="root",
        text="go",
        ids=IdFactory("att_1", 1),
        script={"steps": [{"type": "hang"}]},
    )
    sink = _HeldAtStart()
    playing = asyncio.create_task(adapter.run_turn(turn, sink))
    await asyncio.wait_for(sink.started.wait(), 10)
    await adapter.interrupt(turn)  # the host answered this interrupt: it must not be lost
    sink.release.set()
    await asyncio.wait_for(playing, 10)
    assert [e.status for e in sink.events if isinstance(e, pe.TurnCompleted)] == ["interrupted"]
