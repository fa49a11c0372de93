"""The Claude Code adapter driven directly, against the real CLI and the mock Messages API."""

from __future__ import annotations

import asyncio
import os
import signal

import psutil
import pytest

from tests.claude.claude_fixtures import RecordingSink, api, claude, new_turn  # noqa: F401  (fixtures)
from tests.support.helpers import wait_for
from treadle.core import provider_events as pe
from treadle.providers.base import Response, Unsupported


async def answer(sink, task, response: Response, adapter) -> pe.RequestOpened:
    """Answer the turn's next request (``task`` is the playing turn, kept for readability at call sites)."""
    request = await sink.request()
    sink.seen.add(request.request_id)
    await adapter.respond(request.request_id, response)
    return request


async def test_L2_2_a_plain_turn_streams_its_reply_and_completes(claude):
    adapter = claude.adapter()
    ref, resumed = await adapter.open_thread(None, "unused")
    turn, sink = await claude.play(adapter, "#text hello there")

    assert not resumed
    assert isinstance(sink.events[0], pe.TurnStarted) and sink.events[0].native_turn_ref == turn.native_ref
    assert sink.texts() == ["Mock Claude heard: #text hello there"]
    (message_id,) = sink.live
    assert "".join(sink.live[message_id]) == sink.texts()[0]
    assert sink.events[-1] == pe.TurnCompleted(status="completed")
    assert adapter.store.transcript(ref) is not None  # the conversation is Claude's own session, under our ref


async def test_L11_2_an_approved_command_runs(claude):
    adapter = await claude.opened()
    turn, sink, task = claude.start(adapter, "#bash write a file")
    request = await answer(sink, task, Response(decision="accept"), adapter)
    await asyncio.wait_for(task, 60)

    assert request.kind == "command" and request.detail["tool"] == "Bash"
    assert request.detail["input"]["command"].startswith("echo hi > bash.txt")
    assert (claude.workspace / "bash.txt").read_text() == "hi\n"
    (started,) = sink.of(pe.ToolStarted)
    (done,) = sink.of(pe.ToolCompleted)
    assert started.parent_id == turn.root_node_id and done.node_id == started.node_id
    assert (done.status, done.output) == ("completed", "hi")
    assert request.detail["tool_node_id"] == started.node_id
    assert sink.texts()[-1] == "The command printed: hi"
    assert sink.completed.status == "completed"


async def test_L11_2_a_declined_command_does_not_run_and_the_agent_hears_why(claude):
    adapter = await claude.opened()
    _, sink, task = claude.start(adapter, "#bash write a file")
    await answer(sink, task, Response(decision="decline", message="not in this repository"), adapter)
    await asyncio.wait_for(task, 60)

    assert not (claude.workspace / "bash.txt").exists()
    (done,) = sink.of(pe.ToolCompleted)
    assert done.status == "failed" and "not in this repository" in done.output
    assert "not in this repository" in sink.texts()[-1]
    assert sink.completed.status == "completed"


async def test_L11_2_allow_for_session_stops_asking_and_writes_nothing_into_the_workspace(claude):
    adapter = await claude.opened()
    _, sink, task = claude.start(adapter, "#python first")
    await answer(sink, task, Response(decision="accept_for_session"), adapter)
    await asyncio.wait_for(task, 60)
    _, again = await claude.play(adapter, "#python second")

    assert again.of(pe.RequestOpened) == []
    assert [(d.status, d.output) for d in again.of(pe.ToolCompleted)] == [("completed", "42")]
    assert not (claude.workspace / ".claude").exists()  # the rule lives in the session, not the user's repo


async def test_L11_3_an_answer_to_a_request_whose_callback_is_gone_is_refused(claude):
    adapter = await claude.opened()
    turn, sink, task = claude.start(adapter, "#bash write a file")
    request = await sink.request()
    await adapter.interrupt(turn)
    await asyncio.wait_for(task, 60)

    assert sink.completed.status == "interrupted"
    with pytest.raises(Unsupported):
        await adapter.respond(request.request_id, Response(decision="accept"))
    assert not (claude.workspace / "bash.txt").exists()


