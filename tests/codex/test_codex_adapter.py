"""The Codex adapter against the real ``codex app-server`` and the mock model API (issue 7)."""

from __future__ import annotations

import asyncio

import pytest

from tests.codex.codex_mock import Ask, Break, Exec, Failed, HttpError, Patch, PlanUpdate, Reasoning, Stall, Text
from tests.support.helpers import wait_for
from treadle.core import provider_events as pe
from treadle.providers.base import Response, Unsupported


async def opened_request(sink) -> pe.RequestOpened:
    return await wait_for(lambda: next(iter(sink.of(pe.RequestOpened)), None), timeout=30, what="a request")


async def ended(task: asyncio.Task, sink, timeout: float = 30) -> pe.TurnCompleted:
    async with asyncio.timeout(timeout):
        await task
    return sink.completed


async def test_L2_1_plain_turn_streams_text_reasoning_and_completes(open_driver, mock):
    mock.on("say hello", [Reasoning("thinking about hello"), Text("Hello from the mock!", chunks=3)])
    driver = await open_driver()
    sink = await driver.play("say hello")
    assert sink.of(pe.TurnStarted)[0].native_turn_ref
    assert sink.completed.status == "completed", sink.events
    assert sink.reply == "Hello from the mock!"
    assert ["".join(c) for c in sink.chunks.values()] == ["Hello from the mock!"]
    assert len(next(iter(sink.chunks.values()))) == 3  # streamed as the model sent it
    reasoning = [e for e in sink.of(pe.ToolStarted) if e.title == "reasoning"]
    done = {e.node_id: e for e in sink.of(pe.ToolCompleted)}
    assert reasoning and "thinking about hello" in (done[reasoning[0].node_id].output or "")
    assert not mock.connects  # nothing tried to leave the host


async def test_L11_2_approved_command_runs_and_its_file_lands(open_driver, mock, workspace):
    mock.on("make a file", [Exec("echo approved > approved.txt")], [Text("Created approved.txt.")])
    driver = await open_driver()
    turn, sink, task = driver.start("make a file")
    request = await opened_request(sink)
    assert request.kind == "command"
    assert request.prompt == f"Run `echo approved > approved.txt` in {workspace.resolve()}"
    assert (request.command, request.cwd) == ("echo approved > approved.txt", str(workspace.resolve()))
    assert not (workspace / "approved.txt").exists()  # nothing ran before the answer
    await driver.adapter.respond(request.request_id, Response(decision="accept"))
    assert (await ended(task, sink)).status == "completed"
    assert (workspace / "approved.txt").read_text() == "approved\n"
    tool = next(e for e in sink.of(pe.ToolStarted) if "approved.txt" in e.title)
    result = next(e for e in sink.of(pe.ToolCompleted) if e.node_id == tool.node_id)
    assert result.status == "completed"
    assert sink.reply == "Created approved.txt."
    with pytest.raises(Unsupported):  # L11.3: the callback is used up
        await driver.adapter.respond(request.request_id, Response(decision="accept"))


async def test_L11_1_an_approval_shows_the_command_that_will_run_not_the_models_description_of_it(
    open_driver, mock, workspace
):
    """Issue 25: the model calls ``rm -rf ~/notes`` "list the files"; the approval shows the command and where it
    runs, with the model's words only as the description."""
    mock.on("tidy up", [Exec("rm -rf ~/notes", escalate=True, justification="list the files")], [Text("Left it.")])
    driver = await open_driver()
    turn, sink, task = driver.start("tidy up")
    request = await opened_request(sink)
    assert request.kind == "command"
    assert (request.command, request.cwd) == ("rm -rf ~/notes", str(workspace.resolve()))
    assert request.prompt == f"Run `rm -rf ~/notes` in {workspace.resolve()}"
    assert request.description == "list the files"
    await driver.adapter.respond(request.request_id, Response(decision="decline"))
    assert (await ended(task, sink)).status == "completed"


async def test_L11_2_declined_command_does_not_run(open_driver, mock, workspace):
    mock.on("delete everything", [Exec("echo nope > declined.txt")], [Text("Understood, I did not run it.")])
    driver = await open_driver()
    turn, sink, task = driver.start("delete everything")
    request = await opened_request(sink)
    await driver.adapter.respond(request.request_id, Response(decision="decline"))
    assert (await ended(task, sink)).status == "completed"
    assert not (workspace / "declined.txt").exists()
    tool = next(e for e in sink.of(pe.ToolStarted) if "declined.txt" in e.title)
    result = next(e for e in sink.of(pe.ToolCompleted) if e.node_id == tool.node_id)
    assert result.status == "cancelled"
    # the model was told: the follow-up request carries the rejection as the tool's output
    follow_up = [r for r in mock.requests if r.prompt == "delete everything" and r.tool_outputs]
    assert "rejected" in str(follow_up[-1].tool_outputs[-1]).lower()


