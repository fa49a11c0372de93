"""Issue 21 with two real runtimes, through the HTTP API: a sandboxed Codex parent (the mock model finds Treadle's
tools with ``tool_search``, then calls ``delegate_task`` with ``wait``) delegates to a Claude child (the real
Claude Code CLI against the mock Messages API), which gets only its role and task; the child's answer finalises
the parent run's app-owned subagent node (L5 lineage ``subagent``) and comes back to Codex as the tool's output,
which its final message uses; the model's retry with the same ``client_request_id`` answers the same child. The
provider host mints each session's credential; the parent's may delegate."""

from __future__ import annotations

import json

import pytest

from tests.claude.claude_stack import claude_env, quiet
from tests.claude.mock_api import MockMessagesApi
from tests.codex.codex_mock import McpCall, Text, ToolSearch
from tests.codex.codex_support import MCP_NAMESPACE, TENANT, codex_env, mcp_output_text, mcp_result
from tests.support.provider_http import api_client, tenant_token
from treadle.cli.stack import Stack
from treadle.ops.servers import free_port

PROMPT = "ask a claude child for a prime"
TASK, ROLE = "name one prime", "Answer in one word."
ANSWER = f"Mock Claude heard: {ROLE}\n\n{TASK}"  # the mock's echo of the child's one prompt


@pytest.fixture(scope="module")
async def claude_api():
    async with MockMessagesApi() as server:
        yield server


@pytest.fixture(scope="module")
async def stack(tmp_path_factory, mock, homes_root, claude_api):
    port = free_port()
    env = {
        **codex_env(mock, homes_root),
        **claude_env(claude_api),
        "TREADLE_PROVIDER_HOST_MCP_URL": f"http://127.0.0.1:{port}/mcp",
    }
    async with Stack(tmp_path_factory.mktemp("codex-delegates"), gateway_port=port, env=env, on_output=quiet) as s:
        yield s


def _answered(outputs: list[dict]) -> list:
    """The final message, built from what ``delegate_task`` answered (its raw text when it is not a result)."""
    try:
        said = mcp_result(outputs[-1])["result"]["summary"]
    except (AssertionError, KeyError, TypeError, ValueError):
        said = mcp_output_text(outputs[-1])
    return [Text(f"The child answered: {said}")]


async def test_L5_a_codex_parent_delegates_to_a_claude_child_and_waits_for_its_answer(stack, mock, claude_api):
    delegate = {"task": TASK, "role": ROLE, "provider": "claude", "mode": "wait", "timeout_seconds": 110}
    mock.on(
        PROMPT,
        [ToolSearch("treadle delegate a task")],
        [McpCall(MCP_NAMESPACE, "delegate_task", {**delegate, "client_request_id": "prime-1"})],
        [McpCall(MCP_NAMESPACE, "delegate_task", {**delegate, "client_request_id": "prime-1"})],  # a retry
        _answered,
    )
    async with api_client(stack, await tenant_token(stack, TENANT)) as client:
        parent = (await client.create_thread(title="codex parent", provider="codex"))["thread_id"]
        run_id = (await client.send(parent, PROMPT))["run_id"]
        run = await client.wait_run(run_id, timeout=180)
        assert run["status"] == "completed", run

        searched, delegated, retried = next(r.tool_outputs for r in reversed(mock.requests) if r.prompt == PROMPT)
        assert searched["type"] == "tool_search_output"
        done = mcp_result(delegated)  # what the Codex model received as the tool's output
        again = mcp_result(retried)  # the same client request id: the same child, not a second one
        assert (again["task_id"], again["run_id"], again["duplicate"]) == (done["task_id"], done["run_id"], True)
        assert again["result"] == done["result"] and not done["duplicate"]
        assert (done["finalised"], done["timed_out"], done["parent_thread_id"]) == (True, False, parent)
        assert done["result"] == {"status": "completed", "summary": ANSWER}
        assert done["parent_run_id"] == run_id
        assert [m["text"] for m in run["messages"] if m["role"] == "assistant"] == [f"The child answered: {ANSWER}"]

        doc = await client.get_thread(parent)
        (node,) = [n for r in doc["runs"] for n in r["nodes"] if n["owner"] == "app"]
        assert (node["kind"], node["status"], node["output"], node["child_thread_id"]) == (
            "subagent", "completed", ANSWER, done["task_id"],
        )  # fmt: skip
        (transfer,) = doc["transfers"]
        assert (transfer["type"], transfer["source_thread_id"], transfer["summary"]) == (
            "delegation_result", done["task_id"], ANSWER,
        )  # fmt: skip

        child = await client.get_thread(done["task_id"])
        assert child["thread"]["provider"] == "claude"
        assert child["lineage"]["relationship"] == "subagent" and child["lineage"]["parent_thread_id"] == parent
        assert child["lineage"]["source_point"] == {"thread_id": parent, "run_id": run_id, "node_id": node["id"]}
        assert [m["text"] for m in child["messages"] if m["role"] == "user"] == [f"{ROLE}\n\n{TASK}"]
        assert [r["status"] for r in child["runs"]] == ["completed"]
    # the child's runtime saw its role and task, and nothing of the parent's conversation
    child_prompts = [s.body for s in claude_api.seen if s.conversation is not None and TASK in s.conversation.prompt]
    assert child_prompts and not any(PROMPT in json.dumps(body) for body in child_prompts)