@pytest.mark.filterwarnings("ignore::claude_agent_sdk.types.CanUseToolShadowedWarning")
@pytest.mark.parametrize("mode", ["approval_required", "full_access"])  # questions reach the user in every mode
async def test_L11_4_a_question_is_answered_through_the_tool_input(claude, mode):
    adapter = await claude.opened(runtime_mode=mode)
    _, sink, task = claude.start(adapter, "#ask which color")
    request = await answer(sink, task, Response(answers={"0": "Blue"}), adapter)
    await asyncio.wait_for(task, 60)

    assert request.kind == "user_input" and request.prompt == "Which color do you prefer?"
    (question,) = request.questions
    assert [(o.label, o.description) for o in question.options] == [("Blue", "like the sea"), ("Red", "like fire")]
    assert '"Which color do you prefer?"="Blue"' in sink.texts()[-1]
    assert sink.of(pe.ToolStarted) == []  # the question is the request's node, not a tool node
    assert sink.completed.status == "completed"


async def test_L12_1_todo_write_becomes_the_runs_todo_list(claude):
    adapter = await claude.opened()
    turn, sink = await claude.play(adapter, "#todo plan it")

    (plan,) = sink.of(pe.PlanUpdated)
    assert plan.kind == "todo_list" and plan.node_id == turn.root_node_id
    assert [(i.text, i.status) for i in plan.items] == [
        ("Read the code", "completed"),
        ("Write the fix", "in_progress"),
        ("Run the tests", "pending"),
    ]
    assert sink.of(pe.ToolStarted) == []
    assert sink.completed.status == "completed"


async def test_L12_1_exit_plan_mode_becomes_a_proposed_plan_and_nothing_is_implemented(claude):
    adapter = await claude.opened()
    _, sink = await claude.play(adapter, "#plan make a plan")

    (plan,) = sink.of(pe.PlanUpdated)
    assert plan.kind == "proposed_plan" and plan.text.startswith("1. Write plan.txt")
    assert "shown to the user as a proposed plan" in sink.texts()[-1]
    assert sink.completed.status == "completed"
    # The user's next message implements it, in the thread's own mode again (plan mode forbids writing).
    _, implement, task = claude.start(adapter, "#write implement the plan")
    await answer(implement, task, Response(decision="accept"), adapter)
    await asyncio.wait_for(task, 60)
    assert (claude.workspace / "written.txt").read_text() == "written by claude\n"


async def test_L8_2_an_interrupt_ends_the_turn_interrupted_and_the_next_turn_works(claude):
    adapter = await claude.opened()
    turn, sink, task = claude.start(adapter, "#slow tell me a long story")
    await wait_for(lambda: sink.live, timeout=30, what="the first streamed words")
    await adapter.interrupt(turn)
    await asyncio.wait_for(task, 30)

    assert sink.events[-1] == pe.TurnCompleted(status="interrupted")
    # The cut-off answer is not reported as a finished message (it would count as the run's answer, L3.4).
    assert sink.texts() == []
    (partial,) = ["".join(chunks) for chunks in sink.live.values()]
    assert partial.startswith("word000") and not partial.endswith("word299")
    _, after = await claude.play(adapter, "#text are you there")
    assert after.completed.status == "completed"
    assert after.texts()[-1].endswith("#text are you there")


