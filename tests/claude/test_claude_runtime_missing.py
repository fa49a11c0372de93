"""The Claude runtime is an extra of the distribution (treadle[claude]): a provider host installed without it
places a Claude session, and its first turn fails saying what to install, instead of an import error."""

from __future__ import annotations

import sys

import pytest

from tests.claude.claude_fixtures import api, claude  # noqa: F401  (fixtures)
from treadle.core import provider_events as pe

# Every module that imports claude_agent_sdk, so that the turn imports them again and meets the missing SDK
SDK_USERS = ["approvals", "translate", "options"]


async def test_a_host_without_the_claude_extra_fails_the_turn_naming_it(claude, monkeypatch: pytest.MonkeyPatch):
    # None in sys.modules: `import claude_agent_sdk` raises ModuleNotFoundError, as on a host without the wheel
    monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)
    for name in SDK_USERS:
        monkeypatch.delitem(sys.modules, f"treadle.providers.claude.{name}", raising=False)
    adapter = claude.adapter()
    await adapter.open_thread(None, "unused")

    turn, sink = await claude.play(adapter, "#text hello")

    assert sink.completed == pe.TurnCompleted(
        status="failed",
        error="the Claude runtime (claude-agent-sdk) is not installed on this provider host: "
        "`make providers` in a checkout, else pip install 'treadle[claude]'",
    )
    assert claude.api.seen == []  # no CLI started, nothing reached the model API
    assert turn.native_ref is not None  # the turn was begun and ended, not left open
