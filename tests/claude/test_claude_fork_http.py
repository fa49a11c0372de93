"""Native fork of a Claude Code conversation over HTTP (issue 5, L6.2): real workers, the real CLI through
claude-agent-sdk and the mock Messages API. What the fork's conversation holds is read from what the mock
model receives."""

from __future__ import annotations

import pytest

from tests.claude.claude_stack import claude_stack, mock_claude_api  # noqa: F401  (fixtures)
from tests.claude.mock_api import MockMessagesApi, _texts
from tests.support.provider_http import history, native_fork_thread, tenant_client, workspace_of
from treadle.client.http import TreadleClient

pytestmark = pytest.mark.e2e
TENANT = "claude-fork"


@pytest.fixture(scope="module")
async def client(claude_stack):
    async with tenant_client(claude_stack, TENANT) as c:
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


async def test_L6_2_a_claude_fork_from_run_2_of_3_is_a_native_fork_session_holding_turns_1_and_2(
    client, mock_claude_api, claude_stack
):
    source = (await client.create_thread(title="claude fork source", provider="claude", runtime_mode="full_access"))[
        "thread_id"
    ]
    runs = [await run_to_end(client, source, f"#text claude source {n}") for n in (1, 2, 3)]
    before = await client.get_thread(source)
    [source_pth] = before["provider_threads"]

    child = (await client.fork(source, "run", runs[1]["id"], title="claude tangent"))["thread_id"]
    first = await run_to_end(client, child, "#bash on the claude fork")
    assert first["provider"] == "claude" and first["handoff_ids"] == []  # no portable context: the fork is native

    fork_pth = native_fork_thread(await client.get_thread(child), runs[1], source_pth, "claude")
    assert len(fork_pth["native_ref"]) == 36  # a Claude Code session id of its own (fork_session)

    # The fork's conversation holds the source's turns up to run 2, nothing after, and no handoff text.
    assert prompts_sent_with(mock_claude_api, "#bash on the claude fork") == [
        "#text claude source 1",
        "#text claude source 2",
        "#bash on the claude fork",
    ]
    # The forked session works in the fork's own workspace (L6.5), never the source's.
    assert (workspace_of(claude_stack, TENANT, child) / "bash.txt").read_text() == "hi\n"
    assert not (workspace_of(claude_stack, TENANT, source) / "bash.txt").exists()
    assert [f["path"] for f in first["checkpoint"]["files"]] == ["bash.txt"]

    # The source is unchanged, and its own next turn still sees run 3 and not the fork's.
    assert history(await client.get_thread(source)) == history(before)
    await run_to_end(client, source, "#text claude source 4")
    assert [p["native_ref"] for p in (await client.get_thread(source))["provider_threads"]] == [
        source_pth["native_ref"]
    ]
    assert prompts_sent_with(mock_claude_api, "#text claude source 4") == [
        "#text claude source 1",
        "#text claude source 2",
        "#text claude source 3",
        "#text claude source 4",
    ]
