"""The real Claude Code CLI (spawned by claude-agent-sdk through the sandbox's wrapper script) attacked by
its own agent: a Bash tool call tries every way out. The tool result the mock Messages API receives must
hold none of the host's bytes; nothing may be written or connected to outside. Its conversation store and
config dir belong to the tenant's uid and are closed to others."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from tests.claude import mock_api
from tests.claude.claude_fixtures import RecordingSink, new_turn
from tests.claude.mock_api import MockMessagesApi
from tests.isolation.sandbox_fixtures import World, marker_dir, monkeypatch_module, world  # noqa: F401
from treadle.providers.claude import ClaudeAdapter
from treadle.providers.claude.settings import ClaudeSettings
from treadle.providers.protocol import PlaceSession

TENANT = "acme"


@pytest.fixture(scope="module")
async def api():
    async with MockMessagesApi() as server:
        yield server


def _adapter(world: World, api: MockMessagesApi, runtime_mode: str) -> ClaudeAdapter:
    session = f"ps_{uuid.uuid4().hex[:8]}"
    request = PlaceSession(
        tenant=TENANT,
        thread="thr_1",
        provider="claude",
        session_id=session,
        provider_thread_id="pth_1",
        workspace="w",
        runtime_mode=runtime_mode,
    )
    settings = ClaudeSettings(
        base_url=api.url,
        api_key="sk-ant-mock-000",
        max_retries=0,
        threads_dir=world.runtime_dir.parent / "claude-threads",
    )
    return ClaudeAdapter(
        world.workspace(TENANT), request, world.runtime_dir / session, settings=settings, sandbox=world.sandbox
    )


async def test_claude_bash_tool_cannot_reach_outside_its_sandbox(world, api, marker_dir):
    tag = f"attack{uuid.uuid4().hex[:6]}".replace("0", "a").replace("1", "b")
    tag = "".join(c if c.isalpha() else "x" for c in tag)
    mock_api.SCENARIOS[tag] = mock_api._tool_then_reply(
        "Bash", {"command": world.attack(marker_dir), "description": "Look around"}, "The command printed:"
    )
    adapter = _adapter(world, api, "full_access")
    try:
        await adapter.open_thread(None, "unused")
        sink = RecordingSink()
        await asyncio.wait_for(adapter.run_turn(new_turn(f"#{tag} go"), sink), timeout=90)
        assert sink.completed is not None and sink.completed.status == "completed", sink.events
    finally:
        await adapter.close()
    results = [
        s.conversation.result_text()
        for s in api.seen
        if s.conversation is not None and s.conversation.tool_results and f"#{tag}" in s.conversation.prompt
    ]
    assert results, api.prompts()
    output = results[-1]
    world.assert_clean(output, marker_dir)
    assert output.count("403 Forbidden") == 2  # its egress proxy refused the broker and Redis
    uid = world.sandbox.identities.ids(TENANT).uid
    assert str(uid) in output
    # the conversation store and the config dir are the tenant's, closed to others
    store = world.runtime_dir.parent / "claude-threads" / TENANT / "projects"
    assert os.stat(store).st_uid == uid and os.stat(store).st_mode & 0o077 == 0
    assert list(store.glob("*/*.jsonl")), "the transcript was written through the sandbox"
    for path in store.glob("*/*.jsonl"):
        assert os.stat(path).st_uid == uid
