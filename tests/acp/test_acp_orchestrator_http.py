"""Issues 21 and 22: an ACP agent is given the orchestrator's MCP endpoint at ``session/new`` (and ``session/load``)
as ACP specifies it, an ``mcpServers`` entry of type http with an Authorization header, since both installed
agents say ``mcpCapabilities.http`` in ``initialize``. The real agent, in its sandbox, calls a Treadle tool with
the session's credential, allowed by the credential's tool list as native Codex and Claude calls are (no user
approval), and the credential is written nowhere in the agent's home or the workspace."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from tests.acp.acp_support import TENANT, acp_env
from tests.acp.conftest import _quiet
from tests.codex.codex_mock import McpCall, Text, ToolSearch
from tests.support.provider_http import workspace_of
from treadle.cli.stack import Stack
from treadle.ops.servers import free_port
from treadle.ops.session_credentials import PREFIX

pytestmark = pytest.mark.e2e

# What each agent's model does: Claude Code names the tool mcp__treadle__capabilities; Codex (codex-acp embeds it)
# finds the tool with tool_search first and calls it in its namespace (tests/codex/test_codex_mcp_tools_http.py).
PROMPTS = {"acp-claude": "#orchestrator what may I use?", "acp-codex": "what may I use, orchestrator?"}


@pytest.fixture(scope="module")
async def acp_stack(tmp_path_factory, claude_api, codex_api, homes_root):
    port = free_port()
    env = {
        **acp_env(claude_api, codex_api, homes_root),
        "TREADLE_PROVIDER_HOST_MCP_URL": f"http://127.0.0.1:{port}/mcp",
        "TREADLE_SUPERVISOR_HOST_TIMEOUT": "30",  # claude-agent-acp's session/new on a loaded machine (conftest.py)
    }
    async with Stack(tmp_path_factory.mktemp("acp-mcp"), gateway_port=port, env=env, on_output=_quiet) as s:
        yield s


def _command_lines() -> list[list[str]]:
    return [proc.info["cmdline"] or [] for proc in psutil.process_iter(["cmdline"])]


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


@pytest.mark.parametrize("provider", ["acp-claude", "acp-codex"])
async def test_an_acp_agent_calls_the_orchestrators_tool_with_its_session_credential(
    client, acp_stack, codex_api, homes_root, provider
):
    codex_api.on(
        PROMPTS["acp-codex"],
        [ToolSearch("treadle capabilities")],
        [McpCall("mcp__treadle", "capabilities", {})],
        [Text("Orchestrator answered.")],
    )
    thread = (await client.create_thread(title=f"{provider} orchestrator", provider=provider))["thread_id"]
    sent = await client.send(thread, PROMPTS[provider])
    run = await client.wait_run(sent["run_id"], timeout=120)
    assert run["status"] == "completed", run
    # its session live, the agent idle: its credential is on no process's command line (the host's ps sees the
    # sandbox's)
    assert [argv for argv in _command_lines() if PREFIX in " ".join(argv)] == []
    # the call of Treadle's own tool, which the credential grants, asked no one (README: the credential's tool
    # list is the policy, for ACP agents as for native Codex and Claude)
    doc = await client.get_thread(thread)
    assert doc["requests"] == [], doc["requests"]

    doc = await client.get_thread(thread)
    assert doc["capabilities"]["orchestrator"] == "mcp"  # the capability view says the agent has the endpoint
    [session] = doc["sessions"]
    assert session["capabilities"]["orchestrator"] is True
    if provider == "acp-claude":  # Claude Code says what the tool answered: the session's tenant
        said = " ".join(m["text"] for m in run["messages"] if m["role"] == "assistant").replace(" ", "")
    else:
        outputs = next(r.tool_outputs for r in reversed(codex_api.requests) if r.prompt == PROMPTS[provider])
        said = json.dumps(outputs[-1]).replace("\\", "").replace(" ", "")
    assert f'"tenant":"{TENANT}"' in said, said
    # the configured ACP agents are among the providers the orchestrator offers
    assert '"acp-claude","acp-codex"' in said, said
    # no session credential is kept on disk by the agent: not in its home, not in the workspace
    for root in (homes_root, workspace_of(acp_stack, TENANT, thread)):
        assert _files_holding(root, PREFIX.encode()) == []
