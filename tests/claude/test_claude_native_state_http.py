"""Issue 35 with the real Claude Code CLI: a session's transcript is kept off the node after each turn, so a
provider host that lost its disk still resumes the Claude session natively."""

from __future__ import annotations

import pytest

from tests.claude.claude_stack import claude_stack, mock_claude_api  # noqa: F401  (fixtures)
from tests.support.native_states import kept, lose_the_node
from tests.support.provider_http import tenant_client

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def client(claude_stack):
    async with tenant_client(claude_stack, "claude-native") as c:
        yield c


async def test_L9_2_a_claude_session_resumes_natively_after_its_host_lost_its_disk(
    client, claude_stack, mock_claude_api
):
    thread = (await client.create_thread(title="native state", provider="claude"))["thread_id"]
    first = await client.send(thread, "remember the word kumquat")
    assert (await client.wait_run(first["run_id"], timeout=90))["status"] == "completed"
    pth = (await client.get_thread(thread))["provider_threads"][0]["id"]
    await kept(claude_stack, "claude-native", "claude", pth, "Mock Claude heard: remember the word kumquat")

    # The node is lost: its host and runtime die at once, and every runtime file of the host goes with its disk
    await lose_the_node(claude_stack, claude_stack.state_dir / "provider-runtimes")

    since = len(mock_claude_api.seen)
    second = await client.send(thread, "which word did I ask you to remember")
    run = await client.wait_run(second["run_id"], timeout=90)
    assert run["status"] == "completed", run
    doc = await client.get_thread(thread)
    assert len(doc["provider_threads"]) == 1, doc["provider_threads"]  # resumed, not replaced (L4.2/L9.4)
    # The model sees the earlier turn as the conversation's own messages (the CLI read the restored transcript)
    asked = [s.body["messages"] for s in mock_claude_api.seen[since:] if "which word" in str(s.body["messages"])]
    assert asked, [str(s.body["messages"])[-300:] for s in mock_claude_api.seen[since:]]
    assert "Mock Claude heard: remember the word kumquat" in str(asked[0][:-1]), asked[0]