async def test_L11_2_file_change_approval_applies_the_patch(open_driver, mock, workspace):
    mock.on("add notes", [Patch("notes.md", "# Notes\nfrom a patch\n")], [Text("Added notes.md.")])
    driver = await open_driver()
    turn, sink, task = driver.start("add notes")
    request = await opened_request(sink)
    assert request.kind == "file_change"
    [edit] = request.files
    assert edit.path.endswith("notes.md") and edit.change == "add" and "from a patch" in edit.diff
    assert request.prompt == f"Create {edit.path}" and request.command is None
    assert not (workspace / "notes.md").exists()
    await driver.adapter.respond(request.request_id, Response(decision="accept"))
    assert (await ended(task, sink)).status == "completed"
    assert (workspace / "notes.md").read_text() == "# Notes\nfrom a patch\n"


async def test_L11_2_bad_decision_is_a_clear_error_and_keeps_the_request_live(open_driver, mock, workspace):
    mock.on("touch bad", [Exec("touch bad.txt")], [Text("ok")])
    driver = await open_driver()
    turn, sink, task = driver.start("touch bad")
    request = await opened_request(sink)
    with pytest.raises(ValueError):
        await driver.adapter.respond(request.request_id, Response(answers={"x": "y"}))
    await driver.adapter.respond(request.request_id, Response(decision="cancel"))
    assert (await ended(task, sink)).status == "interrupted"  # codex ends the turn on a cancel
    assert not (workspace / "bad.txt").exists()


async def test_todo_list_from_plan_updates(open_driver, mock):
    mock.on(
        "plan the work",
        [PlanUpdate("two steps", [("read the code", "completed"), ("write the fix", "in_progress")])],
        [Text("Plan noted.")],
    )
    driver = await open_driver()
    sink = await driver.play("plan the work")
    assert sink.completed.status == "completed"
    plan = sink.of(pe.PlanUpdated)[-1]
    assert plan.kind == "todo_list"
    assert [(i.text, i.status) for i in plan.items] == [
        ("read the code", "completed"),
        ("write the fix", "in_progress"),
    ]


async def test_L11_4_plan_mode_question_answered_then_proposed_plan(open_driver, mock):
    mock.on(
        "design it",
        [Ask("color", "Pick a color?", ["Red", "Blue"])],
        [Text("Here is my plan.\n<proposed_plan>\n# Plan\n- paint it blue\n</proposed_plan>\n")],
    )
    driver = await open_driver()
    turn, sink, task = driver.start("design it", {"collaboration_mode": "plan"})
    request = await opened_request(sink)
    assert request.kind == "user_input"
    assert request.prompt == "Pick a color?"
    [question] = request.questions
    assert (question.id, question.question) == ("color", "Pick a color?")
    assert [(o.label, o.description) for o in question.options] == [("Red", "option Red"), ("Blue", "option Blue")]
    await driver.adapter.respond(request.request_id, Response(answers={"color": "Blue"}))
    assert (await ended(task, sink)).status == "completed", sink.events
    answer = [r for r in mock.requests if r.prompt == "design it" and r.tool_outputs][-1].tool_outputs[-1]
    assert "Blue" in str(answer)
    proposed = [p for p in sink.of(pe.PlanUpdated) if p.kind == "proposed_plan"]
    assert proposed and "paint it blue" in proposed[0].text
    assert "Here is my plan." in sink.reply and "<proposed_plan>" not in sink.reply


async def test_L3_2_steer_joins_the_running_turn_natively(open_driver, mock):
    mock.on("write a long essay", [Text("Starting the essay"), Stall()])
    mock.on("make it short instead", [Text("Short version.")])
    driver = await open_driver()
    turn, sink, task = driver.start("write a long essay")
    await wait_for(lambda: mock.stalled, timeout=30, what="the model stream to stall")
    await driver.adapter.steer(turn, "make it short instead")
    assert (await ended(task, sink)).status == "completed"
    assert len(sink.of(pe.TurnStarted)) == 1  # one native turn, not a restart
    assert "Short version." in sink.reply
    steered = [r for r in mock.requests if r.prompt == "make it short instead"][-1]
    history = str(steered.body["input"])
    assert "write a long essay" in history  # the steer joined the same conversation turn
    snapshot = await driver.adapter.snapshot()
    assert [t["id"] for t in snapshot["turns"]][-1] == turn.native_ref


