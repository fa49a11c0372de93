"""Native fork of a Claude Code conversation over HTTP (issue 5, L6.2): real workers, the real CLI through
claude-agent-sdk and the mock Messages API. What the fork's conversation holds is read from what the mock
model receives."""

from __future__ import annotations


import pytest

from mock_api import MockMessagesApi, _texts
from claude_stack import claude_stack, mock_claude_api, tenant_client  # noqa: F401  (fixtures)
from treadle.client.http import TreadleClient

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def client(claude_stack):
    async with tenant_client(claude_stack, "claude-fork") as c:
        yield c


async def run_to_end(client: TreadleClient, thread: str, text: str) -> dict:
    sent = await client.send(thread, text)
    run = await client.wait_run(sent["run_id"], timeout=90)
    assert run["status"] == "completed", run
    return run


def prompts_sent_with(api: MockMessagesApi, prompt: str) -> list[str]:
    """The user prompts of the conversation the model was first given when ``prompt`` was the newest, oldest
    first."""
    body = next(s.body for s in api.seen if s.conversation is not None and s.conversation.prompt == prompt)
    return [t for m in body["messages"] if m.get("role") == "user" for t in _texts(m["content"]) if t.startswith("#")]


def workspace_of(stack, thread: str):
    return stack.state_dir / "workspaces" / "claude-fork" / "threads" / thread


def history(doc: dict) -> list[tuple]:
    return [(r["id"], r["status"]) for r in doc["runs"]] + [(m["role"], m["text"]) for m in doc["messages"]] + \
        [(p["id"], p["native_ref"], p["covered_ordinals"]) for p in doc["provider_threads"]]


async def test_L6_2_a_claude_fork_from_run_2_of_3_is_a_native_fork_session_holding_turns_1_and_2(
        client, mock_claude_api, claude_stack):
    source = (await client.create_thread(title="claude fork source", provider="claude",
                                         runtime_mode="full_access"))["thread_id"]
    runs = [await run_to_end(client, source, f"#text claude source {n}") for n in (1, 2, 3)]
    before = await client.get_thread(source)
    [source_pth] = before["provider_threads"]

    child = (await client.fork(source, "run", runs[1]["id"], title="claude tangent"))["thread_id"]
    first = await run_to_end(client, child, "#bash on the claude fork")
    assert first["provider"] == "claude" and first["handoff_ids"] == []  # no portable context: the fork is native

    doc = await client.get_thread(child)
    [transfer] = doc["transfers"]
    assert (transfer["status"], transfer["fidelity"], transfer["source_point"]["run_id"]) == \
        ("consumed", "native", runs[1]["id"])
    [resolved] = doc["start_contexts"]
    assert resolved["fork_native_ref"] == source_pth["native_ref"]
    assert resolved["fork_at_turn_ref"] == runs[1]["attempts"][-1]["native_turn_ref"]
    [fork_pth] = doc["provider_threads"]
    assert fork_pth["provider"] == "claude" and fork_pth["native_ref"] not in ("", None, source_pth["native_ref"])
    assert len(fork_pth["native_ref"]) == 36  # a Claude Code session id of its own (fork_session)

    # The fork's conversation holds the source's turns up to run 2, nothing after, and no handoff text.
    assert prompts_sent_with(mock_claude_api, "#bash on the claude fork") == \
        ["#text claude source 1", "#text claude source 2", "#bash on the claude fork"]
    # The forked session works in the fork's own workspace (L6.5), never the source's.
    assert (workspace_of(claude_stack, child) / "bash.txt").read_text() == "hi\n"
    assert not (workspace_of(claude_stack, source) / "bash.txt").exists()
    assert [f["path"] for f in first["checkpoint"]["files"]] == ["bash.txt"]

    # The source is unchanged, and its own next turn still sees run 3 and not the fork's.
    assert history(await client.get_thread(source)) == history(before)
    await run_to_end(client, source, "#text claude source 4")
    assert [p["native_ref"] for p in (await client.get_thread(source))["provider_threads"]] == [source_pth["native_ref"]]
    assert prompts_sent_with(mock_claude_api, "#text claude source 4") == \
        ["#text claude source 1", "#text claude source 2", "#text claude source 3", "#text claude source 4"]
