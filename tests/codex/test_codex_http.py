"""Codex end to end: real workers over HTTP, the real ``codex`` binary, the mock model API (issue 7)."""

from __future__ import annotations

import asyncio

import pytest

from tests.codex.codex_mock import Exec, HttpError, PlanUpdate, Text
from tests.support.helpers import checkpoint_git, wait_for
from treadle.client.http import TreadleClient

pytestmark = pytest.mark.e2e


async def follow_until(client: TreadleClient, thread: str, run_id: str, seen: list) -> None:
    async for event in client.events(thread):
        seen.append(event)
        if (
            event.event in ("run.completed", "run.failed", "run.interrupted")
            and event.json()["data"]["run_id"] == run_id
        ):
            return


def native_refs(doc: dict) -> list[str]:
    return [p["native_ref"] for p in doc["provider_threads"]]


async def test_L2_1_a_codex_run_streams_and_completes_with_a_checkpoint(client, codex_stack, mock):
    mock.on(
        "write hello.txt",
        [Text("Writing it now.", chunks=3), Exec("echo hello > hello.txt")],
        [Text("Done: hello.txt says hello.", chunks=4)],
    )
    thread = (await client.create_thread(title="codex plain", provider="codex", runtime_mode="full_access"))[
        "thread_id"
    ]
    seen: list = []
    connected = asyncio.Event()

    async def follow():
        async for event in client.events(thread, connected=connected):
            seen.append(event)
            if event.event in ("run.completed", "run.failed"):
                return

    follower = asyncio.create_task(follow())
    await asyncio.wait_for(connected.wait(), 10)
    sent = await client.send(thread, "write hello.txt")
    await asyncio.wait_for(follower, 60)
    types = [e.event for e in seen]
    assert "run.completed" in types, types
    assert "live.delta" in types
    # the run's start: its run.started, or its first text carrying it (a fast model: issue 38)
    start = next(i for i, e in enumerate(seen) if e.event == "run.started" or "started" in e.json().get("data", {}))
    assert start < types.index("message.completed") < types.index("run.completed")
    run = await client.wait_run(sent["run_id"], timeout=30)
    assert [m["text"] for m in run["messages"] if m["role"] == "assistant"] == [
        "Writing it now.",
        "Done: hello.txt says hello.",
    ]
    checkpoint = run["checkpoint"]
    assert checkpoint["status"] == "completed"
    assert [(f["path"], f["change"]) for f in checkpoint["files"]] == [("hello.txt", "added")]
    shown = checkpoint_git(codex_stack.state_dir, "codexco", thread, "show", f"{checkpoint['ref']}:hello.txt")
    assert shown == "hello\n"
    doc = await client.get_thread(thread)
    tools = [n for r in doc["runs"] for n in r["nodes"] if n["title"] == "echo hello > hello.txt"]
    assert [n["status"] for n in tools] == ["completed"]
    assert not mock.connects


async def test_L9_2_kill_9_of_the_provider_host_then_the_next_message_resumes_the_same_codex_thread(
    client, codex_stack, mock
):
    mock.on("remember the colour teal", [Text("Teal, noted.")])
    mock.on("which colour was it", [Text("It was teal.")])
    thread = (await client.create_thread(title="codex resume", provider="codex"))["thread_id"]
    first = await client.send(thread, "remember the colour teal")
    assert (await client.wait_run(first["run_id"], timeout=60))["status"] == "completed"
    before = native_refs(await client.get_thread(thread))
    assert len(before) == 1

    restarts = codex_stack.processes.restarts("provider-host")
    await codex_stack.processes.kill("provider-host")
    await wait_for(
        lambda: codex_stack.processes.restarts("provider-host") > restarts, timeout=30, what="provider host restarted"
    )
    await codex_stack.wait_ready(names=["provider-host"])

    second = await client.send(thread, "which colour was it")
    run = await client.wait_run(second["run_id"], timeout=60)
    assert run["status"] == "completed", run
    assert [m["text"] for m in run["messages"] if m["role"] == "assistant"] == ["It was teal."]
    doc = await client.get_thread(thread)
    assert native_refs(doc) == before  # the same Codex thread, resumed
    history = str(mock.requests[-1].body["input"])
    assert "remember the colour teal" in history and "Teal, noted." in history
    assert any(s["status"] == "stopped" for s in doc["sessions"])  # the killed session was reported


