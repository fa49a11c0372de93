"""ACP providers across runs over HTTP (issue 22): the session resumes (session/load) after the provider host
was killed, a thread switches Codex -> ACP agent -> Codex with the context handed over, and a fork of an ACP
thread. Real workers, real agents in the sandbox, mocks of the model APIs on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.codex.codex_mock import Text
from tests.support.helpers import wait_for
from tests.support.provider_http import user_texts
from treadle.client.http import TreadleClient

pytestmark = pytest.mark.e2e


def assistant_texts(run: dict) -> list[str]:
    return [m["text"] for m in run["messages"] if m["role"] == "assistant" and m["text"]]


def saved_session(homes_root: Path, native_ref: str, text: str) -> list[Path]:
    """The agent's own session files (Claude Code's transcript, Codex's rollout) under the test's agent homes
    that name the session and hold ``text``."""
    needle = json.dumps(text, ensure_ascii=False)[1:-1]  # as it stands inside a JSON line
    return [p for p in homes_root.rglob(f"*{native_ref}*.jsonl") if needle in p.read_text(errors="replace")]


async def run_to_end(client: TreadleClient, thread: str, text: str, **kw) -> dict:
    sent = await client.send(thread, text, **kw)
    return await client.wait_run(sent["run_id"], timeout=120)


@pytest.mark.parametrize("provider", ["acp-claude", "acp-codex"])
async def test_L9_3_an_acp_session_resumes_with_its_history_after_the_provider_host_is_killed(
    client, acp_stack, claude_api, codex_api, homes_root, provider
):
    first_text = "#text remember the word heron" if provider == "acp-claude" else "remember the word heron"
    later_text = "#text which word was it" if provider == "acp-claude" else "which word was it"
    thread = (await client.create_thread(title=f"{provider} resume", provider=provider))["thread_id"]
    first = await run_to_end(client, thread, first_text)
    assert first["status"] == "completed", first
    [before] = (await client.get_thread(thread))["provider_threads"]
    # The agents write their sessions after answering (Claude Code flushes its transcript on a 100 ms timer): a
    # host killed before that loses the session, and the next run correctly gets a replacement with a handoff.
    # This test is about a session that was saved, so it kills the host once the agent's file holds the reply.
    [reply] = assistant_texts(first)
    await wait_for(lambda: saved_session(homes_root, before["native_ref"], reply), timeout=30, what="session saved")

    restarts = acp_stack.processes.restarts("provider-host")
    await acp_stack.processes.kill("provider-host")
    await wait_for(
        lambda: acp_stack.processes.restarts("provider-host") > restarts, timeout=30, what="provider host restarted"
    )
    later = await run_to_end(client, thread, later_text)
    assert later["status"] == "completed", later
    doc = await client.get_thread(thread)
    # L9.3: a new session, the same provider thread: the agent loaded its session (no replacement, no handoff)
    assert [p["native_ref"] for p in doc["provider_threads"]] == [before["native_ref"]]
    assert later["handoff_ids"] == []
    assert len(doc["sessions"]) == 2 and doc["sessions"][-1]["status"] == "live"
    # the model got the earlier turn back from the agent's own session store
    if provider == "acp-claude":
        assert "remember the word heron" in str(claude_api.seen[-1].body["messages"])
    else:
        last = codex_api.requests[-1]
        assert last.prompt == later_text and "remember the word heron" in str(last.body["input"])


async def test_L5_2_L5_3_switching_codex_to_an_acp_agent_and_back_hands_the_context_over(client, codex_api, claude_api):
    codex_api.on("plan the lexer", [Text("Agreed: the lexer goes first.")])
    codex_api.on("and now the parser", [Text("Parser next.")])
    thread = (await client.create_thread(title="codex then acp", provider="codex"))["thread_id"]
    planned = await run_to_end(client, thread, "plan the lexer")
    assert planned["status"] == "completed" and planned["provider"] == "codex", planned

    switched = await run_to_end(client, thread, "#text carry on with the lexer", provider="acp-claude")
    assert switched["status"] == "completed" and switched["provider"] == "acp-claude", switched
    [handoff_id] = switched["handoff_ids"]
    handoff = (await client.request("GET", f"/v1/handoffs/{handoff_id}")).json()
    assert handoff["to_provider"] == "acp-claude" and handoff["covered_ordinals"] == [1]
    assert "plan the lexer" in handoff["text"] and "Agreed: the lexer goes first." in handoff["text"]
    # L5.5: the ACP agent's model got exactly the stored handoff, then the user's message
    told = f"{handoff['text']}\n\n---\n\n#text carry on with the lexer"
    assert any(p.endswith(told) for p in claude_api.prompts())
    assert user_texts(switched) == ["#text carry on with the lexer"]  # the thread shows what the user wrote

    back = await run_to_end(client, thread, "and now the parser", provider="codex")
    assert back["status"] == "completed" and back["provider"] == "codex", back
    [delta_id] = back["handoff_ids"]
    delta = (await client.request("GET", f"/v1/handoffs/{delta_id}")).json()
    assert delta["covered_ordinals"] == [2] and "carry on with the lexer" in delta["text"]  # L5.3: only the delta
    doc = await client.get_thread(thread)
    assert sorted(p["provider"] for p in doc["provider_threads"]) == ["acp-claude", "codex"]  # Codex resumed its own


@pytest.mark.parametrize("provider", ["acp-claude", "acp-codex"])
async def test_L6_2_a_fork_of_an_acp_thread_continues_the_conversation(client, codex_api, provider):
    texts = (
        ("#text the colour is teal", "#text what colour") if provider == "acp-claude" else ("colour teal", "colour?")
    )
    source = (await client.create_thread(title=f"{provider} fork source", provider=provider))["thread_id"]
    run = await run_to_end(client, source, texts[0])
    assert run["status"] == "completed", run
    forked = await client.fork(source, "run", run["id"], title=f"{provider} fork")
    first = await run_to_end(client, forked["thread_id"], texts[1])
    assert first["status"] == "completed", first
    fork = await client.get_thread(forked["thread_id"])
    [transfer] = fork["transfers"]
    # a portable context: ACP's session/fork (claude-agent-acp only) cannot fork at a run's point
    assert (transfer["status"], transfer["fidelity"]) == ("consumed", "portable"), transfer
    [pth] = fork["provider_threads"]
    source_pth = (await client.get_thread(source))["provider_threads"][0]
    assert pth["provider"] == provider and pth["native_ref"] != source_pth["native_ref"]