async def test_L3_2_a_codex_steer_reports_where_it_joined_the_turn(open_driver, mock):
    """Issue 25: Codex hands back the id a steer was sent with (the ``clientId`` of the user message it makes of
    it) where the steer joined the turn: after the text streamed before it, before the reply to it."""
    mock.on("outline the talk", [Text("Outlining"), Stall()])
    mock.on("only three points", [Text("Three points it is.")])
    driver = await open_driver()
    turn, sink, task = driver.start("outline the talk")
    await wait_for(lambda: mock.stalled, timeout=30, what="the model stream to stall")
    await driver.adapter.steer(turn, "only three points", "msg_steer1")  # at once: the text may not be reported yet
    assert (await ended(task, sink)).status == "completed"
    said = [sink.texts[x] if isinstance(x, str) else x for x in sink.said]
    joined = said.index(pe.SteerJoined(message_id="msg_steer1"))
    assert "Outlining" in said[:joined] and "Three points it is." in said[joined:], said
    assert sink.of(pe.SteerJoined) == [pe.SteerJoined(message_id="msg_steer1")]  # the turn's own prompt: none


async def test_L3_2_steer_without_a_playing_turn_is_unsupported(open_driver, mock):
    driver = await open_driver()
    await driver.play("just answer")
    with pytest.raises(Unsupported):
        await driver.adapter.steer(driver.turn("late"), "too late")


async def test_L8_2_interrupt_ends_the_turn_interrupted(open_driver, mock, workspace):
    mock.on("think forever", [Text("Let me think"), Stall()])
    driver = await open_driver()
    turn, sink, task = driver.start("think forever")
    await wait_for(lambda: mock.stalled, timeout=30, what="the model stream to stall")
    await driver.adapter.interrupt(turn)
    done = await ended(task, sink)
    assert done.status == "interrupted" and done.error is None
    # the thread is usable afterwards
    assert (await driver.play("are you there")).reply == "echo: are you there"


async def test_L11_3_interrupt_while_an_approval_waits_withdraws_it(open_driver, mock, workspace):
    mock.on("risky command", [Exec("touch risky.txt")], [Text("ran")])
    driver = await open_driver()
    turn, sink, task = driver.start("risky command")
    request = await opened_request(sink)
    await driver.adapter.interrupt(turn)
    assert (await ended(task, sink)).status == "interrupted"
    with pytest.raises(Unsupported):
        await driver.adapter.respond(request.request_id, Response(decision="accept"))
    assert not (workspace / "risky.txt").exists()


async def test_L9_2_close_and_reopen_resumes_the_same_thread_with_history(open_driver, mock):
    mock.on("remember the word pelican", [Text("I will remember pelican.")])
    first = await open_driver()
    await first.play("remember the word pelican")
    native_ref = first.adapter.thread_id
    await first.adapter.close()
    second = await open_driver(native_ref=native_ref)
    assert second.adapter.thread_id == native_ref
    sink = await second.play("what was the word")
    assert sink.completed.status == "completed"
    history = str(mock.requests[-1].body["input"])
    assert "remember the word pelican" in history and "I will remember pelican." in history
    texts = [i.get("text") for t in (await second.adapter.snapshot())["turns"] for i in t["items"]]
    assert "I will remember pelican." in texts


async def test_L9_2_resume_after_the_process_was_killed(open_driver, mock):
    import os
    import signal

    first = await open_driver()
    await first.play("first words")
    native_ref, pid = first.adapter.thread_id, first.adapter.pid
    os.kill(pid, signal.SIGKILL)
    second = await open_driver(native_ref=native_ref)
    sink = await second.play("after the crash")
    assert sink.completed.status == "completed"
    assert "first words" in str(mock.requests[-1].body["input"])


async def test_L9_4_resuming_an_unknown_thread_fails_typed_and_leaves_no_process(workspace, settings, tmp_path):
    from tests.codex.codex_support import place
    from treadle.providers.codex import CodexAdapter, ResumeFailed

    request = place(workspace, native_ref="019a0000-0000-7000-8000-000000000000")
    adapter = CodexAdapter(workspace, request, tmp_path / "rt" / request.session_id, settings)
    with pytest.raises(ResumeFailed):
        await adapter.open_thread(request.native_ref, "unused")
    import psutil

    assert not [p for p in psutil.Process().children() if p.name() == "codex"]  # its app-server was shut down


