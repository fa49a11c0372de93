"""L5.5: a provider-backed handoff summary written by the real Claude Code CLI (mock Messages API): one turn in
an empty scratch workspace, its conversation not kept in the tenant's store."""

from __future__ import annotations

import pytest

from tests.claude.mock_api import MockMessagesApi
from treadle.core.lineage import summarise as sm
from treadle.provider_host import summaries
from treadle.providers import protocol as hp

pytestmark = pytest.mark.e2e


@pytest.fixture
async def api():
    async with MockMessagesApi() as server:
        yield server


async def test_L5_5_claude_writes_a_summary_and_its_conversation_is_not_kept(api, tmp_path, monkeypatch):
    threads = tmp_path / "claude-threads"
    for name, value in {
        "TREADLE_CLAUDE_BASE_URL": api.url,
        "TREADLE_CLAUDE_API_KEY": "sk-ant-mock-000",
        "TREADLE_CLAUDE_MAX_RETRIES": "0",
        "TREADLE_CLAUDE_THREADS_DIR": str(threads),
    }.items():
        monkeypatch.setenv(name, value)
    prompt = sm.provider_prompt("## Run 1 (completed, on claude)\nUser asked: write the claude parser", 2_000)
    reply = await summaries.summarise(
        hp.Summarise(tenant="summaryco", provider="claude", text=prompt, timeout=90), tmp_path / "summaries"
    )
    assert isinstance(reply, hp.Summary), reply
    assert reply.text.startswith("Mock Claude heard: ") and reply.text.endswith("</conversation-record>")
    [asked] = [s for s in api.seen if s.conversation is not None and s.conversation.prompt.strip() == prompt]
    assert "write the claude parser" in str(asked.body["messages"])
    assert not list((tmp_path / "summaries").iterdir())  # the scratch workspace and runtime files are gone
    assert not list(threads.glob("**/*.jsonl"))  # the summary's conversation is not kept
