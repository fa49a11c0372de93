"""Issue 21, part 3 with a real runtime: a task delegated through ``/mcp`` to a Claude child (the real Claude
Code CLI on a provider host, against the mock Messages API) gets only its role and task, and its last answer is
the result transfer that finalises the parent run's app-owned node."""

from __future__ import annotations

import pytest

from tests.claude.claude_stack import claude_stack, mock_claude_api  # noqa: F401  (fixtures)
from tests.support.api import Api
from tests.support.mcp_client import call, mcp_session
from tests.support.provider_http import tenant_token
from tests.support.scripts import HANG, script

pytestmark = pytest.mark.e2e


async def test_L5_a_claude_child_answers_the_task_and_its_answer_finalises_the_parent_node(claude_stack):  # noqa: F811
    api = Api(claude_stack.api_url, await tenant_token(claude_stack, "delegator"), "delegator")
    try:
        parent = await api.create_thread(title="parent")
        parent_run = (await api.send(parent, "orchestrate", script=script(HANG, profile="full")))["run_id"]
        await api.wait_running(parent_run)
        async with mcp_session(api.client.base_url, api.token) as mcp:
            done = await call(
                mcp, "delegate_task", parent_thread_id=parent, task="name one prime", role="Answer in one word.",
                provider="claude", mode="wait", timeout_seconds=120,
            )  # fmt: skip
            assert done["finalised"], done
            expected = "Mock Claude heard: Answer in one word.\n\nname one prime"
            assert done["result"] == {"status": "completed", "summary": expected}
            child = await api.thread(done["task_id"])
            assert child["thread"]["provider"] == "claude" and child["lineage"]["relationship"] == "subagent"
            (node,) = [n for n in (await api.run(parent_run))["nodes"] if n["owner"] == "app"]
            assert (node["status"], node["output"], node["input"]["provider"]) == ("completed", expected, "claude")
            await call(mcp, "thread_interrupt", run_id=parent_run)
            await api.wait_run(parent_run, "interrupted")
    finally:
        await api.close()