async def test_L8_2_a_turn_interrupted_before_its_prompt_was_sent_ends_without_sending_it(claude, api):
    adapter = await claude.opened()
    first, first_sink, first_task = claude.start(adapter, "#slow keep talking")
    await wait_for(lambda: first_sink.live, timeout=30, what="the first turn streaming")
    waiting, sink, task = claude.start(adapter, "#text never sent")
    await wait_for(lambda: waiting.attempt_id in adapter._waiting, what="the second turn waiting for the first")
    await adapter.interrupt(waiting)
    await adapter.interrupt(first)
    await asyncio.wait_for(asyncio.gather(first_task, task), 60)

    assert first_sink.completed.status == "interrupted"
    assert [type(e) for e in sink.events] == [pe.TurnStarted, pe.TurnCompleted]
    assert sink.completed.status == "interrupted"
    assert "never sent" not in str(api.prompts())
    _, after = await claude.play(adapter, "#text the next one")
    assert after.completed.status == "completed"


async def _interrupted_before_sending(claude, adapter, run_id: str, text: str) -> None:
    """Play ``text`` as a turn of ``run_id`` that is interrupted while an earlier turn still holds the CLI."""
    holder, holder_sink, holder_task = claude.start(adapter, "#slow hold the CLI")
    await wait_for(lambda: holder_sink.live, timeout=30, what="the holding turn streaming")
    waiting, sink = new_turn(text), RecordingSink()
    waiting.run_id = run_id
    task = asyncio.create_task(adapter.run_turn(waiting, sink))
    await wait_for(lambda: waiting.attempt_id in adapter._waiting, what="the turn waiting for the holding one")
    await adapter.interrupt(waiting)
    await adapter.interrupt(holder)
    await asyncio.wait_for(asyncio.gather(holder_task, task), 60)
    assert sink.completed.status == "interrupted"


async def test_L3_3_a_steering_restart_carries_the_prompt_its_interrupted_attempt_never_sent(claude, api):
    adapter = await claude.opened()
    await _interrupted_before_sending(claude, adapter, "run_essay", "#slow write an essay about whales")
    assert "whales" not in str(api.prompts())

    restart, sink = new_turn("#text make it short"), RecordingSink()
    restart.run_id = "run_essay"  # the same run: its steering restart
    await asyncio.wait_for(adapter.run_turn(restart, sink), 60)
    assert api.prompts()[-1] == "#slow write an essay about whales\n\n#text make it short"
    assert sink.completed.status == "completed"

    # A plain interrupt ends its run: the next run does not take the unsent prompt.
    await _interrupted_before_sending(claude, adapter, "run_stopped", "#text delete everything")
    nxt, sink = new_turn("#text something else"), RecordingSink()
    nxt.run_id = "run_next"
    await asyncio.wait_for(adapter.run_turn(nxt, sink), 60)
    assert api.prompts()[-1] == "#text something else" and "delete everything" not in str(api.prompts())


async def test_L9_2_close_and_reopen_resumes_the_same_claude_session(claude, api):
    first = await claude.opened()
    ref = first.session_id
    await claude.play(first, "#text remember the word teapot")
    await first.close()

    second = claude.adapter()
    assert await second.open_thread(ref, "unused") == (ref, True)
    _, sink = await claude.play(second, "#text what was the word")

    assert sink.completed.status == "completed"
    history = api.seen[-1].body["messages"]
    assert any("remember the word teapot" in str(m["content"]) for m in history)
    assert "remember the word teapot" in claude.adapters[0].store.transcript(ref).read_text()
    assert len(list(second.store.projects.glob(f"*/{ref}.jsonl"))) == 1


async def test_L6_2_a_fork_is_a_new_claude_session_with_the_history_and_the_source_is_untouched(claude, api):
    source = await claude.opened()
    first, _ = await claude.play(source, "#text turn one")
    await claude.play(source, "#text turn two")
    whole = await source.fork(None)
    at_first = await source.fork(first.native_ref)
    before = source.store.transcript(source.session_id).read_text()

    fork = claude.adapter()
    assert await fork.open_thread(whole, "unused") == (whole, True)
    _, sink = await claude.play(fork, "#text in the fork")
    assert whole != source.session_id and sink.completed.status == "completed"
    history = str(api.seen[-1].body["messages"])
    assert "turn one" in history and "turn two" in history
    assert fork.store.transcript(whole) is not None

    early = claude.adapter()
    await early.open_thread(at_first, "unused")
    await claude.play(early, "#text in the early fork")
    history = str(api.seen[-1].body["messages"])
    assert "turn one" in history and "turn two" not in history
    assert source.store.transcript(source.session_id).read_text() == before


