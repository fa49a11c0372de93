"""Issue 21 in the sandbox: the real Claude Code CLI, run in its tenant's sandbox with a session credential, calls
the orchestrator's tool through the real gateway of a real stack. What makes that possible (the MCP URL as an
egress target) grants the gateway's MCP path and nothing more: the same runtime's Bash still reaches neither
the stack's NATS nor its Redis (directly or through the forwarder's proxy), and the gateway's other paths are
refused by the egress before the gateway sees them (issue 36)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import nats
import pytest

from tests.claude import mock_api
from tests.claude.claude_fixtures import RecordingSink, new_turn
from tests.claude.mock_api import MockMessagesApi
from tests.isolation.sandbox_fixtures import END, World, marker_dir, monkeypatch_module, world  # noqa: F401
from treadle.cli.stack import Stack
from treadle.ops.session_credentials import SessionCredentials
from treadle.providers.claude import ClaudeAdapter
from treadle.providers.claude.settings import ClaudeSettings
from treadle.providers.mcp_access import TOKEN_ENV, McpAccess
from treadle.providers.protocol import PlaceSession

TENANT = "acme"
TOOLS = ("capabilities",)


@pytest.fixture(scope="module")
async def api():
    async with MockMessagesApi() as server:
        yield server


@pytest.fixture(scope="module")
async def gateway_stack(tmp_path_factory):
    async with Stack(Path(tmp_path_factory.mktemp("sandbox-mcp-stack")), on_output=lambda *_: None) as s:
        yield s


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


def _reach(port: int, request: str = "") -> str:
    """A Bash line that connects to 127.0.0.1:port inside the sandbox and prints the first line of the answer."""
    send = f'printf "{request}" >&3 && ' if request else ""
    return f"(exec 3<>/dev/tcp/127.0.0.1/{port} && {send}echo CONNECTED-{port} && timeout 5 head -n 1 <&3)"


def _via_proxy(port: int) -> str:
    return _reach(3128, f"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n")


async def test_sandboxed_claude_calls_the_orchestrators_tool_and_reaches_nothing_else(
    world,  # noqa: F811
    api,
    gateway_stack,
    marker_dir,  # noqa: F811
):
    session = f"ps_{uuid.uuid4().hex[:8]}"
    request = PlaceSession(
        tenant=TENANT,
        thread="thr_1",
        provider="claude",
        session_id=session,
        provider_thread_id="pth_1",
        workspace="w",
        runtime_mode="full_access",
    )
    settings = ClaudeSettings(
        base_url=api.url, api_key="sk-ant-mock-000", max_retries=0, threads_dir=world.runtime_dir.parent / "threads"
    )
    adapter = ClaudeAdapter(
        world.workspace(TENANT), request, world.runtime_dir / session, settings=settings, sandbox=world.sandbox
    )
    nc = await nats.connect(gateway_stack.nats_url)
    try:
        token = await SessionCredentials(nc.jetstream()).mint(
            tenant=TENANT, thread="thr_1", session_id=session, capabilities=TOOLS
        )
    finally:
        await nc.close()
    adapter.mcp_access = McpAccess(url=f"{gateway_stack.api_url}/mcp", token=token, tools=TOOLS)
    gateway, broker, redis = (
        _port(gateway_stack.api_url),
        _port(gateway_stack.nats_url),
        _port(gateway_stack.redis_url),
    )
    tag = "".join(c if c.isalpha() else "x" for c in f"mcpattack{uuid.uuid4().hex[:6]}")
    v1 = f"GET /v1/threads HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nAuthorization: Bearer ${TOKEN_ENV}\\r\\n\\r\\n"
    probes = [
        f'echo "token held: ${{#{TOKEN_ENV}}} chars"',
        _reach(gateway, v1),  # the allowed target's port, whose other paths the egress refuses
        _reach(broker),
        _reach(redis),
        _via_proxy(broker),
        _via_proxy(redis),
    ]
    mock_api.SCENARIOS[tag] = mock_api._tool_then_reply(
        "Bash", {"command": "; ".join([*probes, world.attack(marker_dir)]), "description": "Look around"}, "Saw:"
    )
    try:
        await adapter.open_thread(None, "unused")
        asked = RecordingSink()
        await asyncio.wait_for(adapter.run_turn(new_turn("#orchestrator what may I use?"), asked), timeout=90)
        attacked = RecordingSink()
        await asyncio.wait_for(adapter.run_turn(new_turn(f"#{tag} go"), attacked), timeout=90)
    finally:
        await adapter.close()

    said = " ".join(asked.texts())
    assert "Orchestrator said:" in said and '"tenant":"acme"' in said.replace(" ", ""), said
    output = next(
        s.conversation.result_text()
        for s in reversed(api.seen)
        if s.conversation is not None and s.conversation.tool_results and f"#{tag}" in s.conversation.prompt
    )
    world.assert_clean(output, marker_dir)
    assert END in output and f"token held: {len(token)} chars" in output, output
    assert f"CONNECTED-{gateway}" in output and "HTTP/1.1 401" not in output, output  # reached, refused before
    for closed in (broker, redis):
        assert f"CONNECTED-{closed}" not in output, output  # nothing listens on them inside the sandbox
    # the egress refused /v1/threads; the proxy the stack's NATS and Redis, and the world's
    assert output.count("403 Forbidden") == 5
