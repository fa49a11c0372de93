"""Life inside a Claude Code run over Treadle's HTTP API (issue 8): approvals, questions, steering by
interrupt-restart, interrupt, and a provider switch that hands the context over. Real workers; the provider
host runs the real Claude Code CLI against the mock Messages API of this test process.

One stack per module, one thread (one CLI process) per test, and a test's follow-ups reuse its thread: the
CLI is the expensive part. A kill -9 between and during runs (the same Claude session resumed, its history
intact), the API error and the todo list are in ``test_claude_e2e.py``.
"""

from __future__ import annotations

import pytest

from tests.claude.claude_stack import claude_env, mock_claude_api, quiet  # noqa: F401  (fixtures)
from tests.claude.mock_api import MockMessagesApi
from tests.support.helpers import wait_for
from tests.support.provider_http import (
    answered_once,
    api_client,
    checkpointed,
    kill_the_provider_host_under,
    pending_request,
    request_status,
    respond,
    tenant_token,
    user_texts,
    workspace_of,
)
from treadle.cli.stack import Stack
from treadle.client.http import TreadleClient

pytestmark = pytest.mark.e2e

TENANT = "claudeco"
SLOW_WORDS = [f"word{i:03d}" for i in range(300)]  # what the mock's #slow scenario streams, a word per 0.1 s


@pytest.fixture(scope="module")
async def claude_stack(tmp_path_factory, mock_claude_api):
    async with Stack(tmp_path_factory.mktemp("claude-http"), env=claude_env(mock_claude_api), on_output=quiet) as stack:
        yield stack
    # Only the Messages API was ever called: no phone-home traffic reached the mock's base URL either.
    assert {(s.method, s.path.split("?")[0]) for s in mock_claude_api.seen} <= {("POST", "/v1/messages")}


@pytest.fixture(scope="module")
async def token(claude_stack) -> str:
    return await tenant_token(claude_stack, TENANT)


@pytest.fixture(scope="module")
async def client(claude_stack, token):
    async with api_client(claude_stack, token) as c:
        yield c


# --- helpers ---------------------------------------------------------------------------------------------


def assistant_texts(run: dict) -> list[str]:
    return [m["text"] for m in run["messages"] if m["role"] == "assistant" and m["status"] == "completed"]


async def new_thread(client: TreadleClient, title: str, **kw) -> str:
    return (await client.create_thread(title=title, provider="claude", **kw))["thread_id"]


async def run_to_end(client: TreadleClient, thread: str, text: str, **kw) -> dict:
    sent = await client.send(thread, text, **kw)
    return await client.wait_run(sent["run_id"], timeout=90)


async def streaming(client: TreadleClient, thread: str, run_id: str, words: int = 5) -> None:
    """The run's answer is visibly streaming (at least ``words`` of it reached the thread's projection)."""

    async def started():
        doc = await client.get_thread(thread)
        return any(
            m["role"] == "assistant" and m.get("run_id") == run_id and len(m["text"].split()) >= words
            for m in doc["messages"]
        )

    await wait_for(started, timeout=60, what="the answer streaming")


def tool_results(api: MockMessagesApi, prompt_tag: str) -> list[str]:
    """Every tool_result text the model was sent while answering the prompt tagged ``prompt_tag``."""
    return [
        s.conversation.result_text()
        for s in api.seen
        if s.conversation is not None and prompt_tag in s.conversation.prompt and s.conversation.tool_results
    ]


# --- L11 approvals ---------------------------------------------------------------------------------------


