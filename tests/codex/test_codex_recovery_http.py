"""L9.3 with the real ``codex app-server`` (issue 17): a runtime process lost under a turn is a lost attempt,
retried like a lost host; a graceful stop of the whole stack hands its runs over to the restarted stack."""

from __future__ import annotations

import json

import pytest

from tests.codex.codex_mock import Exec, Stall, Text
from tests.codex.codex_support import codex_env
from tests.support.helpers import wait_for
from tests.support.provider_http import TreadleUp, kill_the_runtime, pending_request
from treadle.cli.config import DEV_TENANT
from treadle.client.http import TreadleClient
from treadle.providers.base import RECOVERY_NOTE

pytestmark = pytest.mark.e2e


async def stalled_on(mock, prompt: str) -> None:
    await wait_for(
        lambda: mock.stalled and any(r.prompt == prompt for r in mock.requests[-3:]),
        timeout=60,
        what=f"the model stream of {prompt!r} to stall",
    )


def told_after_recovery(mock, prompt: str, since: int) -> str:
    """What the model was sent when ``prompt``'s turn was retried (the first request for it after ``since``)."""
    return json.dumps(next(r.body["input"] for r in mock.requests[since:] if r.prompt == prompt))


def assert_told_a_failure_once(told: str, prompt: str) -> None:
    """L9.3: the retried turn tells the model that a failure cut the turn off, not the user, and the model sees
    the request once (the provider thread holds it from the cut-off turn)."""
    assert "interrupted the previous turn on purpose" not in told and "aborted by user" not in told, told
    assert told.count(json.dumps(RECOVERY_NOTE)) == 1, told
    assert told.count(json.dumps(prompt)) == 1, told


def assistant_texts(run: dict) -> list[str]:
    return [m["text"] for m in run["messages"] if m["role"] == "assistant" and m["text"]]


async def test_L9_3_kill_9_of_the_codex_app_server_under_a_turn_is_a_lost_attempt_and_the_run_completes(
    client, codex_stack, mock
):
    mock.on("count to three", [Text("One, two"), Stall()])
    thread = (await client.create_thread(title="codex runtime kill", provider="codex"))["thread_id"]
    sent = await client.send(thread, "count to three")
    await stalled_on(mock, "count to three")
    mock.on("count to three", [Text("One, two, three.")])  # what the retried attempt hears
    since = len(mock.requests)
    await kill_the_runtime(codex_stack, "app-server")

    run = await client.wait_run(sent["run_id"], timeout=90)
    assert run["status"] == "completed", run
    assert [(a["status"], a["reason"]) for a in run["attempts"]] == [
        ("lost", "initial"),
        ("completed", "provider_recovery"),
    ]
    assert assistant_texts(run)[-1] == "One, two, three."
    assert_told_a_failure_once(told_after_recovery(mock, "count to three", since), "count to three")
    doc = await client.get_thread(thread)
    first, second = doc["sessions"]
    assert (first["status"], first["reason"]) == ("stopped", "provider_crashed")  # no longer shown live
    assert second["status"] == "live"
    assert len(doc["provider_threads"]) == 1  # the same Codex thread, resumed


async def test_L9_3_a_graceful_stop_of_the_whole_stack_hands_streaming_and_waiting_codex_runs_over(
    tmp_path, mock, homes_root
):
    mock.on("stream until the stop", [Text("Streaming when"), Stall()])
    mock.on("write handed.txt", [Exec("echo handed > handed.txt")], [Text("Written after the restart.")])
    up = TreadleUp(tmp_path / "state", codex_env(mock, homes_root))
    await up.start()
    try:
        async with TreadleClient(up.api_url, up.token, timeout=30) as client:
            streaming = (await client.create_thread(title="streaming", provider="codex"))["thread_id"]
            waiting = (await client.create_thread(title="waiting", provider="codex"))["thread_id"]
            runs = {
                streaming: (await client.send(streaming, "stream until the stop"))["run_id"],
                waiting: (await client.send(waiting, "write handed.txt"))["run_id"],
            }
            await stalled_on(mock, "stream until the stop")
            asked = await pending_request(client, waiting)
            mock.on("stream until the stop", [Text("Streamed after the restart.")])

        since = len(mock.requests)
        done = await up.restart_and_finish(waiting, asked, runs)
    finally:
        if up.proc is not None and up.proc.returncode is None:
            await up.stop()
    for run in done.values():
        assert run["status"] == "completed", run
        assert [(a["status"], a["reason"]) for a in run["attempts"]] == [
            ("lost", "initial"),
            ("completed", "provider_recovery"),
        ]
    assert assistant_texts(done[streaming])[-1] == "Streamed after the restart."
    assert (workspace_of_dev(up, waiting) / "handed.txt").read_text() == "handed\n"
    # Issue 36 (10): a stop of the host cut both turns off as a crash would. Asked to stop, Codex had recorded
    # "The user interrupted the previous turn on purpose" and the waiting command "aborted by user", and a real
    # model then did not ask for the command again (restart_and_finish answered the approval asked again)
    for prompt in ("stream until the stop", "write handed.txt"):
        assert_told_a_failure_once(told_after_recovery(mock, prompt, since), prompt)


def workspace_of_dev(up: TreadleUp, thread: str):
    return up.state_dir / "workspaces" / DEV_TENANT / "threads" / thread
