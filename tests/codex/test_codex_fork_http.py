"""Native fork of a Codex thread over HTTP (issue 5, L6.2): real workers, the real ``codex`` binary and the mock
Responses API. What Codex holds in the fork's history is read from what the mock model receives."""

from __future__ import annotations

import pytest

from tests.codex.codex_mock import Exec, Text
from tests.codex.codex_support import TENANT
from tests.support.provider_http import history, native_fork_thread, workspace_of

pytestmark = pytest.mark.e2e


def user_inputs(seen) -> list[str]:
    """The user messages Codex sent the model in one request, oldest first (its history plus the new prompt)."""
    return [
        c.get("text", "")
        for item in seen.body["input"]
        if item.get("role") == "user"
        for c in item.get("content") or []
        if c.get("type") == "input_text"
    ]


def request_for(mock, prompt: str):
    [seen] = [r for r in mock.requests if r.prompt == prompt]
    return seen


async def test_L6_2_a_codex_fork_from_run_2_of_3_is_a_native_codex_fork_holding_turns_1_and_2(
    client, mock, codex_stack
):
    for n, word in enumerate(("alpha", "bravo", "charlie"), 1):
        mock.on(f"codex fork source {n}", [Text(f"Noted {word}.")])
    mock.on("codex fork: what did we say", [Exec("echo forked > forked.txt")], [Text("Alpha and bravo.")])
    mock.on("codex fork source: and now", [Text("Alpha, bravo, charlie.")])
    source = (await client.create_thread(title="codex fork source", provider="codex", runtime_mode="full_access"))[
        "thread_id"
    ]
    runs = []
    for n in (1, 2, 3):
        sent = await client.send(source, f"codex fork source {n}")
        runs.append(await client.wait_run(sent["run_id"], timeout=60))
        assert runs[-1]["status"] == "completed", runs[-1]
    before = await client.get_thread(source)
    [source_pth] = before["provider_threads"]

    forked = await client.fork(source, "run", runs[1]["id"], title="codex tangent")
    child = forked["thread_id"]
    sent = await client.send(child, "codex fork: what did we say")
    first = await client.wait_run(sent["run_id"], timeout=60)
    assert first["status"] == "completed", first
    assert first["provider"] == "codex" and first["handoff_ids"] == []  # no portable context: the fork is native

    native_fork_thread(await client.get_thread(child), runs[1], source_pth, "codex")

    # Codex's fork holds the source's turns up to run 2 and nothing after it, and no handoff text.
    seen = user_inputs(next(r for r in mock.requests if r.prompt == "codex fork: what did we say"))
    assert [t for t in seen if t.startswith("codex fork")] == [
        "codex fork source 1",
        "codex fork source 2",
        "codex fork: what did we say",
    ]
    assert not any("# Context" in t for t in seen)
    # The forked Codex thread works in the fork's own workspace (L6.5), never the source's.
    assert (workspace_of(codex_stack, TENANT, child) / "forked.txt").read_text() == "forked\n"
    assert not (workspace_of(codex_stack, TENANT, source) / "forked.txt").exists()
    assert [f["path"] for f in first["checkpoint"]["files"]] == ["forked.txt"]

    # The source is unchanged: same runs, same provider thread; its own next turn still sees run 3, not the fork.
    after = await client.get_thread(source)
    assert history(after) == history(before)
    again = await client.send(source, "codex fork source: and now")
    assert (await client.wait_run(again["run_id"], timeout=60))["status"] == "completed"
    assert [p["native_ref"] for p in (await client.get_thread(source))["provider_threads"]] == [
        source_pth["native_ref"]
    ]
    seen = user_inputs(request_for(mock, "codex fork source: and now"))
    assert [t for t in seen if t.startswith("codex fork")] == [
        "codex fork source 1",
        "codex fork source 2",
        "codex fork source 3",
        "codex fork source: and now",
    ]