async def test_L2_5_a_backend_failure_fails_the_run_with_the_provider_message_and_the_next_run_works(client, mock):
    mock.on("this will fail", [HttpError(500, "mock backend exploded")])
    mock.on("this will work", [Text("Back on track.")])
    thread = (await client.create_thread(title="codex failure", provider="codex"))["thread_id"]
    failed = await client.send(thread, "this will fail")
    run = await client.wait_run(failed["run_id"], timeout=60)
    assert run["status"] == "failed"
    assert "high demand" in run["error"]  # codex 0.171's own words for an HTTP 500 from its model API
    ok = await client.send(thread, "this will work")
    run = await client.wait_run(ok["run_id"], timeout=60)
    assert run["status"] == "completed"
    assert [m["text"] for m in run["messages"] if m["role"] == "assistant"] == ["Back on track."]


async def test_L11_1_a_codex_todo_list_and_approval_request_reach_the_thread_view(client, codex_stack, mock):
    """Answering over HTTP comes with the request endpoints; here: the request is opened, live and waiting."""
    mock.on(
        "careful now",
        [
            PlanUpdate("careful", [("ask first", "in_progress"), ("then act", "pending")]),
            Exec("echo careful > careful.txt"),
        ],
        [Text("Acted.")],
    )
    thread = (await client.create_thread(title="codex approval", provider="codex"))["thread_id"]
    sent = await client.send(thread, "careful now")

    async def pending():
        doc = await client.get_thread(thread)
        return doc if any(r["status"] == "pending" for r in doc["requests"]) else None

    doc = await wait_for(pending, timeout=60, what="a pending approval request")
    [request] = doc["requests"]
    workspace = (codex_stack.state_dir / "workspaces" / "codexco" / "threads" / thread).resolve()
    assert request["kind"] == "command" and request["prompt"] == f"Run `echo careful > careful.txt` in {workspace}"
    [todo] = [p for p in doc["plans"] if p["kind"] == "todo_list"]
    assert [(i["text"], i["status"]) for i in todo["items"]] == [("ask first", "in_progress"), ("then act", "pending")]
    run = await client.get_run(sent["run_id"])
    assert run["status"] == "waiting"
    workspace = codex_stack.state_dir / "workspaces" / "codexco" / "threads" / thread
    assert not (workspace / "careful.txt").exists()


async def test_a_stack_whose_state_dir_is_under_tmp_runs_codex_without_a_home_root_setting(tmp_path, mock, homes_root):
    """Issue 25: ``treadle up --state-dir /tmp/x`` (no TREADLE_CODEX_HOME_ROOT) runs Codex sessions: their homes
    go under the user's cache directory (here XDG_CACHE_HOME, outside /tmp), never under the state dir."""
    from tests.codex.codex_support import codex_env
    from tests.support.provider_http import tenant_client
    from treadle.cli.stack import Stack

    assert tmp_path.resolve().is_relative_to("/tmp")
    env = {k: v for k, v in codex_env(mock, homes_root).items() if k != "TREADLE_CODEX_HOME_ROOT"}
    env["XDG_CACHE_HOME"] = str(homes_root / "xdg-cache")
    mock.on("say hi from tmp", [Text("Hi from a /tmp state dir.")])
    async with Stack(tmp_path / "state", env=env) as stack, tenant_client(stack, "tmpco") as client:
        thread = (await client.create_thread(title="state under tmp", provider="codex"))["thread_id"]
        sent = await client.send(thread, "say hi from tmp")
        run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    assert [m["text"] for m in run["messages"] if m["role"] == "assistant"] == ["Hi from a /tmp state dir."]
    assert list((homes_root / "xdg-cache" / "treadle" / "codex-homes").glob("*/tmpco/config.toml"))
    assert not list((tmp_path / "state").glob("provider-runtimes/*/codex-homes"))


async def test_L9_3_a_placement_the_host_refuses_outright_fails_the_run_with_the_reason_instead_of_retrying(
    tmp_path, mock, homes_root
):
    """A Codex home root under /tmp (set explicitly) is refused by the host as a bad request: no retry of the
    same placement can change that, so the run fails naming the setting (it was retried for ever, ``starting``)."""
    from tests.codex.codex_support import codex_env
    from tests.support.provider_http import tenant_client
    from treadle.cli.stack import Stack

    under_tmp = tmp_path / "homes"
    assert under_tmp.resolve().is_relative_to("/tmp")
    env = {**codex_env(mock, homes_root), "TREADLE_CODEX_HOME_ROOT": str(under_tmp)}
    async with Stack(tmp_path / "state", env=env) as stack, tenant_client(stack, "badhome") as client:
        thread = (await client.create_thread(title="home under tmp", provider="codex"))["thread_id"]
        sent = await client.send(thread, "never reaches the model")
        run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "failed", run
    assert "TREADLE_CODEX_HOME_ROOT" in (run["error"] or ""), run
    assert "never reaches the model" not in mock.prompts()
