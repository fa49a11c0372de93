"""Provider-native rollback of a Claude Code session over HTTP (L10.5): real workers, the real CLI against the
mock Messages API. Claude Code resumes a session at an earlier message (``--resume-session-at``, what the
adapter's ``rollback`` uses), so the session is kept and the next request to the model carries only the
kept turns. Rolling back every turn is what it cannot do: that takes the degradation path, saying why."""

from __future__ import annotations

import uuid

import pytest

from tests.claude.claude_stack import claude_stack, mock_claude_api  # noqa: F401  (fixtures)
from tests.claude.mock_api import MockMessagesApi
from tests.support.helpers import wait_for
from tests.support.provider_http import tenant_client
from treadle.client.http import ApiError, TreadleClient

pytestmark = pytest.mark.e2e
TENANT = "claude-rollback"


@pytest.fixture(scope="module")
async def client(claude_stack):
    async with tenant_client(claude_stack, TENANT) as c:
        yield c


async def run_to_end(client: TreadleClient, thread: str, text: str) -> dict:
    sent = await client.send(thread, text)
    run = await client.wait_run(sent["run_id"], timeout=90)
    assert run["status"] == "completed", run
    return run


async def roll_back(client: TreadleClient, thread: str, to: int) -> dict:
    """The answer waits for the provider (Claude Code restarts to roll back): a 503 from an impatient gateway
    is asked again with the same idempotency key, which names the same rollback."""
    key = uuid.uuid4().hex

    async def answered():
        try:
            return await client.rollback(thread, to, idempotency_key=key)
        except ApiError as exc:
            if exc.status == 503:
                return None
            raise

    rollback = await wait_for(answered, timeout=90, interval=0.2, what=f"rollback of {thread} answered")
    assert rollback["status"] == "completed", rollback
    return rollback


def workspace_of(stack, thread: str):
    return stack.state_dir / "workspaces" / TENANT / "threads" / thread


def history(api: MockMessagesApi) -> str:
    return str(api.seen[-1].body["messages"])


async def test_L10_5_rollback_resumes_the_same_claude_session_at_run_1_and_run_4_builds_on_it(
    client, claude_stack, mock_claude_api
):
    thread = (await client.create_thread(title="claude rollback", provider="claude", runtime_mode="full_access"))[
        "thread_id"
    ]
    await run_to_end(client, thread, "#text the first colour is teal")
    await run_to_end(client, thread, "#write the second run writes a file")
    await run_to_end(client, thread, "#text the third colour is mauve")
    assert (workspace_of(claude_stack, thread) / "written.txt").exists()
    [pth] = (await client.get_thread(thread))["provider_threads"]

    rollback = await roll_back(client, thread, 1)
    assert (rollback["provider_context"], rollback["provider_thread_id"], rollback["provider_turns"]) == (
        "rolled_back",
        pth["id"],
        2,
    ), rollback
    assert not (workspace_of(claude_stack, thread) / "written.txt").exists()

    run4 = await run_to_end(client, thread, "#text which colours do you know")
    assert run4["ordinal"] == 4 and run4["handoff_ids"] == []
    assert run4["attempts"][-1]["provider_thread_id"] == pth["id"]
    doc = await client.get_thread(thread)
    assert [p["native_ref"] for p in doc["provider_threads"]] == [pth["native_ref"]]  # the same Claude session
    seen = history(mock_claude_api)
    assert "the first colour is teal" in seen and "Mock Claude heard: #text the first colour" in seen
    assert "the second run writes a file" not in seen and "mauve" not in seen


async def test_L10_5_rolling_back_every_claude_turn_degrades_to_a_fresh_session_with_the_reason(
    client, mock_claude_api
):
    thread = (await client.create_thread(title="claude rollback to 0", provider="claude"))["thread_id"]
    await run_to_end(client, thread, "#text the only colour is ochre")
    [pth] = (await client.get_thread(thread))["provider_threads"]

    rollback = await roll_back(client, thread, 0)
    assert rollback["provider_context"] == "divergent"
    assert "cannot resume a session before its first turn" in rollback["provider_error"]

    run2 = await run_to_end(client, thread, "#text anything to recall")
    assert run2["attempts"][-1]["provider_thread_id"] != pth["id"]  # a fresh session, told nothing
    assert run2["handoff_ids"] == []
    assert "ochre" not in history(mock_claude_api)
