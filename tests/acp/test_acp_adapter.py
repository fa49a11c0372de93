"""The ACP adapter with the real agents, without the stack (issue 22): what ``initialize`` maps to, and a session
the agent does not have fails to resume typed (L9.4's replacement path then runs), for each agent."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from tests.acp.acp_support import acp_settings
from tests.claude.mock_api import MockMessagesApi
from tests.codex.codex_mock import MockResponses
from treadle.core.providers.capabilities import view
from treadle.providers.acp import AcpAdapter
from treadle.providers.acp.adapter import can_resume, capabilities_of
from treadle.providers.acp.settings import AcpAgent, AcpNotConfigured, AcpSettings
from treadle.providers.base import Response, ResumeFailed, UnknownProvider, Unsupported
from treadle.providers.mcp_access import McpAccess
from treadle.providers.protocol import PlaceSession


def test_capabilities_from_initialize_degrade_as_lifecycles_says():
    caps = capabilities_of({"agentCapabilities": {"loadSession": True, "sessionCapabilities": {"fork": {}}}})
    shown = view(caps)
    assert (shown.steering, shown.interrupt, shown.fork, shown.rollback, shown.questions) == (
        "restart",  # no active steering in ACP: interrupt and restart (L3.3)
        "available",  # session/cancel
        "portable",  # session/fork cannot fork at a run's point
        "fresh_thread",
        "text_only",
    )
    assert can_resume({"agentCapabilities": {"loadSession": True}})
    assert can_resume({"agentCapabilities": {"sessionCapabilities": {"resume": {}}}})
    assert not can_resume({"agentCapabilities": {}}) and not can_resume({})


@pytest.mark.parametrize("provider", ["acp-", "acp-nosuch", "codex", "acp-../x"])
def test_an_unconfigured_or_malformed_acp_agent_is_refused_typed(provider):
    with pytest.raises(UnknownProvider):
        AcpSettings(agents={}).agent(provider)


def test_an_agent_whose_command_is_missing_is_refused_typed(tmp_path):
    settings = AcpSettings.model_validate({"agents": {"gone": {"command": [str(tmp_path / "no-such-agent")]}}})
    with pytest.raises(AcpNotConfigured, match="not installed"):
        settings.agent("acp-gone")[1].argv()


@pytest.fixture
async def mocks():
    async with MockMessagesApi() as claude:
        codex = await MockResponses().start()
        yield claude, codex
        await codex.stop()


@pytest.mark.parametrize("provider", ["acp-claude", "acp-codex"])
async def test_L9_4_resuming_a_session_the_agent_does_not_have_fails_typed_and_nothing_lingers(
    mocks, tmp_path, provider
):
    claude, codex = mocks
    homes = Path.home() / ".cache" / "treadle-test" / "acp-adapter" / uuid.uuid4().hex[:8]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    request = PlaceSession(
        tenant="acme",
        thread="thr",
        provider=provider,
        session_id="ps_1",
        provider_thread_id="pth_1",
        workspace=str(workspace),
    )
    adapter = AcpAdapter(workspace, request, tmp_path / "rt" / "ps_1", acp_settings(claude, codex, homes))
    try:
        with pytest.raises(ResumeFailed, match="could not resume"):
            await adapter.open_thread(str(uuid.uuid4()), "unused")
        assert adapter._rpc is None  # the agent process was closed with the failed placement
        with pytest.raises(Unsupported):
            await adapter.respond("req_unknown", Response(decision="accept"))
    finally:
        shutil.rmtree(homes, ignore_errors=True)


@pytest.mark.parametrize(
    ("provider", "models", "reason"),
    [
        ("acp-codex", [], "refused the thread's settings"),  # codex-acp refuses an unknown model itself
        ("acp-claude", ["haiku"], "offers no model"),  # claude-agent-acp takes any id: the configured list decides
    ],
)
async def test_a_model_the_agent_does_not_offer_fails_the_placement_typed(mocks, tmp_path, provider, models, reason):
    claude, codex = mocks
    homes = Path.home() / ".cache" / "treadle-test" / "acp-adapter" / uuid.uuid4().hex[:8]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    request = PlaceSession(
        tenant="acme",
        thread="thr",
        provider=provider,
        session_id="ps_1",
        provider_thread_id="pth_1",
        workspace=str(workspace),
        model="no-such-model-" + "x" * 200,
    )
    settings = acp_settings(claude, codex, homes)
    name = provider.removeprefix("acp-")
    settings.agents[name] = settings.agents[name].model_copy(update={"models": models})
    adapter = AcpAdapter(workspace, request, tmp_path / "rt" / "ps_1", settings)
    try:
        with pytest.raises(UnknownProvider, match=reason):
            await adapter.open_thread(None, "unused")
        assert adapter._rpc is None  # nothing left running
    finally:
        shutil.rmtree(homes, ignore_errors=True)


INIT_HTTP = {"agentCapabilities": {"mcpCapabilities": {"http": True, "sse": False}}}


@pytest.mark.parametrize(
    ("init", "token_in", "offered"),
    [
        (INIT_HTTP, "header", True),
        (INIT_HTTP, "env", True),
        ({"agentCapabilities": {"mcpCapabilities": {"sse": True}}}, "header", False),  # no http: not offered
        ({"agentCapabilities": {}}, "header", False),  # stdio only: no bridge is offered either
    ],
)
def test_the_orchestrators_server_is_passed_at_session_start_in_acps_shape_where_the_agent_takes_http(
    tmp_path, init, token_in, offered
):
    access = McpAccess(url="http://127.0.0.1:8700/mcp", token="trs_secret", tools=("capabilities",))
    agent = AcpAgent(command=["/bin/true"], mcp_token=token_in, mcp_servers=[{"name": "docs", "command": "x"}])
    request = PlaceSession(
        tenant="acme", thread="thr", provider="acp-x", session_id="ps_1", provider_thread_id="pth_1", workspace="w"
    )
    adapter = AcpAdapter(tmp_path, request, tmp_path / "rt", AcpSettings(agents={"x": agent}))
    adapter.mcp_access, adapter._init = access, init
    servers = adapter._session_params()["mcpServers"]
    assert servers[0] == {"name": "docs", "command": "x"}  # the configured stdio server stays
    assert adapter.offers_orchestrator is offered
    if not offered:
        assert len(servers) == 1
        return
    value = "Bearer ${ORCHESTRATOR_MCP_TOKEN}" if token_in == "env" else "Bearer trs_secret"
    assert servers[1] == {
        "type": "http",
        "name": "treadle",
        "url": "http://127.0.0.1:8700/mcp",
        "headers": [{"name": "Authorization", "value": value}],
    }
    env = adapter._env(tmp_path / "home")
    assert (env.get("ORCHESTRATOR_MCP_TOKEN") == "trs_secret") is (token_in == "env")  # only where it is named
