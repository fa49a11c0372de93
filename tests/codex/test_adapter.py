"""The Codex adapter against the real ``codex app-server`` and the mock model API (issue 7)."""

from __future__ import annotations

from mock_api import Reasoning, Text
from treadle.domain import provider_events as pe


async def test_plain_turn_streams_text_and_completes(open_driver, mock):
    mock.on("say hello", [Reasoning("thinking about hello"), Text("Hello from the mock!", chunks=3)])
    driver = await open_driver()
    sink = await driver.play("say hello")
    started = sink.of(pe.TurnStarted)[0]
    assert started.native_turn_ref
    assert sink.completed.status == "completed", sink.events
    assert sink.reply == "Hello from the mock!"
    assert len(next(iter(sink.chunks.values()))) == 3
    reasoning = [e for e in sink.of(pe.ToolCompleted) if e.output and "thinking about hello" in e.output]
    assert reasoning
