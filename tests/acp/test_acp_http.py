"""Real ACP agents as Treadle providers over the HTTP API (issue 22): Claude Code through claude-agent-acp
(``acp-claude``) and Codex through codex-acp (``acp-codex``), each driven by the one generic ACP adapter in
the runtime sandbox, offline against a mock of its model API on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from tests.acp.acp_support import TENANT
from tests.codex.codex_mock import Exec, PlanUpdate, Stall, Text
from tests.support.helpers import wait_for
from tests.support.provider_http import pending_request, request_status, respond, user_texts, workspace_of
from treadle.client.http import TreadleClient
from treadle.providers.base import RECOVERY_NOTE

pytestmark = pytest.mark.e2e


def assistant_texts(run: dict) -> list[str]:
    return [m["text"] for m in run["messages"] if m["role"] == "assistant" and m["text"]]


async def new_thread(client: TreadleClient, provider: str, title: str, **kw) -> str:
    return (await client.create_thread(title=title, provider=provider, **kw))["thread_id"]


async def run_to_end(client: TreadleClient, thread: str, text: str, **kw) -> dict:
    sent = await client.send(thread, text, **kw)
    return await client.wait_run(sent["run_id"], timeout=90)


# What each agent's mock plays, by scenario: the prompt Treadle sends, and what the model answers
PLAIN = {"acp-claude": ("#text hello there", "Mock Claude heard:"), "acp-codex": ("hello there", "echo: hello there")}


def script_codex(codex_api) -> None:
    codex_api.on("write hi.txt", [Exec("echo hi > hi.txt && cat hi.txt", escalate=True)], [Text("The command ran.")])
    codex_api.on("write hi.txt (decline)", [Exec("echo hi > hi.txt", escalate=True)], [Text("Not written.")])
    codex_api.on(
        "make a todo list",
        [PlanUpdate("the plan", [("Read the code", "completed"), ("Write the fix", "in_progress")])],
        [Text("Listed.")],
    )
    codex_api.on("think forever", [Text("Let me think"), Stall()])


@pytest.mark.parametrize("provider", ["acp-claude", "acp-codex"])
async def test_L2_1_L2_3_a_plain_turn_on_a_real_acp_agent_completes_with_its_answer(client, codex_api, provider):
    prompt, answer = PLAIN[provider]
    thread = await new_thread(client, provider, f"{provider} plain")
    run = await run_to_end(client, thread, prompt)
    assert run["status"] == "completed", run
    assert run["provider"] == provider
    assert answer in assistant_texts(run)[-1] and prompt in assistant_texts(run)[-1]
    assert run["checkpoint"] is not None and run["checkpoint"]["files"] == []
    doc = await client.get_thread(thread)
    # What the agent said in initialize, as typed results: no steering (restart), interrupt by session/cancel
    caps = doc["capabilities"]
    assert (caps["steering"], caps["interrupt"], caps["approvals"], caps["plans"]) == (
        "restart",
        "available",
        "structured",
        "available",
    )
    assert caps["fork"] == "portable"  # ACP forks a session only at its end: Treadle forks portably
    assert caps["rollback"] == "fresh_thread"
    [session] = doc["sessions"]
    assert session["provider"] == provider and session["capabilities"]["active_steering"] is False


@pytest.mark.parametrize("provider", ["acp-claude", "acp-codex"])
async def test_L11_1_L11_2_an_acp_permission_request_approved_runs_and_declined_does_not(
    client, acp_stack, codex_api, provider
):
    script_codex(codex_api)
    prompts = (
        ("#bash write bash.txt", "#bash write bash.txt (decline)")
        if provider == "acp-claude"
        else ("write hi.txt", "write hi.txt (decline)")
    )
    written = "bash.txt" if provider == "acp-claude" else "hi.txt"
    thread = await new_thread(client, provider, f"{provider} approvals")
    sent = await client.send(thread, prompts[0])
    request = await pending_request(client, thread)
    # The one request shape of every runtime: the exact command and its cwd (relative to the workspace, never
    # the host's path), the model's words as the description, the agent's own options in detail
    assert request["kind"] == "command"
    assert request["command"].startswith(f"echo hi > {written}")
    assert request["cwd"] == "."
    assert request["prompt"] == f"Run `{request['command']}`"
    assert request["description"]
    assert str(acp_stack.state_dir) not in json.dumps(request)
    assert request["detail"]["title"] and request["detail"]["tool"] == "execute"
    kinds = {o["kind"] for o in request["detail"]["options"]}
    assert {"allow_once", "reject_once"} <= kinds
    assert (await client.get_run(sent["run_id"]))["status"] == "waiting"
    workspace = workspace_of(acp_stack, TENANT, thread)
    assert not (workspace / written).exists()  # nothing ran before the answer

    assert (await respond(client, request["id"], {"decision": "accept"}))["disposition"] == "resolved"
    run = await client.wait_run(sent["run_id"], timeout=90)
    assert run["status"] == "completed", run
    assert (workspace / written).read_text() == "hi\n"
    assert [f["path"] for f in run["checkpoint"]["files"]] == [written]
    again = await client.request("POST", f"/v1/requests/{request['id']}/respond", json={"decision": "accept"})
    assert again.status_code == 409  # its callback is used up

    (workspace / written).unlink()
    sent = await client.send(thread, prompts[1])
    request = await pending_request(client, thread, besides=(request["id"],))
    # an option the agent did not offer is refused (typed, naming the offered ones), and the request still waits
    bad = await client.request("POST", f"/v1/requests/{request['id']}/respond", json={"answers": {"option": "nope"}})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_response", bad.text
    offered = request["detail"]["options"]
    assert bad.json()["error"]["details"]["options"] == [o["id"] for o in offered]
    # answered by the id of the agent's own reject option, as docs/providers.md documents
    reject = next(o["id"] for o in offered if o["kind"] == "reject_once")
    assert (await respond(client, request["id"], {"answers": {"option": reject}}))["disposition"] == "resolved"

    async def recorded():
        return (await request_status(client, thread, request["id"]))["response"] == {"answers": {"option": reject}}

    await wait_for(recorded, timeout=30, what="the option answer recorded")
    run = await client.wait_run(sent["run_id"], timeout=90)
    # codex-acp's only reject option is "abort", which ends Codex's turn; Claude's "reject" lets the model go on
    assert run["status"] == ("completed" if provider == "acp-claude" else "interrupted"), run
    assert not (workspace / written).exists()


@pytest.mark.parametrize("provider", ["acp-claude", "acp-codex"])
async def test_L12_1_an_acp_plan_becomes_the_runs_todo_list(client, codex_api, provider):
    script_codex(codex_api)
    thread = await new_thread(client, provider, f"{provider} plan")
    run = await run_to_end(client, thread, "#todo make a todo list" if provider == "acp-claude" else "make a todo list")
    assert run["status"] == "completed", run
    [todo] = [p for p in (await client.get_thread(thread))["plans"] if p["kind"] == "todo_list"]
    assert todo["run_id"] == run["id"]
    assert [(i["text"], i["status"]) for i in todo["items"]][:2] == [
        ("Read the code", "completed"),
        ("Write the fix", "in_progress"),
    ]


async def streaming(client: TreadleClient, thread: str, run_id: str) -> None:
    async def started():
        doc = await client.get_thread(thread)
        return any(m["role"] == "assistant" and m.get("run_id") == run_id and m["text"] for m in doc["messages"])

    await wait_for(started, timeout=60, what="the answer streaming")


@pytest.mark.parametrize("provider", ["acp-claude", "acp-codex"])
async def test_L8_1_L8_2_interrupting_an_acp_run_cancels_the_prompt_and_the_next_message_works(
    client, codex_api, provider
):
    script_codex(codex_api)
    thread = await new_thread(client, provider, f"{provider} interrupt")
    sent = await client.send(thread, "#slow write an essay" if provider == "acp-claude" else "think forever")
    await streaming(client, thread, sent["run_id"])
    r = await client.request("POST", f"/v1/runs/{sent['run_id']}/interrupt", json={})
    assert r.status_code == 202, r.text
    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "interrupted", run
    assert run["attempts"][0]["interrupt"] == "native"  # session/cancel, not a stopped process
    prompt, answer = PLAIN[provider]
    after = await run_to_end(client, thread, prompt)
    assert after["status"] == "completed", after
    assert answer in assistant_texts(after)[-1]
    assert len((await client.get_thread(thread))["sessions"]) == 1  # the same agent process went on


async def test_L3_3_steering_an_acp_run_interrupts_and_restarts_it_with_the_steering_message(client, claude_api):
    thread = await new_thread(client, "acp-claude", "acp steer")
    sent = await client.send(thread, "#slow write a long essay")
    await streaming(client, thread, sent["run_id"])
    steer = await client.send(thread, "#text make it short instead")
    assert steer["disposition"] == "restarting" and steer["run_id"] == sent["run_id"]
    run = await client.wait_run(sent["run_id"], timeout=90)
    assert run["status"] == "completed", (run["attempts"], run["error"] if "error" in run else None)
    first, second = run["attempts"]
    assert (first["status"], second["status"], second["reason"]) == ("interrupted", "completed", "steering_restart")
    assert first["provider_thread_id"] == second["provider_thread_id"]  # the same ACP session goes on
    assert user_texts(run) == ["#slow write a long essay", "#text make it short instead"]
    assert "#text make it short instead" in assistant_texts(run)[-1]


async def test_an_acp_agent_the_hosts_have_not_configured_fails_its_run_with_the_reason(client):
    thread = await new_thread(client, "acp-nosuch", "unconfigured agent")
    run = await run_to_end(client, thread, "hello")
    assert run["status"] == "failed", run
    assert "ACP agent 'nosuch' is not configured" in run["error"] and "acp-claude" in run["error"]
    doc = await client.get_thread(thread)
    assert doc["provider_threads"] == [] and doc["sessions"] == []  # nothing was started


@pytest.mark.parametrize("name", ["acp-", "acp-../etc", "acp-UPPER", "acp-" + "x" * 41, "acp-a.b", "acpx"])
async def test_a_malformed_acp_provider_name_is_refused_and_nothing_is_created(client, name):
    r = await client.request("POST", "/v1/threads", json={"title": "bad", "provider": name})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_provider", r.text
    assert "acp-<agent>" in r.json()["error"]["message"]


# what each agent's model is asked when the host dies under the turn: a stream that does not end by itself
CUT_OFF = {"acp-codex": "count slowly to three", "acp-claude": "#slow count slowly to three"}


@pytest.mark.parametrize("provider", ["acp-codex", "acp-claude"])
async def test_L9_3_a_turn_a_host_kill_cut_off_is_retried_on_the_loaded_session_without_its_prompt_twice(
    client, acp_stack, codex_api, claude_api, provider
):
    """Issue 36 (9e): the agent keeps a prompt from its turn's start, and its loaded session replays it; the
    retry sends Treadle's recovery note instead of the prompt again, so the model sees the request once."""
    prompt = CUT_OFF[provider]
    codex_api.on(prompt, [Text("One, two"), Stall()])
    thread = await new_thread(client, provider, f"{provider} host kill")
    sent = await client.send(thread, prompt)
    await streaming(client, thread, sent["run_id"])
    codex_api.on(prompt, [Text("One, two, three.")])  # the mock plays the request the note points back to
    since = len(codex_api.requests) if provider == "acp-codex" else len(claude_api.seen)
    await acp_stack.processes.kill("provider-host")

    run = await client.wait_run(sent["run_id"], timeout=180)
    assert run["status"] == "completed", run
    assert [(a["status"], a["reason"]) for a in run["attempts"]] == [
        ("lost", "initial"),
        ("completed", "provider_recovery"),
    ]
    doc = await client.get_thread(thread)
    assert len(doc["provider_threads"]) == 1  # the same ACP session, loaded
    if provider == "acp-codex":
        told = json.dumps(next(r.body["input"] for r in codex_api.requests[since:] if r.prompt == prompt))
    else:
        told = json.dumps([s.body.get("messages") for s in claude_api.seen[since:] if s.conversation][-1])
    assert told.count(prompt) == 1, told
    assert told.count(json.dumps(RECOVERY_NOTE)[1:-1]) == 1, told
    assert "interrupted the previous turn on purpose" not in told, told