async def test_L6_2_fork_creates_a_new_native_thread_with_the_history(open_driver, mock):
    driver = await open_driver()
    first = await driver.play("fork point one")
    await driver.play("after the fork point")
    forked = await driver.adapter.fork(first.of(pe.TurnStarted)[0].native_turn_ref)
    assert forked != driver.adapter.thread_id
    branch = await open_driver(native_ref=forked)
    snapshot = await branch.adapter.snapshot()
    assert snapshot["forked_from"] == driver.adapter.thread_id
    await branch.play("on the branch")
    history = str(mock.requests[-1].body["input"])
    assert "fork point one" in history and "after the fork point" not in history


async def test_L10_5_rollback_drops_the_last_turns(open_driver, mock):
    driver = await open_driver()
    await driver.play("keep this turn")
    await driver.play("drop this turn")
    snapshot = await driver.adapter.rollback(1)
    assert len(snapshot["turns"]) == 1
    await driver.play("after rollback")
    history = str(mock.requests[-1].body["input"])
    assert "keep this turn" in history and "drop this turn" not in history
    with pytest.raises(ValueError):
        await driver.adapter.rollback(5)


async def test_L2_5_backend_500_fails_the_turn_with_the_provider_message_and_the_next_works(open_driver, mock):
    mock.on("break the backend", [HttpError(500, "mock backend exploded")])
    mock.on("bad request", [HttpError(400, "mock rejects this request")])
    driver = await open_driver()
    sink = await driver.play("break the backend")
    assert sink.completed.status == "failed"
    assert "high demand" in sink.completed.error  # codex 0.171's own words for a 500
    assert (await driver.play("try again")).completed.status == "completed"
    sink = await driver.play("bad request")
    assert sink.completed.status == "failed"
    assert "mock rejects this request" in sink.completed.error  # the backend's message, through codex


async def test_L2_5_broken_stream_fails_the_turn_and_the_next_works(open_driver, mock):
    mock.on("cut me off", [Text("partial"), Break()])
    mock.on("fail mid-stream", [Text("partial"), Failed("the mock gave up on this response")])
    driver = await open_driver()
    sink = await driver.play("cut me off")
    assert sink.completed.status == "failed"
    assert "stream" in (sink.completed.error or "").lower()
    assert (await driver.play("again please")).completed.status == "completed"
    sink = await driver.play("fail mid-stream")
    assert sink.completed.status == "failed"
    assert "the mock gave up on this response" in (sink.completed.error or "")
    assert (await driver.play("and again")).completed.status == "completed"


async def test_L9_3_a_dead_process_is_a_lost_runtime_not_a_failed_turn(open_driver, mock):
    import os
    import signal

    from treadle.providers.base import RuntimeLost

    mock.on("hang on", [Stall()])
    driver = await open_driver()
    turn, sink, task = driver.start("hang on")
    await wait_for(lambda: mock.stalled, timeout=30, what="the model stream to stall")
    os.kill(driver.adapter.pid, signal.SIGKILL)
    with pytest.raises(RuntimeLost) as lost:
        await ended(task, sink)
    # the host retries the run (L9.3): the turn reports no end of its own, and the error is one clean line
    assert not sink.of(pe.TurnCompleted)
    assert str(lost.value).startswith("codex app-server was killed by SIGKILL")
    assert "\x1b" not in str(lost.value) and "WARN" not in str(lost.value)
    # the session heals: a new process takes the same thread back for the next turn
    thread_id = driver.adapter.thread_id
    assert (await driver.play("still there?")).completed.status == "completed"
    assert driver.adapter.thread_id == thread_id
    assert "hang on" in str(mock.requests[-1].body["input"])


async def test_two_sessions_of_one_tenant_share_its_codex_home_at_the_same_time(
    open_driver, mock, homes_root, settings, tmp_path
):
    """Sessions of one tenant on a host share the tenant's CODEX_HOME (so a later session can resume any of
    its threads); concurrent app-server processes must not disturb each other there."""
    from tests.codex.codex_support import Driver, place
    from treadle.providers.codex import CodexAdapter

    others = []
    for n in range(2):
        ws = tmp_path / f"ws{n}"
        ws.mkdir()
        request = place(ws)
        adapter = CodexAdapter(ws, request, tmp_path / "rt" / request.session_id, settings)
        await adapter.open_thread(None, "unused")
        others.append(Driver(adapter))
    try:
        for n in range(2):
            mock.on(f"parallel {n}", [Text(f"reply {n}", chunks=5)])
        sinks = await asyncio.gather(*(d.play(f"parallel {n}") for n, d in enumerate(others)))
        assert [s.reply for s in sinks] == ["reply 0", "reply 1"]
        config = (homes_root / "acme" / "config.toml").read_text()
        assert config.startswith("# written by Treadle")
    finally:
        for d in others:
            await d.adapter.close()