async def test_L10_5_rollback_drops_the_last_turns_from_claudes_conversation_durably(claude, api):
    adapter = await claude.opened()
    ref = adapter.session_id
    one, _ = await claude.play(adapter, "#text turn one")
    await claude.play(adapter, "#text turn two")
    await claude.play(adapter, "#text turn three")

    snapshot = await adapter.rollback(2)
    assert snapshot == {"session_id": ref, "turns": [one.native_ref]}
    await adapter.close()  # before any new turn: the rollback must survive a new process
    reopened = claude.adapter()
    assert await reopened.open_thread(ref, "unused") == (ref, True)
    _, sink = await claude.play(reopened, "#text after the rollback")
    history = str(api.seen[-1].body["messages"])
    assert sink.completed.status == "completed"
    assert "turn one" in history and "turn two" not in history and "turn three" not in history

    await reopened.close()
    again = await claude.opened(ref)
    await claude.play(again, "#text later")
    history = str(api.seen[-1].body["messages"])
    assert "after the rollback" in history and "turn two" not in history
    with pytest.raises(Unsupported):
        await again.rollback(3)  # every turn: Claude Code cannot resume before the first


def claude_processes() -> list[psutil.Process]:
    """The Claude Code CLIs this test process started (not their own children, such as shells)."""
    return [p for p in psutil.Process(os.getpid()).children() if p.cmdline()[:1] and p.cmdline()[0].endswith("/claude")]


async def test_L9_3_a_claude_process_that_dies_mid_turn_is_a_lost_runtime_and_the_next_turn_resumes(claude, api):
    from treadle.providers.base import RuntimeLost

    adapter = await claude.opened()
    await claude.play(adapter, "#text keep this in mind")
    turn, sink, task = claude.start(adapter, "#slow a long answer")
    await wait_for(lambda: sink.live, timeout=30, what="the first streamed words")
    (cli,) = claude_processes()
    os.kill(cli.pid, signal.SIGKILL)
    with pytest.raises(RuntimeLost) as lost:
        await asyncio.wait_for(task, 30)

    # The host retries the run (L9.3): no end of the turn is reported, and the error is one clean line.
    assert not sink.of(pe.TurnCompleted) and str(lost.value).startswith("Claude Code")
    assert "\x1b" not in str(lost.value)
    # The partial answer streamed, and is not reported as a finished one: the run's end closes it as incomplete.
    assert [m for m, chunks in sink.live.items() if "".join(chunks).startswith("word000")] and sink.texts() == []
    _, after = await claude.play(adapter, "#text still there?")
    assert after.completed.status == "completed"
    assert "keep this in mind" in str(api.seen[-1].body["messages"])
    assert [p.pid for p in claude_processes()] != [cli.pid]


async def test_L9_2_a_turn_cut_off_by_a_host_crash_is_left_out_when_the_session_resumes(claude, api):
    adapter = await claude.opened()
    ref = adapter.session_id
    await claude.play(adapter, "#text the first message")
    turn, sink, task = claude.start(adapter, "#slow the message that was cut off")
    await wait_for(lambda: sink.live, timeout=30, what="the first streamed words")
    task.cancel()  # the host dies: nothing of this turn is reported any more, and its process goes too
    await asyncio.gather(task, return_exceptions=True)
    await adapter.close()

    resumed = await claude.opened(ref)
    _, after = await claude.play(resumed, "#text the message again")
    history = str(api.seen[-1].body["messages"])
    assert after.completed.status == "completed"
    assert "the first message" in history and "cut off" not in history and "word000" not in history


