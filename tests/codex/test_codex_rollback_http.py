"""Provider-native rollback of a Codex thread over HTTP (L10.5): real workers, the real ``codex`` binary and the
mock Responses API. Codex reverts its thread (``thread/revert``), the checkpoint service the files; the next
request to the model carries only the kept history."""

from __future__ import annotations

import nats
import pytest

from tests.codex.codex_mock import Exec, Text
from tests.codex.codex_support import roll_back
from tests.support.helpers import wait_for
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient

pytestmark = pytest.mark.e2e


def workspace_of(codex_stack, thread: str):
    return codex_stack.state_dir / "workspaces" / "codexco" / "threads" / thread


def files(codex_stack, thread: str) -> set[str]:
    root = workspace_of(codex_stack, thread)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


async def three_codex_runs(client, mock, name: str) -> tuple[str, list[dict]]:
    runs = []
    thread = (await client.create_thread(title=f"codex rollback {name}", provider="codex", runtime_mode="full_access"))[
        "thread_id"
    ]
    for n in ("one", "two", "three"):
        prompt = f"{name}: write {n}.txt"
        mock.on(prompt, [Exec(f"echo {n} > {n}.txt")], [Text(f"Wrote {n}.txt.")])
        sent = await client.send(thread, prompt)
        run = await client.wait_run(sent["run_id"], timeout=90)
        assert run["status"] == "completed", run
        runs.append(run)
    return thread, runs


def history(mock) -> str:
    return str(mock.requests[-1].body["input"])


async def test_L10_5_rollback_reverts_the_live_codex_thread_and_the_files(client, codex_stack, mock):
    thread, runs = await three_codex_runs(client, mock, "live")
    assert files(codex_stack, thread) == {"one.txt", "two.txt", "three.txt"}
    doc = await client.get_thread(thread)
    [pth] = doc["provider_threads"]

    rollback = await roll_back(client, thread, 1)
    assert (rollback["provider_context"], rollback["provider_thread_id"], rollback["provider_turns"]) == (
        "rolled_back",
        pth["id"],
        2,
    ), rollback
    assert files(codex_stack, thread) == {"one.txt"}

    mock.on("live: what is in the workspace", [Text("Only one.txt.")])
    sent = await client.send(thread, "live: what is in the workspace")
    run4 = await client.wait_run(sent["run_id"], timeout=90)
    assert run4["status"] == "completed" and run4["handoff_ids"] == []
    doc = await client.get_thread(thread)
    assert [p["native_ref"] for p in doc["provider_threads"]] == [pth["native_ref"]]  # the same Codex thread
    assert run4["attempts"][-1]["provider_thread_id"] == pth["id"]
    seen = history(mock)  # what Codex sent the model: run 1's turn, not the reverted ones
    assert "live: write one.txt" in seen and "Wrote one.txt." in seen
    assert "write two.txt" not in seen and "write three.txt" not in seen


async def test_L10_5_a_codex_thread_without_a_live_session_is_resumed_and_reverted(client, codex_stack, mock):
    thread, runs = await three_codex_runs(client, mock, "idle")
    doc = await client.get_thread(thread)
    [pth] = doc["provider_threads"]
    session = doc["sessions"][-1]
    nc = await nats.connect(codex_stack.nats_url)
    try:
        stopped = await HostClient(nc, 30.0).verb(
            session["host_id"], "session.stop", hp.StopTurn(session_id=session["id"], attempt_id="")
        )
    finally:
        await nc.close()
    assert isinstance(stopped, hp.TurnAccepted)  # released, as the idle reaper would: no codex process holds it

    async def released():
        return (await client.get_thread(thread))["sessions"][-1]["status"] == "stopped"

    await wait_for(released, timeout=30, what="the session reported stopped")

    rollback = await roll_back(client, thread, 1)
    assert (rollback["provider_context"], rollback["provider_thread_id"], rollback["provider_turns"]) == (
        "rolled_back",
        pth["id"],
        2,
    ), rollback
    assert files(codex_stack, thread) == {"one.txt"}

    mock.on("idle: what is in the workspace", [Text("Only one.txt.")])
    sent = await client.send(thread, "idle: what is in the workspace")
    run4 = await client.wait_run(sent["run_id"], timeout=90)
    assert run4["status"] == "completed" and run4["attempts"][-1]["provider_thread_id"] == pth["id"]
    seen = history(mock)
    assert "idle: write one.txt" in seen and "write two.txt" not in seen and "write three.txt" not in seen