async def test_L11_1_L11_2_an_approved_claude_command_runs_and_its_file_lands_in_the_checkpoint(client, claude_stack):
    thread = await new_thread(client, "claude approve")
    sent = await client.send(thread, "#bash write bash.txt")
    request = await pending_request(client, thread)
    workspace = str(workspace_of(claude_stack, TENANT, thread).resolve())
    command = "echo hi > bash.txt && cat bash.txt"
    assert (request["kind"], request["command"], request["cwd"]) == ("command", command, workspace)
    assert request["prompt"] == f"Run `{command}` in {workspace}"
    assert request["description"] == "Write hi to bash.txt"  # the model's words, beside the action
    assert request["detail"]["tool"] == "Bash" and request["detail"]["input"]["command"].startswith("echo hi")
    assert (await client.get_run(sent["run_id"]))["status"] == "waiting"
    assert not (workspace_of(claude_stack, TENANT, thread) / "bash.txt").exists()  # nothing ran before the answer

    assert (await respond(client, request["id"], {"decision": "accept"}))["disposition"] == "resolved"
    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    assert assistant_texts(run)[-1] == "The command printed: hi"
    [command] = [n for n in run["nodes"] if n["kind"] == "tool"]
    assert (command["status"], command["output"]) == ("completed", "hi")
    assert request["detail"]["tool_node_id"] == command["id"]
    checkpoint = run["checkpoint"]
    assert [(f["path"], f["change"]) for f in checkpoint["files"]] == [("bash.txt", "added")]
    assert checkpointed(claude_stack, TENANT, thread, checkpoint, "bash.txt") == "hi\n"
    await answered_once(client, thread, request, {"decision": "accept"})


async def test_L11_2_a_declined_claude_command_does_not_run_and_a_cancel_ends_the_run_interrupted(
    client, claude_stack, mock_claude_api
):
    thread = await new_thread(client, "claude decline")
    sent = await client.send(thread, "#bash write bash.txt (decline)")
    request = await pending_request(client, thread)
    declined = {"decision": "decline", "message": "not in this repository"}
    assert (await respond(client, request["id"], declined))["disposition"] == "resolved"
    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "completed", run  # the agent heard why and answered
    assert not (workspace_of(claude_stack, TENANT, thread) / "bash.txt").exists()
    assert run["checkpoint"]["files"] == []
    [command] = [n for n in run["nodes"] if n["kind"] == "tool"]
    assert command["status"] == "failed" and "not in this repository" in command["output"]
    assert any("not in this repository" in t for t in tool_results(mock_claude_api, "(decline)"))
    assert (await request_status(client, thread, request["id"]))["response"] == declined

    # cancel: the command is refused and Claude Code stops the whole turn
    sent = await client.send(thread, "#bash write bash.txt (cancel)")
    request = await pending_request(client, thread)
    assert (await respond(client, request["id"], {"decision": "cancel"}))["disposition"] == "resolved"
    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "interrupted", run
    assert run["checkpoint"]["status"] == "interrupted" and run["checkpoint"]["files"] == []
    assert not (workspace_of(claude_stack, TENANT, thread) / "bash.txt").exists()
    assert all(n["status"] not in ("running", "pending", "waiting") for n in run["nodes"])
    after = await run_to_end(client, thread, "#text still there?")
    assert after["status"] == "completed", after


async def test_L11_2_allow_for_session_keeps_the_clis_suggested_rule_in_the_session_not_the_workspace(
    client, claude_stack
):
    thread = await new_thread(client, "claude allow for session")
    sent = await client.send(thread, "#python compute it")
    request = await pending_request(client, thread)
    suggestions = request["detail"]["suggestions"]
    rules = [r for s in suggestions if s["type"] == "addRules" for r in s["rules"]]
    assert rules and all(r["toolName"] == "Bash" for r in rules)  # what the CLI proposes to allow from now on
    await respond(client, request["id"], {"decision": "accept_for_session"})
    first = await client.wait_run(sent["run_id"], timeout=60)
    assert first["status"] == "completed", first
    assert assistant_texts(first)[-1] == "Python printed: 42"

    again = await run_to_end(client, thread, "#python compute it again")
    assert again["status"] == "completed", again
    assert [r for r in (await client.get_thread(thread))["requests"] if r["run_id"] == again["id"]] == []
    assert [(n["status"], n["output"]) for n in again["nodes"] if n["kind"] == "tool"] == [("completed", "42")]
    # "for this session" is the Claude session's memory: nothing was written into the user's repository
    assert not (workspace_of(claude_stack, TENANT, thread) / ".claude").exists()
    assert again["checkpoint"]["files"] == []