async def test_L2_5_an_api_error_fails_the_turn_with_the_providers_message_and_the_next_turn_works(claude):
    adapter = await claude.opened()
    _, sink = await claude.play(adapter, "#error please")

    assert sink.completed.status == "failed"
    assert "mock refuses this request" in sink.completed.error and "400" in sink.completed.error
    assert sink.texts() == []  # the CLI's synthetic "API Error" message is the error, not a reply
    _, after = await claude.play(adapter, "#text again")
    assert after.completed.status == "completed"


async def test_L2_4_a_subagents_events_nest_under_its_child_node(claude):
    adapter = await claude.opened()
    turn, sink, task = claude.start(adapter, "#subagent delegate")
    request = await answer(sink, task, Response(decision="accept"), adapter)
    await asyncio.wait_for(task, 60)

    agent = next(s for s in sink.of(pe.ToolStarted) if s.kind == "subagent")
    assert agent.parent_id == turn.root_node_id and agent.title == "Say hi"
    bash = next(s for s in sink.of(pe.ToolStarted) if s.kind == "tool")
    assert bash.parent_id == agent.node_id
    assert request.parent_id == agent.node_id
    assert "subagent says hi (from-sub)" in sink.texts(agent.node_id)
    assert all("subagent says hi" not in t for t in sink.texts(turn.root_node_id) if not t.startswith("The agent"))
    closed = {c.node_id: c.status for c in sink.of(pe.ToolCompleted)}
    assert closed[agent.node_id] == "completed" and closed[bash.node_id] == "completed"
    assert (claude.workspace / "sub.txt").read_text() == "from-sub\n"
    assert sink.completed.status == "completed"


async def test_L2_4_a_background_subagent_ends_inside_its_run(claude):
    adapter = await claude.opened()
    turn, sink, task = claude.start(adapter, "#background delegate")
    await answer(sink, task, Response(decision="accept"), adapter)
    await asyncio.wait_for(task, 60)

    agent = next(s for s in sink.of(pe.ToolStarted) if s.kind == "subagent")
    agent_done = [
        i for i, e in enumerate(sink.events) if isinstance(e, pe.ToolCompleted) and e.node_id == agent.node_id
    ]
    assert len(agent_done) == 1 and agent_done[0] < len(sink.events) - 1
    assert sink.events[agent_done[0]].output.startswith("subagent says hi")
    assert sink.texts(turn.root_node_id)[-1] == "The background agent finished."
    assert sink.completed.status == "completed"


@pytest.mark.filterwarnings("ignore::claude_agent_sdk.types.CanUseToolShadowedWarning")  # intended in full access
@pytest.mark.parametrize(
    "mode,prompt,asks",
    [
        ("approval_required", "#write a file", True),
        ("auto_accept_edits", "#write a file", False),
        ("auto_accept_edits", "#python run it", True),
        ("full_access", "#bash run it", False),
    ],
)
async def test_L11_1_runtime_modes_decide_what_needs_approval(claude, mode, prompt, asks):
    adapter = await claude.opened(runtime_mode=mode)
    _, sink, task = claude.start(adapter, prompt)
    if asks:
        request = await answer(sink, task, Response(decision="accept"), adapter)
        assert request.kind == ("file_change" if "write" in prompt else "command")
    await asyncio.wait_for(task, 60)

    assert bool(sink.of(pe.RequestOpened)) == asks
    assert [d.status for d in sink.of(pe.ToolCompleted)] == ["completed"]
    assert sink.completed.status == "completed"


async def test_thinking_is_recorded_as_a_node_not_as_reply_text(claude):
    adapter = await claude.opened()
    turn, sink = await claude.play(adapter, "#think hi")

    (thinking,) = sink.of(pe.ToolStarted)
    assert thinking.title == "Thinking" and thinking.parent_id == turn.root_node_id
    assert sink.of(pe.ToolCompleted)[0].output == "The user wants a greeting; keep it short."
    assert sink.texts() == ["Hello after thinking."]
