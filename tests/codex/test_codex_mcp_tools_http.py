"""Issue 21 with the real ``codex`` app-server in its sandbox, through the HTTP API: the provider host gives the
session its credential, and the mock model calls Treadle's tools the way Codex 0.171 offers them. Codex defers
every MCP tool behind its own ``tool_search`` (a model that supports it never sees ``mcp__treadle__…`` in its tool
list, and a plain ``function_call`` named so is an "unsupported call"): the model first runs ``tool_search``,
which answers with a ``namespace`` item ``mcp__treadle`` holding the tools, then calls each as a
``function_call`` with ``namespace: "mcp__treadle"`` and the tool's own ``name``."""

from __future__ import annotations

import json

import pytest

from tests.codex.codex_mock import McpCall, Text, ToolSearch
from tests.codex.codex_support import MCP_NAMESPACE, TENANT, codex_env, mcp_result
from tests.support.provider_http import api_client, tenant_token
from treadle.cli.stack import Stack
from treadle.ops.servers import free_port

PROMPT = "orchestrate a child thread"
CHILD_TEXT = "hello from the codex parent"


@pytest.fixture(scope="module")
async def mcp_stack(tmp_path_factory, mock, homes_root):
    port = free_port()
    env = {**codex_env(mock, homes_root), "TREADLE_PROVIDER_HOST_MCP_URL": f"http://127.0.0.1:{port}/mcp"}
    async with Stack(
        tmp_path_factory.mktemp("codex-mcp-tools"), gateway_port=port, env=env, on_output=lambda *_: None
    ) as s:
        yield s


def _read_child(outputs: list[dict]) -> list:
    started = mcp_result(outputs[-1])
    args = {"thread_id": started["thread_id"], "min_seq": started["message"]["seq"]}
    return [McpCall(MCP_NAMESPACE, "thread_read", args)]


async def test_sandboxed_codex_calls_treadles_tools_with_its_session_credential(mcp_stack, mock):
    mock.on(
        PROMPT,
        [ToolSearch("treadle thread capabilities")],
        [McpCall(MCP_NAMESPACE, "capabilities", {})],
        [
            McpCall(
                MCP_NAMESPACE, "thread_start", {"title": "child of codex", "provider": "scripted", "text": CHILD_TEXT}
            )
        ],
        _read_child,
        [Text("The child thread is started.")],
    )
    async with api_client(mcp_stack, await tenant_token(mcp_stack, TENANT)) as client:
        thread = (await client.create_thread(title="codex orchestrator", provider="codex"))["thread_id"]
        sent = await client.send(thread, PROMPT)
        run = await client.wait_run(sent["run_id"], timeout=90)
        assert run["status"] == "completed", run

        outputs = next(r.tool_outputs for r in reversed(mock.requests) if r.prompt == PROMPT)
        searched, capabilities, started, read = outputs[:4]
        assert searched["type"] == "tool_search_output"
        assert {t["name"] for t in searched["tools"]} == {MCP_NAMESPACE}  # one namespace, the server's tools inside
        assert mcp_result(capabilities)["tenant"] == TENANT  # answered as the session's tenant
        child = mcp_result(started)["thread_id"]
        messages = mcp_result(read)
        assert messages["thread_id"] == child and CHILD_TEXT in json.dumps(messages["items"]), messages

        made = await client.get_thread(child)  # an ordinary thread of the tenant, visible through the API
        assert [m["text"] for m in made["messages"]][:1] == [CHILD_TEXT]
        parent = await client.get_thread(thread)
        tools = [(n["title"], n["status"]) for r in parent["runs"] for n in r["nodes"] if n.get("kind") == "tool"]
        assert tools == [
            (f"mcpToolCall: {name}", "completed") for name in ("capabilities", "thread_start", "thread_read")
        ]