async def test_unknown_turn_options_fail_the_turn_clearly_without_reaching_codex(open_driver, mock):
    driver = await open_driver()
    before = len(mock.requests)
    sink = await driver.play("with options", {"collaboration_mode": "chaos"})
    assert sink.completed.status == "failed" and "collaboration_mode" in sink.completed.error
    sink = await driver.play("with options", {"temperature": 2})
    assert sink.completed.status == "failed" and "temperature" in sink.completed.error
    assert len(mock.requests) == before
    assert (await driver.play("plain again")).completed.status == "completed"
    assert (await driver.adapter.snapshot())["token_usage"]["total"]["totalTokens"] > 0


async def test_runtime_mode_auto_accept_edits_applies_patches_and_asks_only_to_escalate(open_driver, mock, workspace):
    mock.on("edit freely", [Patch("auto.md", "no questions asked\n")], [Text("Edited.")])
    mock.on("leave the sandbox", [Exec("touch escalated.txt", escalate=True)], [Text("Escalated.")])
    driver = await open_driver(runtime_mode="auto_accept_edits")
    sink = await driver.play("edit freely")
    assert sink.completed.status == "completed" and not sink.of(pe.RequestOpened)
    assert (workspace / "auto.md").read_text() == "no questions asked\n"
    turn, sink, task = driver.start("leave the sandbox")
    request = await opened_request(sink)
    assert request.kind == "command" and request.prompt == f"Run `touch escalated.txt` in {workspace.resolve()}"
    assert request.description == "needs to run touch escalated.txt"  # the model's justification, beside it
    await driver.adapter.respond(request.request_id, Response(decision="accept"))
    assert (await ended(task, sink)).status == "completed"
    assert (workspace / "escalated.txt").exists()


async def test_runtime_mode_full_access_runs_commands_without_asking(open_driver, mock, workspace):
    mock.on("just do it", [Exec("echo free > free.txt")], [Text("Done.")])
    driver = await open_driver(runtime_mode="full_access")
    sink = await driver.play("just do it")
    assert sink.completed.status == "completed" and not sink.of(pe.RequestOpened)
    assert (workspace / "free.txt").read_text() == "free\n"


async def test_L11_2_accept_for_session_stops_asking_for_that_command(open_driver, mock, workspace):
    mock.on("count once", [Exec("echo 1 >> count.txt")], [Text("once")])
    mock.on("count twice", [Exec("echo 1 >> count.txt")], [Text("twice")])
    driver = await open_driver()
    turn, sink, task = driver.start("count once")
    request = await opened_request(sink)
    await driver.adapter.respond(request.request_id, Response(decision="accept_for_session"))
    assert (await ended(task, sink)).status == "completed"
    sink = await driver.play("count twice")
    assert sink.completed.status == "completed" and not sink.of(pe.RequestOpened)
    assert (workspace / "count.txt").read_text() == "1\n1\n"


async def test_L11_4_a_question_outside_plan_mode_with_an_unknown_answer_id_is_refused(open_driver, mock):
    mock.on("ask me", [Ask("size", "Which size?", ["S", "M", "L"])], [Text("Size noted.")])
    driver = await open_driver()
    turn, sink, task = driver.start("ask me")
    request = await opened_request(sink)
    assert request.kind == "user_input" and [o.label for o in request.questions[0].options] == ["S", "M", "L"]
    with pytest.raises(ValueError):
        await driver.adapter.respond(request.request_id, Response(answers={"colour": "red"}))
    await driver.adapter.respond(request.request_id, Response(answers={"0": "M"}))  # the only question
    assert (await ended(task, sink)).status == "completed"
    assert '"M"' in str([r for r in mock.requests if r.prompt == "ask me"][-1].tool_outputs[-1])


async def test_L11_4_a_question_answered_with_a_message_gives_the_model_that_message(open_driver, mock):
    """Issue 17: ``{"message": …}`` answers a question on every runtime (Claude delivers it; Codex got empty
    answers). A question without an answer of its own is answered with the message; one with its own keeps it."""
    mock.on("ask me", [Ask("size", "Which size?", ["S", "M", "L"])], [Text("Size noted.")])
    driver = await open_driver()
    turn, sink, task = driver.start("ask me")
    request = await opened_request(sink)
    await driver.adapter.respond(request.request_id, Response(message="medium, but check the stock first"))
    assert (await ended(task, sink)).status == "completed"
    output = str([r for r in mock.requests if r.prompt == "ask me"][-1].tool_outputs[-1])
    assert "medium, but check the stock first" in output, output