# --- L11.4 questions -------------------------------------------------------------------------------------


async def test_L11_4_a_claude_question_answered_over_http_reaches_the_model_through_the_tools_input(
    client, mock_claude_api
):
    thread = await new_thread(client, "claude question")
    sent = await client.send(thread, "#ask which color")
    request = await pending_request(client, thread)
    assert request["kind"] == "user_input" and request["prompt"] == "Which color do you prefer?"
    [question] = request["questions"]
    assert (question["id"], question["header"], question["multi_select"]) == ("0", "Color", False)
    assert question["options"] == [
        {"label": "Blue", "description": "like the sea"},
        {"label": "Red", "description": "like fire"},
    ]
    assert (await client.get_run(sent["run_id"]))["status"] == "waiting"

    bad = await client.request("POST", f"/v1/requests/{request['id']}/respond", json={"decision": "accept"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_response"
    unknown = await client.request(
        "POST", f"/v1/requests/{request['id']}/respond", json={"answers": {"colour": "Blue"}}
    )
    assert unknown.status_code == 400, unknown.text  # the adapter refused it; the CLI's callback still waits
    assert unknown.json()["error"]["code"] == "invalid_response" and "colour" in unknown.json()["error"]["message"]
    assert (await request_status(client, thread, request["id"]))["status"] == "pending"

    assert (await respond(client, request["id"], {"answers": {"0": "Blue"}}))["disposition"] == "resolved"
    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    assert '"Which color do you prefer?"="Blue"' in assistant_texts(run)[-1]
    assert any('"Which color do you prefer?"="Blue"' in t for t in tool_results(mock_claude_api, "#ask which color"))
    assert [n for n in run["nodes"] if n["kind"] == "tool"] == []  # the question is its request's node
    answered = await request_status(client, thread, request["id"])
    assert answered["status"] == "resolved" and answered["response"] == {"answers": {"0": "Blue"}}


async def test_L11_1_a_claude_approval_shows_the_real_command_and_its_cwd_not_the_models_description(
    client, claude_stack
):
    """Issue 25: the model describes ``rm -rf ~/notes`` as "List the files"; the approval's prompt, node and
    activity show the command and where it runs; the model's words are only its ``description``."""
    thread = await new_thread(client, "claude liar")
    sent = await client.send(thread, "#liar tidy the notes")
    request = await pending_request(client, thread)
    workspace = str(workspace_of(claude_stack, TENANT, thread).resolve())
    assert (request["kind"], request["command"], request["cwd"]) == ("command", "rm -rf ~/notes", workspace)
    assert request["prompt"] == f"Run `rm -rf ~/notes` in {workspace}"
    assert request["description"] == "List the files"
    doc = await client.get_thread(thread)
    [node] = [n for r in doc["runs"] for n in r["nodes"] if n["id"] == request["node_id"]]
    assert node["title"] == request["prompt"]
    await respond(client, request["id"], {"decision": "decline"})
    assert (await client.wait_run(sent["run_id"], timeout=60))["status"] == "completed"


async def test_L11_1_a_claude_edit_approval_shows_the_file_and_its_diff(client, claude_stack):
    thread = await new_thread(client, "claude edit")
    notes = workspace_of(claude_stack, TENANT, thread) / "notes.md"
    notes.write_text("colour: red\n")
    sent = await client.send(thread, "#edit make it blue")
    request = await pending_request(client, thread)
    path = str(notes.resolve())
    assert (request["kind"], request["command"], request["prompt"]) == ("file_change", None, f"Edit {path}")
    [edit] = request["files"]
    assert (edit["path"], edit["change"]) == (path, "update")
    assert "-colour: red\n" in edit["diff"] and "+colour: blue\n" in edit["diff"]
    await respond(client, request["id"], {"decision": "decline"})
    assert (await client.wait_run(sent["run_id"], timeout=60))["status"] == "completed"
    assert notes.read_text() == "colour: red\n"


# --- L2.4 a synchronous subagent ------------------------------------------------------------------------


async def test_L2_4_L11_1_a_claude_subagents_approval_and_command_nest_under_its_child_node(client, claude_stack):
    thread = await new_thread(client, "claude subagent approval")
    sent = await client.send(thread, "#subagent delegate it")
    request = await pending_request(client, thread)
    assert request["kind"] == "command" and request["detail"]["input"]["command"].startswith("echo from-sub")
    live = await client.get_run(sent["run_id"])
    nodes = {n["id"]: n for n in live["nodes"]}
    [agent] = [n for n in nodes.values() if n["kind"] == "subagent"]
    assert agent["status"] == "running" and nodes[agent["parent_id"]]["kind"] == "root_turn"
    assert nodes[request["node_id"]]["parent_id"] == agent["id"]  # the subagent asked, not the root turn

    await respond(client, request["id"], {"decision": "accept"})
    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    nodes = {n["id"]: n for n in run["nodes"]}
    assert nodes[agent["id"]]["status"] == "completed" and nodes[agent["id"]]["title"] == "Say hi"
    [command] = [n for n in nodes.values() if n["kind"] == "tool" and n["parent_id"] == agent["id"]]
    assert (command["status"], command["output"]) == ("completed", "from-sub")
    said = {m["text"]: m["node_id"] for m in run["messages"] if m["role"] == "assistant"}
    assert said["subagent says hi (from-sub)"] == agent["id"]  # its text is under its node, not the root's
    assert (workspace_of(claude_stack, TENANT, thread) / "sub.txt").read_text() == "from-sub\n"


async def test_L2_4_a_background_claude_subagent_ends_inside_its_run(client, claude_stack):
    thread = await new_thread(client, "claude background agent", runtime_mode="full_access")
    run = await run_to_end(client, thread, "#background delegate it")
    assert run["status"] == "completed", run
    [agent] = [n for n in run["nodes"] if n["kind"] == "subagent"]
    assert agent["status"] == "completed" and agent["output"].startswith("subagent says hi")
    # The run lasted until the agent was done: its file is in the run's checkpoint, its last word the run's.
    assert [f["path"] for f in run["checkpoint"]["files"]] == ["sub.txt"]
    assert assistant_texts(run)[-1] == "The background agent finished."
    after = await run_to_end(client, thread, "#text anything else?")
    assert after["status"] == "completed" and [n for n in after["nodes"] if n["kind"] != "root_turn"] == [], after


# --- L12.3 plan mode -------------------------------------------------------------------------------------


async def test_L12_1_L12_3_a_claude_proposed_plan_is_implemented_as_a_run_out_of_plan_mode(
    client, claude_stack, mock_claude_api
):
    thread = await new_thread(client, "claude plan")
    planned = await run_to_end(client, thread, "#plan make a plan")
    assert planned["status"] == "completed", planned
    [plan] = [p for p in (await client.get_thread(thread))["plans"] if p["kind"] == "proposed_plan"]
    assert plan["run_id"] == planned["id"] and plan["text"] == "1. Write plan.txt\n2. Run the tests"
    assert "shown to the user as a proposed plan" in assistant_texts(planned)[-1]  # and nothing was implemented
    assert planned["checkpoint"]["files"] == []

    r = await client.request("POST", f"/v1/plans/{plan['id']}/implement", json={"as": "run"})
    assert r.status_code == 202, r.text
    sent = await client.send(thread, "#write now write it", mode="queue_after_active")
    implemented = await client.wait_run(r.json()["run_id"], timeout=60)
    assert implemented["status"] == "completed", implemented
    assert "1. Write plan.txt" in user_texts(implemented)[0]
    # The thread's own mode is back: writing asks for approval (plan mode would refuse the tool outright).
    request = await pending_request(client, thread)
    assert request["kind"] == "file_change"
    await respond(client, request["id"], {"decision": "accept"})
    written = await client.wait_run(sent["run_id"], timeout=60)
    assert written["status"] == "completed", written
    assert (workspace_of(claude_stack, TENANT, thread) / "written.txt").read_text() == "written by claude\n"


# --- L3 steering, L8 interrupt ---------------------------------------------------------------------------


async def test_L3_3_L3_4_steering_claude_mid_stream_interrupts_and_restarts_the_same_run(client, mock_claude_api):
    thread = await new_thread(client, "claude steer")
    sent = await client.send(thread, "#slow write a long essay")
    await streaming(client, thread, sent["run_id"])
    steer = await client.send(thread, "#text make it short instead")
    assert steer["disposition"] == "restarting" and steer["run_id"] == sent["run_id"]

    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    first, second = run["attempts"]
    assert (first["status"], second["status"], second["reason"]) == ("interrupted", "completed", "steering_restart")
    assert first["provider_thread_id"] == second["provider_thread_id"]  # the same Claude session goes on
    assert user_texts(run) == ["#slow write a long essay", "#text make it short instead"]
    assert assistant_texts(run) == ["Mock Claude heard: #text make it short instead"]  # L3.7: the last attempt answers
    [cut] = [m for m in run["messages"] if m["role"] == "assistant" and m["attempt_id"] == first["id"]]
    assert cut["status"] == "incomplete" and cut["text"].split() == SLOW_WORDS[: len(cut["text"].split())]
    roots = {n["attempt_id"]: n for n in run["nodes"] if n["kind"] == "root_turn"}
    assert roots[first["id"]]["status"] == "interrupted"  # kept in the graph for audit
    doc = await client.get_thread(thread)
    assert len(doc["runs"]) == 1 and len(doc["provider_threads"]) == 1
    # Claude's conversation holds both prompts: the restart continued the interrupted session.
    history = str(mock_claude_api.seen[-1].body["messages"])
    assert "#slow write a long essay" in history and "#text make it short instead" in history


async def test_L3_3_a_quick_steer_on_a_claude_run_keeps_what_the_run_was_about(client, mock_claude_api):
    # Sent right after the first message, the steer usually interrupts a turn whose CLI is still starting (its
    # prompt not sent yet), else one that is streaming. Either way Claude hears both messages, in order.
    thread = await new_thread(client, "claude quick steer")
    sent = await client.send(thread, "#slow write an essay about whales")
    await client.send(thread, "#text make it short")
    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "completed", run
    assert [(a["status"], a["reason"]) for a in run["attempts"]] == [
        ("interrupted", "initial"),
        ("completed", "steering_restart"),
    ]
    assert user_texts(run) == ["#slow write an essay about whales", "#text make it short"]
    [reply] = assistant_texts(run)
    assert reply.startswith("Mock Claude heard: ") and reply.endswith("#text make it short")
    history = str(mock_claude_api.seen[-1].body["messages"])
    assert history.index("write an essay about whales") < history.index("#text make it short")


async def test_L3_4_L11_3_steering_claude_while_it_waits_on_an_approval_supersedes_the_run_that_already_spoke(
    client, claude_stack
):
    thread = await new_thread(client, "claude steer approval")
    sent = await client.send(thread, "#bash write bash.txt")
    request = await pending_request(client, thread)
    steer = await client.send(thread, "#text never mind, do not run it")
    assert steer["disposition"] == "restarting" and steer["run_id"] == sent["run_id"]

    # Claude said "Calling Bash." before it asked: the run has answered, so the steer becomes the next run.
    first = await client.wait_run(sent["run_id"], timeout=60)
    assert first["status"] == "interrupted", first
    assert assistant_texts(first) == ["Calling Bash."]
    assert (await request_status(client, thread, request["id"]))["status"] == "cancelled"
    doc = await client.get_thread(thread)
    [second] = [r for r in doc["runs"] if r.get("supersedes_run_id") == sent["run_id"]]
    assert first["superseded_by"] == second["id"]
    second = await client.wait_run(second["id"], timeout=60)
    assert second["status"] == "completed", second
    assert user_texts(second) == ["#text never mind, do not run it"]
    assert assistant_texts(second) == ["Mock Claude heard: #text never mind, do not run it"]
    assert not (workspace_of(claude_stack, TENANT, thread) / "bash.txt").exists()
    assert second["attempts"][-1]["provider_thread_id"] == first["attempts"][-1]["provider_thread_id"]


async def test_L8_1_L8_2_interrupting_a_claude_run_ends_it_interrupted_and_the_next_message_works(client, claude_stack):
    thread = await new_thread(client, "claude interrupt")
    sent = await client.send(thread, "#slow keep talking")
    await streaming(client, thread, sent["run_id"])
    r = await client.request("POST", f"/v1/runs/{sent['run_id']}/interrupt", json={})
    assert r.status_code == 202, r.text
    assert r.json()["disposition"] == "interrupting"  # an acknowledgement, not the outcome (L8.2)
    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "interrupted", run
    assert run["attempts"][0]["interrupt"] == "native" and run["checkpoint"]["status"] == "interrupted"
    [cut] = [m for m in run["messages"] if m["role"] == "assistant"]
    assert cut["status"] == "incomplete" and len(cut["text"].split()) < len(SLOW_WORDS)

    # L11.3: interrupting a run that waits on an approval cancels the request; nothing runs.
    waiting = await client.send(thread, "#bash write bash.txt")
    request = await pending_request(client, thread)
    assert (await client.request("POST", f"/v1/runs/{waiting['run_id']}/interrupt", json={})).status_code == 202
    run = await client.wait_run(waiting["run_id"], timeout=60)
    assert run["status"] == "interrupted", run
    assert (await request_status(client, thread, request["id"]))["status"] == "cancelled"
    late = await client.request("POST", f"/v1/requests/{request['id']}/respond", json={"decision": "accept"})
    assert late.status_code == 409
    assert not (workspace_of(claude_stack, TENANT, thread) / "bash.txt").exists()

    after = await run_to_end(client, thread, "#text are you still there")
    assert after["status"] == "completed", after
    assert assistant_texts(after) == ["Mock Claude heard: #text are you still there"]
    doc = await client.get_thread(thread)
    assert len(doc["provider_threads"]) == 1 and len(doc["sessions"]) == 1  # one Claude session throughout


async def test_L8_2_interrupting_a_claude_run_right_away_ends_it_interrupted_whether_or_not_the_cli_was_up(client):
    # The first turn of a session starts the CLI (about a second): an interrupt right after sending usually
    # lands before the prompt reached it (the turn ends without sending it), else mid-answer. Either way:
    thread = await new_thread(client, "claude interrupt cold")
    sent = await client.send(thread, "#slow a long answer")
    r = await client.request("POST", f"/v1/runs/{sent['run_id']}/interrupt", json={})
    assert r.status_code == 202, r.text
    run = await client.wait_run(sent["run_id"], timeout=60)
    assert run["status"] == "interrupted", run
    assert assistant_texts(run) == []
    after = await run_to_end(client, thread, "#text the next thing it hears")
    assert after["status"] == "completed", after
    assert assistant_texts(after) == ["Mock Claude heard: #text the next thing it hears"]


# --- L5 switching provider -------------------------------------------------------------------------------


async def test_L5_2_L5_3_switching_from_scripted_to_claude_hands_the_context_over_and_back_again(
    client, mock_claude_api
):
    thread = (await client.create_thread(title="scripted then claude"))["thread_id"]
    planned = await run_to_end(
        client,
        thread,
        "Plan the parser: the lexer goes first",
        script={"steps": [{"type": "text", "text": "Agreed: lexer, then parser."}]},
    )
    assert planned["status"] == "completed" and planned["provider"] == "scripted", planned

    switched = await run_to_end(client, thread, "#text carry on with the lexer", provider="claude")
    assert switched["status"] == "completed", switched
    [handoff_id] = switched["handoff_ids"]
    r = await client.request("GET", f"/v1/handoffs/{handoff_id}")
    assert r.status_code == 200, r.text
    handoff = r.json()
    assert (handoff["strategy"], handoff["to_provider"], handoff["covered_ordinals"]) == (
        "full_thread_summary",
        "claude",
        [1],
    )
    assert (
        "Plan the parser: the lexer goes first" in handoff["text"] and "Agreed: lexer, then parser." in handoff["text"]
    )
    assert handoff["delivered"] and handoff["run_id"] == switched["id"]
    # L5.5: Claude's model got exactly the stored handoff, then the user's message, as the turn's prompt.
    assert f"{handoff['text']}\n\n---\n\n#text carry on with the lexer" in mock_claude_api.prompts()
    assert user_texts(switched) == ["#text carry on with the lexer"]  # the thread shows what the user wrote

    follow = await run_to_end(client, thread, "#text and then the parser", provider="claude")
    assert follow["status"] == "completed" and follow["provider"] == "claude", follow
    assert follow["handoff_ids"] == []  # the Claude session already has the context
    assert follow["attempts"][-1]["provider_thread_id"] == switched["attempts"][-1]["provider_thread_id"]
    assert "#text and then the parser" in mock_claude_api.prompts()

    back = await run_to_end(
        client, thread, "back to scripted", provider="scripted", script={"steps": [{"type": "echo"}]}
    )
    assert back["status"] == "completed", back
    [delta_id] = back["handoff_ids"]
    delta = (await client.request("GET", f"/v1/handoffs/{delta_id}")).json()
    assert (delta["strategy"], delta["from_provider"], delta["covered_ordinals"]) == ("delta", "claude", [2, 3])
    assert "Mock Claude heard: #text and then the parser" in delta["text"]
    assert back["attempts"][-1]["provider_thread_id"] == planned["attempts"][-1]["provider_thread_id"]


async def test_L5_5_a_handoff_from_claude_carries_no_thinking_of_claudes(client, mock_claude_api):
    """Issue 25: Claude's thinking is a ``reasoning`` node of its run, and the summary another provider receives
    on a switch carries the conversation, not that hidden reasoning (TREADLE_SUPERVISOR_HANDOFF_REASONING opts in)."""
    thread = await new_thread(client, "claude thinks, then a switch")
    thought = await run_to_end(client, thread, "#think greet me", provider="claude")
    assert thought["status"] == "completed", thought
    [thinking] = [n for n in thought["nodes"] if n["title"] == "Thinking"]
    assert thinking["kind"] == "reasoning" and "keep it short" in thinking["output"]
    switched = await run_to_end(client, thread, "summarise", provider="scripted", script={"steps": [{"type": "echo"}]})
    [handoff_id] = switched["handoff_ids"]
    handoff = (await client.request("GET", f"/v1/handoffs/{handoff_id}")).json()
    assert "#think greet me" in handoff["text"] and "Hello after thinking." in handoff["text"]
    assert "keep it short" not in handoff["text"] and "Thinking" not in handoff["text"]


# --- L9.3 / L11.3 a host crash under a pending approval (last: it restarts the module's provider host) ----


async def test_L11_3_L9_3_an_approval_pending_when_the_provider_host_died_is_not_resumable_and_the_run_recovers(
    client, claude_stack, mock_claude_api
):
    thread = await new_thread(client, "claude approval kill")
    await run_to_end(client, thread, "#text remember the word teapot")
    sent = await client.send(thread, "#bash write bash.txt")
    request = await pending_request(client, thread)
    before = [(p["id"], p["native_ref"]) for p in (await client.get_thread(thread))["provider_threads"]]
    await kill_the_provider_host_under(claude_stack, client, thread, request)

    # Not stuck: the run goes on in the resumed Claude session, whose model asks again; that answer works.
    fresh = await pending_request(client, thread, besides=(request["id"],))
    assert fresh["detail"]["input"] == request["detail"]["input"]
    await respond(client, fresh["id"], {"decision": "accept"})
    run = await client.wait_run(sent["run_id"], timeout=90)
    assert run["status"] == "completed", run
    assert [a["reason"] for a in run["attempts"]] == ["initial", "provider_recovery"]
    assert (workspace_of(claude_stack, TENANT, thread) / "bash.txt").read_text() == "hi\n"
    assert [(p["id"], p["native_ref"]) for p in (await client.get_thread(thread))["provider_threads"]] == before
    # The same Claude session, its history intact, with the cut-off turn left out: the prompt is there once.
    history = str(mock_claude_api.seen[-1].body["messages"])
    assert "remember the word teapot" in history and history.count("#bash write bash.txt") == 1
