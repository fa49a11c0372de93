"""L9.3 with the real Claude Code CLI (issue 17): a CLI lost under a turn is a lost attempt, retried like a lost
host; a graceful stop of the whole stack (SIGTERM to ``treadle up``) hands its runs over to the restarted stack."""

from __future__ import annotations

import pytest

from tests.claude.claude_stack import claude_env, claude_stack, mock_claude_api  # noqa: F401  (fixtures)
from tests.support.helpers import wait_for
from tests.support.provider_http import TreadleUp, kill_the_runtime, pending_request, tenant_client
from treadle.client.http import TreadleClient

pytestmark = pytest.mark.e2e
STEADY = " ".join(f"part{i:02d}" for i in range(30))  # the mock's whole #steady answer


@pytest.fixture(scope="module")
async def client(claude_stack):
    async with tenant_client(claude_stack, "claude-recovery") as c:
        yield c


async def streaming(client: TreadleClient, thread: str, run_id: str) -> None:
    async def some_text():
        doc = await client.get_thread(thread)
        return any(m["role"] == "assistant" and m.get("run_id") == run_id and m["text"] for m in doc["messages"])

    await wait_for(some_text, timeout=60, what="the answer streaming")


def final_texts(doc: dict, run: dict) -> list[str]:
    last = run["attempts"][-1]["id"]
    return [m["text"] for m in doc["messages"] if m.get("attempt_id") == last and m["role"] == "assistant"]


async def test_L9_3_kill_9_of_the_claude_cli_under_a_turn_is_a_lost_attempt_and_the_run_completes(
    client, claude_stack, mock_claude_api
):
    thread = (await client.create_thread(title="claude runtime kill", provider="claude"))["thread_id"]
    first = await client.send(thread, "#text before the kill")
    assert (await client.wait_run(first["run_id"], timeout=90))["status"] == "completed"
    sent = await client.send(thread, "#steady count for me")
    await streaming(client, thread, sent["run_id"])
    await kill_the_runtime(claude_stack, "/claude")

    run = await client.wait_run(sent["run_id"], timeout=90)
    assert run["status"] == "completed", run
    assert [(a["status"], a["reason"]) for a in run["attempts"]] == [
        ("lost", "initial"),
        ("completed", "provider_recovery"),
    ]
    doc = await client.get_thread(thread)
    assert final_texts(doc, run) == [STEADY]
    first, second = doc["sessions"]
    assert (first["status"], first["reason"]) == ("stopped", "provider_crashed")  # no longer shown live
    assert second["status"] == "live"
    # The resumed Claude session left the cut-off turn out: the model heard the message once (a cut-off first
    # turn cannot be: Claude Code resumes no session before its first turn).
    history = str(mock_claude_api.seen[-1].body["messages"])
    assert history.count("#steady count for me") == 1 and "before the kill" in history


async def test_L9_3_a_graceful_stop_of_the_whole_stack_hands_streaming_and_waiting_claude_runs_over(
    tmp_path, mock_claude_api
):
    up = TreadleUp(tmp_path / "state", claude_env(mock_claude_api))
    await up.start()
    try:
        async with TreadleClient(up.api_url, up.token, timeout=30) as client:
            streams = (await client.create_thread(title="streaming", provider="claude"))["thread_id"]
            waits = (await client.create_thread(title="waiting", provider="claude"))["thread_id"]
            runs = {waits: (await client.send(waits, "#bash write a file"))["run_id"]}
            asked = await pending_request(client, waits)
            # The answer streams for 3 s: the stop comes while it does.
            runs[streams] = (await client.send(streams, "#steady while stopping"))["run_id"]
            await streaming(client, streams, runs[streams])

        done = await up.restart_and_finish(waits, asked, runs)
        async with TreadleClient(up.api_url, up.token, timeout=30) as client:
            doc = await client.get_thread(streams)
    finally:
        if up.proc is not None and up.proc.returncode is None:
            await up.stop()
    for run in done.values():
        assert run["status"] == "completed", run
        assert [(a["status"], a["reason"]) for a in run["attempts"]] == [
            ("lost", "initial"),
            ("completed", "provider_recovery"),
        ]
    assert final_texts(doc, done[streams]) == [STEADY]
