"""Issue 21 with the real Claude Code CLI, sandboxed on a provider host that mints its session's credential,
through the HTTP API: the mock model creates two threads at once (``mcp__treadle__create_threads``, each with a
first message), waits for them, reads each from a position, sends each a second message, and reads each again
from the ``next_position`` it was given — which answers only what came since. What the model received are the
public views the HTTP API serves; another tenant's thread is ``not_found`` to it and none of its bytes reach
the model, and that tenant sees none of the threads the agent made."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from tests.claude import mock_api
from tests.claude.claude_stack import claude_env, quiet
from tests.claude.mock_api import Conversation, MockMessagesApi, Stream, text, tool
from tests.support.provider_http import api_client, tenant_token
from tests.support.scripts import script
from tests.support.scripts import text as say
from treadle.cli.stack import Stack
from treadle.ops.servers import free_port

TENANT, OTHER = "weaver", "stranger"
TAG = "twothreads"
NAMES = ("alpha", "beta")
SECRET = f"the stranger's secret {uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
async def claude_api():
    async with MockMessagesApi() as server:
        yield server


@pytest.fixture(scope="module")
async def stack(tmp_path_factory, claude_api):
    port = free_port()
    env = {**claude_env(claude_api), "TREADLE_PROVIDER_HOST_MCP_URL": f"http://127.0.0.1:{port}/mcp"}
    async with Stack(tmp_path_factory.mktemp("claude-threads"), gateway_port=port, env=env, on_output=quiet) as s:
        yield s


def _results(conv: Conversation) -> dict[int, dict]:
    """What each earlier step's tool call answered, by step: ``failed`` (an ``is_error`` result), ``raw`` (its
    text) and ``json`` (that text parsed, when it is JSON)."""
    found: dict[int, dict] = {}
    for message in conv.body["messages"]:
        content = message["content"] if isinstance(message["content"], list) else []
        for block in content:
            if block.get("type") == "tool_result" and block["tool_use_id"].startswith(f"toolu_{TAG}_"):
                parts = block.get("content")
                raw = " ".join(p.get("text", "") for p in parts) if isinstance(parts, list) else str(parts)
                found[int(block["tool_use_id"].rsplit("_", 1)[1])] = {
                    "failed": bool(block.get("is_error")), "raw": raw, "json": _json(raw),
                }  # fmt: skip
    return found


def _json(raw: str) -> dict:
    try:
        return json.loads(raw[raw.index("{") :])
    except ValueError:
        return {}


def _call(step: int, got: dict[int, dict], prompt: str) -> tuple[str, dict] | None:
    """The agent's tool call at ``step``, built from what the calls before it answered; None: it is done.
    Steps 1–10 alternate between the two threads: wait for the first run, read from position 1 (past the
    first message, which the agent wrote itself), send a second message, wait for its run, read again from
    the ``next_position`` the first read gave. Step 11 reads the thread id the prompt names."""
    if step == 0:
        threads = [{"title": n, "text": f"first to {n}", "script": script(say(f"{n} one"))} for n in NAMES]
        return "create_threads", {"threads": threads, "client_request_id": f"{TAG}-1"}
    if step == 11:
        return "thread_read", {"thread_id": re.search(r"other=(thr_\w+)", prompt)[1]}  # type: ignore[index]
    if step > 11:
        return None
    made = got[0]["json"]["threads"][(step - 1) % 2]
    thread, name, phase = made["thread_id"], NAMES[(step - 1) % 2], (step - 1) // 2
    before = got[step - 2]["json"] if phase else {}  # this thread's call two steps back
    if phase == 0:
        return "thread_wait", {"thread_id": thread, "run_id": made["message"]["run_id"]}
    if phase == 1:
        return "thread_read", {"thread_id": thread, "after": 1, "min_seq": before["seq"]}
    if phase == 2:
        return "thread_send", {"thread_id": thread, "text": f"second to {name}", "script": script(say(f"{name} two"))}
    if phase == 3:
        return "thread_wait", {"thread_id": thread, "run_id": before["run_id"]}
    after = got[step - 6]["json"]["next_position"]
    return "thread_read", {"thread_id": thread, "after": after, "min_seq": before["seq"]}


def _agent(conv: Conversation) -> Stream:
    """The orchestrating agent: one tool call per step; it stops early, saying why, when a call before the
    expected failure (step 11) failed or answered something it cannot use."""
    got, step = _results(conv), conv.step
    failed = next((s for s in sorted(got) if got[s]["failed"] and s != 11), None)
    try:
        call = None if failed is not None else _call(step, got, conv.prompt)
    except (KeyError, IndexError, TypeError) as exc:
        return Stream([text(f"Stopped at step {step}: {exc!r} {got}")])
    if call is None:
        return Stream([text("Read both threads twice." if failed is None else f"Failed: {got[failed]['raw']}")])
    name, args = call
    return Stream([text(f"Calling {name}."), tool(f"mcp__treadle__{name}", args, f"toolu_{TAG}_{step}")])


async def test_a_claude_parent_creates_two_threads_and_reads_them_incrementally(stack, claude_api):
    mock_api.SCENARIOS[TAG] = _agent
    async with (
        api_client(stack, await tenant_token(stack, TENANT)) as client,
        api_client(stack, await tenant_token(stack, OTHER)) as stranger,
    ):
        theirs = (await stranger.create_thread(title="private", provider="scripted"))["thread_id"]
        ran = await stranger.send(theirs, SECRET, script=script(say(SECRET)))
        assert (await stranger.wait_run(ran["run_id"], timeout=60))["status"] == "completed"

        parent = (await client.create_thread(title="claude orchestrator", provider="claude"))["thread_id"]
        run = await client.wait_run((await client.send(parent, f"#{TAG} other={theirs}"))["run_id"], timeout=180)
        said = [m["text"] for m in run["messages"] if m["role"] == "assistant"]
        assert run["status"] == "completed" and said[-1] == "Read both threads twice.", said

        last = next(s.conversation for s in reversed(claude_api.seen) if s.conversation and s.conversation.step == 12)
        got = _results(last)  # what the model received, step by step
        assert not any(got[step]["failed"] for step in range(11)), got
        made = [t["thread_id"] for t in got[0]["json"]["threads"]]
        for index, thread in enumerate(made):
            doc = await client.get_thread(thread)
            assert doc["thread"]["title"] == NAMES[index]
            messages = doc["messages"]  # the public message views, as GET /v1/threads/{id} serves them
            assert [(m["role"], m["text"]) for m in messages] == [
                ("user", f"first to {NAMES[index]}"), ("assistant", f"{NAMES[index]} one"),
                ("user", f"second to {NAMES[index]}"), ("assistant", f"{NAMES[index]} two"),
            ]  # fmt: skip
            first, second = got[3 + index]["json"], got[9 + index]["json"]
            assert (first["thread_id"], first["items"], first["next_position"]) == (thread, messages[1:2], 2)
            assert (second["items"], second["next_position"], second["has_more"]) == (messages[2:4], 4, False)
            assert not first["truncated"] and not second["truncated"]

        assert got[11]["failed"] and got[11]["json"]["error"]["kind"] == "not_found", got[11]
        everything = json.dumps([s.body for s in claude_api.seen])
        assert SECRET not in everything and theirs in everything  # the id the test gave it, never the thread
        assert [t["id"] for t in (await stranger.list_threads())["items"]] == [theirs]
        for thread in made:
            assert (await stranger.request("GET", f"/v1/threads/{thread}")).status_code == 404
