"""A message's ``script`` per provider: a script for the scripted provider, turn options for Codex."""

from __future__ import annotations

import pytest

from tests.unit.domain_helpers import command, new_thread, run_command, send
from treadle.core.errors import BadRequest
from treadle.core.thread.commands import SendMessage
from treadle.core.thread.decide import capabilities_for
from treadle.providers.registry import CATALOGUE


def test_L2_1_a_codex_message_carries_plan_mode_to_its_run():
    state = new_thread(provider="codex")
    events, receipt = send(state, "design it", script={"collaboration_mode": "plan"})
    run = state.runs[0]
    assert run.provider == "codex" and run.script == {"collaboration_mode": "plan"}
    assert capabilities_for(state, run, CATALOGUE) is None  # turn options say nothing about capabilities


@pytest.mark.parametrize(
    "provider, script, reason",
    [
        ("codex", {"collaboration_mode": "chaos"}, "collaboration_mode must be plan or default"),
        ("codex", {"temperature": 2}, "unknown temperature"),
        ("claude", {"collaboration_mode": "plan"}, "provider claude takes no script"),
        ("scripted", {"steps": [{"type": "teleport"}]}, "invalid script"),
    ],
)
def test_L2_1_a_script_the_provider_cannot_take_is_a_clear_400_and_changes_nothing(provider, script, reason):
    state = new_thread(provider=provider)
    cmd = command(SendMessage(text="x", script=script), thread=state.thread.id)
    with pytest.raises(BadRequest) as caught:
        run_command(state, cmd)
    assert caught.value.code == "invalid_script" and reason in str(caught.value)
    assert state.runs == [] and state.messages == []
