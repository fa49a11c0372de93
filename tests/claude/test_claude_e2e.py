"""Claude Code through Treadle's HTTP API with real workers: the provider host runs the real CLI against
the mock Messages API of this test process."""

from __future__ import annotations

import pytest

from tests.claude.claude_stack import claude_stack, mock_claude_api  # noqa: F401  (fixtures)
from tests.support.helpers import wait_for
from tests.support.provider_http import tenant_client
from treadle.client.http import TreadleClient

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def client(claude_stack):
    async with tenant_client(claude_stack, "claude-e2e") as c:
        yield c


async def run_to_end(client: TreadleClient, thread: str, text: str) -> dict:
    sent = await client.send(thread, text)
    return await client.wait_run(sent["run_id"], timeout=90)


def replies(doc: dict, run_id: str) -> list[str]:
    return [m["text"] for m in doc["messages"] if m["role"] == "assistant" and m.get("run_id") == run_id]


async def test_L2_3_a_claude_run_completes_with_its_reply_and_a_checkpoint(client):
    thread = (await client.create_thread(title="claude plain", provider="claude"))["thread_id"]
    run = await run_to_end(client, thread, "#text hello from the API")

    assert run["status"] == "completed", run
    doc = await client.get_thread(thread)
    assert replies(doc, run["id"]) == ["Mock Claude heard: #text hello from the API"]
    checkpoint = next(c for c in doc["checkpoints"] if c.get("run_id") == run["id"])
    assert checkpoint["status"] == "completed"
    (pth,) = doc["provider_threads"]
    assert pth["provider"] == "claude" and len(pth["native_ref"]) == 36  # Claude Code's session id


async def test_L9_3_after_kill_9_of_the_provider_host_the_next_message_resumes_the_same_claude_session(
    client, claude_stack, mock_claude_api
):
    thread = (await client.create_thread(title="claude resume", provider="claude"))["thread_id"]
    first = await run_to_end(client, thread, "#text the password is swordfish")
    assert first["status"] == "completed", first
    before = (await client.get_thread(thread))["provider_threads"]

    restarts = claude_stack.processes.restarts("provider-host")
    await claude_stack.processes.kill("provider-host")
    await wait_for(
        lambda: claude_stack.processes.restarts("provider-host") > restarts, timeout=30, what="provider host restarted"
    )
    await claude_stack.wait_ready(names=["provider-host"])

    second = await run_to_end(client, thread, "#text what is the password")
    assert second["status"] == "completed", second
    doc = await client.get_thread(thread)
    assert [(p["id"], p["native_ref"]) for p in doc["provider_threads"]] == [(p["id"], p["native_ref"]) for p in before]
    assert len(doc["sessions"]) == 2 and doc["sessions"][0]["status"] == "stopped"
    # The model saw the first exchange again: Claude Code resumed its own session, it did not start over.
    history = str(mock_claude_api.seen[-1].body["messages"])
    assert "the password is swordfish" in history and "Mock Claude heard: #text the password" in history


async def test_L9_3_a_run_cut_off_by_a_provider_host_crash_is_retried_on_the_resumed_session_once(
    client, claude_stack, mock_claude_api
):
    thread = (await client.create_thread(title="claude crash mid-run", provider="claude"))["thread_id"]
    await run_to_end(client, thread, "#text before the crash")
    sent = await client.send(thread, "#steady a three second answer")

    async def streaming():
        doc = await client.get_thread(thread)
        return any(m["role"] == "assistant" and m.get("run_id") == sent["run_id"] for m in doc["messages"])

    await wait_for(streaming, timeout=60, what="the answer streaming")
    restarts = claude_stack.processes.restarts("provider-host")
    await claude_stack.processes.kill("provider-host")
    await wait_for(
        lambda: claude_stack.processes.restarts("provider-host") > restarts, timeout=30, what="provider host restarted"
    )

    run = await client.wait_run(sent["run_id"], timeout=90)
    assert run["status"] == "completed", run
    assert [a["status"] for a in run["attempts"]] == ["lost", "completed"]
    doc = await client.get_thread(thread)
    final = [
        m for m in doc["messages"] if m.get("attempt_id") == run["attempts"][-1]["id"] and m["role"] == "assistant"
    ]
    assert [m["text"] for m in final] == [" ".join(f"part{i:02d}" for i in range(30))]
    # Claude's conversation has the message once: the cut-off turn was left out when the session resumed.
    history = str(mock_claude_api.seen[-1].body["messages"])
    assert history.count("#steady a three second answer") == 1 and "before the crash" in history


async def test_L2_5_an_api_error_fails_the_run_with_the_providers_message_and_the_next_run_works(client):
    thread = (await client.create_thread(title="claude error", provider="claude"))["thread_id"]
    failed = await run_to_end(client, thread, "#error now")

    assert failed["status"] == "failed", failed
    assert "mock refuses this request" in failed["error"]
    after = await run_to_end(client, thread, "#text and now")
    assert after["status"] == "completed", after
    assert after["checkpoint_id"] is not None


async def test_L12_2_claude_todos_are_the_runs_todo_list_and_a_subagent_nests_in_the_run_graph(client):
    thread = (await client.create_thread(title="claude graph", provider="claude", runtime_mode="full_access"))[
        "thread_id"
    ]
    todo = await run_to_end(client, thread, "#todo plan the work")
    assert todo["status"] == "completed", todo
    doc = await client.get_thread(thread)
    (plan,) = [p for p in doc["plans"] if p["run_id"] == todo["id"]]
    assert plan["kind"] == "todo_list" and plan["root"] and plan["status"] == "final"
    assert todo["progress"] == {"done": 1, "total": 3}  # the root run's todo list is its progress (L12.2)
    assert plan["node_id"] == next(n["id"] for n in todo["nodes"] if n["kind"] == "root_turn")
    assert [(i["text"], i["status"]) for i in plan["items"]] == [
        ("Read the code", "completed"),
        ("Write the fix", "in_progress"),
        ("Run the tests", "pending"),
    ]

    delegated = await run_to_end(client, thread, "#subagent delegate it")
    assert delegated["status"] == "completed", delegated
    nodes = {n["id"]: n for n in delegated["nodes"]}
    (agent,) = [n for n in nodes.values() if n["kind"] == "subagent"]
    assert nodes[agent["parent_id"]]["kind"] == "root_turn" and agent["status"] == "completed"
    (command,) = [n for n in nodes.values() if n["kind"] == "tool" and n["parent_id"] == agent["id"]]
    assert command["status"] == "completed" and command["output"] == "from-sub"
