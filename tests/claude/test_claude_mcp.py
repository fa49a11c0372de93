"""Issue 21 with the real Claude Code runtime: a session given its MCP credential (an http ``mcp_servers`` entry
whose Authorization header expands the token from the environment) calls the orchestrator's tool through the
gateway of a real stack and is answered as its session's tenant (the unit tests show the token is in no option)."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest

from tests.claude.claude_fixtures import api, claude  # noqa: F401  (fixtures)
from treadle.cli.stack import Stack
from treadle.ops.session_credentials import SessionCredentials
from treadle.providers.mcp_access import McpAccess

TOOLS = ("capabilities",)


@pytest.fixture(scope="module")
async def gateway_stack(tmp_path_factory):
    async with Stack(Path(tmp_path_factory.mktemp("claude-mcp-stack")), on_output=lambda *_: None) as s:
        yield s


async def test_claude_calls_the_orchestrators_tool_with_its_session_credential(claude, gateway_stack):  # noqa: F811
    adapter = claude.adapter()
    nc = await nats.connect(gateway_stack.nats_url)
    try:
        token = await SessionCredentials(nc.jetstream()).mint(
            tenant="acme", thread="thr_test", session_id=adapter.request.session_id, capabilities=TOOLS
        )
    finally:
        await nc.close()
    adapter.mcp_access = McpAccess(url=f"{gateway_stack.api_url}/mcp", token=token, tools=TOOLS)
    await adapter.open_thread(None, "unused")
    _, sink = await claude.play(adapter, "#orchestrator what may I use?")
    said = " ".join(sink.texts())
    assert "Orchestrator said:" in said and '"tenant":"acme"' in said.replace(" ", ""), said
    assert token not in said
