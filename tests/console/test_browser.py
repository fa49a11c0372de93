"""The console in a real Chromium (Playwright, Debian's browser): sign in, watch a reply stream in, answer an
approval, steer and reorder the queue, roll back from the diff view, fork, and see another tenant's thread as
"not found". Every wait is on a page condition; each test saves a screenshot under its tmp folder and fails on
any console error."""

from __future__ import annotations

import json
from datetime import datetime

from playwright.async_api import expect

from tests.support.api import make_api
from tests.support.helpers import wait_for
from tests.support.lineage import workspace
from tests.support.rollbacks import run_to_end
from tests.support.scripts import HANG, script, text

STREAMED = "Streaming into the page, four characters at a time, before the run is done."


async def open_thread(console, thread: str) -> None:
    await console.page.goto(f"{console.base}/#/t/{thread}")
    await console.page.wait_for_selector(".thread[data-stream=open]")


async def send_from_composer(console, text: str, body: dict | None = None, mode: str = "auto") -> None:
    page = console.page
    await page.fill(".composer textarea[name=text]", text)
    await page.select_option(".composer select[name=mode]", mode)
    if body is not None:
        await page.click(".composer summary")
        await page.fill(".composer textarea[name=script]", json.dumps(body))
    await page.click(".composer button[type=submit]")


async def test_sign_in_shows_the_tenants_threads(console, api):
    thread = await api.create_thread(title="listed in the console")
    await console.sign_in(api.token)
    row = console.page.locator(f"tr[data-thread={thread}]")
    await expect(row).to_contain_text("listed in the console")
    await expect(row).to_contain_text("scripted")
    await expect(console.page.locator("#who")).to_contain_text(api.tenant)
    await console.shot("threads")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    assert await console.page.evaluate("document.cookie") == ""  # HttpOnly: the page cannot read its session
    assert console.errors == []


async def test_L2_1_a_scripted_reply_streams_into_the_page_before_the_run_completes(console, api):
    thread = await api.create_thread(title="streaming")
    await console.sign_in(api.token)
    await open_thread(console, thread)
    body = script(
        {"type": "text", "text": STREAMED, "chunk": 4, "delay_ms": 40},
        {"type": "approval", "kind": "command", "command": "true", "prompt": "finish"},  # holds the run open
    )
    await send_from_composer(console, "stream please", body)
    await expect(console.page.locator(".disposition .disp")).to_have_text("started")
    # Part of the reply, not all of it, is on the page: it arrived while the provider was still writing.
    await console.page.wait_for_function(
        """full => [...document.querySelectorAll('.msg.assistant .text')].some(
               e => e.textContent.length > 0 && e.textContent.length < full.length && full.startsWith(e.textContent))""",
        arg=STREAMED,
        polling="raf",
    )
    run = console.page.locator(".run").first
    assert await run.get_attribute("data-status") != "completed"
    await expect(console.page.locator(".msg.assistant .text").first).to_have_text(STREAMED)
    await expect(run).not_to_have_attribute("data-status", "completed")
    await console.shot("streaming")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    assert console.errors == []


async def test_L11_an_approval_answered_by_a_click_lets_the_run_finish(console, api):
    thread = await api.create_thread(title="approval")
    sent = await api.send(
        thread,
        "clean up",
        script=script(
            {"type": "text", "text": "I will clean the build."},
            {"type": "approval", "kind": "command", "command": "rm -rf build", "prompt": "tidy the folder"},
            {"type": "text", "text": "All done."},
        ),
    )
    await api.wait_request(thread)
    await console.sign_in(api.token)
    await open_thread(console, thread)
    request = console.page.locator(".request.pending")
    await expect(request.locator("code.command")).to_have_text("rm -rf build")  # the exact command, not the words
    # the workspace's own path, not the host's (.../workspaces/<tenant>/threads/<id>)
    await expect(request.locator("code.cwd")).to_have_text(".")
    await expect(console.page.locator("main")).not_to_contain_text("/workspaces/")
    await expect(request.locator(".model")).to_contain_text("tidy the folder")
    await console.shot("approval")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    await request.locator("button.approve").click()
    run = console.page.locator(f".run[data-run={sent['run_id']}]")
    await expect(run).to_have_attribute("data-status", "completed")
    await expect(run.locator(".msg.assistant").last).to_contain_text("All done.")
    await expect(run.locator(".request .answer")).to_have_text("Approved")  # in words, not {"decision": ...}
    assert (await api.run(sent["run_id"]))["status"] == "completed"
    await console.shot("approved")
    assert console.errors == []


async def test_another_tenants_thread_in_the_url_is_not_found(console, api, stack, stack_nc, tenant):
    other = await make_api(stack, stack_nc, tenant + "other")
    try:
        theirs = await other.create_thread(title="not yours")
    finally:
        await other.close()
    await console.sign_in(api.token)
    await console.page.goto(f"{console.base}/#/t/{theirs}")
    await expect(console.page.locator(".notfound h1")).to_have_text("Thread not found")
    await expect(console.page.locator(".notfound .error")).to_contain_text("thread_not_found")
    await expect(console.page.locator("body")).not_to_contain_text("not yours")
    await console.shot("not-found")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    await console.page.goto(f"{console.base}/#/t/thr_NOT*AN*ID")  # not an id at all
    await expect(console.page.locator(".thread .error")).to_contain_text("invalid_id")
    # the 404 and 400 of the reads are the expected answers, and the only things the browser reports
    assert all("404" in e or "400" in e for e in console.errors), console.errors


async def test_L3_6_a_queue_reorder_and_a_steer_behave_as_the_api_says(console, api):
    thread = await api.create_thread(title="queue")
    active = await api.send(thread, "hold", script=script(HANG, profile="full"))
    await api.wait_running(active["run_id"])
    first = await api.send(thread, "first queued", mode="queue_after_active")
    second = await api.send(thread, "second queued", mode="queue_after_active")
    await console.sign_in(api.token)
    await open_thread(console, thread)
    items = console.page.locator(".queue li")
    await expect(items).to_have_count(2)
    await expect(console.page.locator(".run")).to_have_count(1)  # queued runs are drawn once: in the queue
    await expect(items.first).to_contain_text("first queued")
    await items.first.locator("button[title=down]").click()
    await expect(items.first).to_contain_text("second queued")
    queue = (await api.request("GET", f"/v1/threads/{thread}/queue")).json()
    assert [q["run_id"] for q in queue["queue"]] == [second["run_id"], first["run_id"]]
    await console.shot("queue")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    await send_from_composer(console, "change course", mode="steer_active")
    await expect(console.page.locator(".disposition .disp")).to_have_text("steered")
    await expect(console.page.locator(f".run[data-run={active['run_id']}] .msg.user")).to_contain_text(
        ["change course"]
    )
    assert console.errors == []


async def test_L10_5_a_rollback_from_the_diff_view_restores_the_file(console, api, stack):
    thread = await api.create_thread(title="rollback")
    write = lambda content: script({"type": "write_file", "path": "notes.txt", "content": content})  # noqa: E731
    await run_to_end(api, thread, "write one", write("one\n"))
    await run_to_end(api, thread, "write two", write("two\n"))
    path = workspace(stack, api.tenant, thread) / "notes.txt"
    assert path.read_text() == "two\n"
    await console.sign_in(api.token)
    await open_thread(console, thread)
    run1 = console.page.locator(".run").first
    await run1.locator("button", has_text="Changes").click()
    await expect(run1.locator(".diffbox .dfile summary")).to_contain_text("notes.txt")
    await expect(run1.locator(".diffbox .diffview .dl.add")).to_contain_text(["+one"])
    await console.shot("diff")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    # Rollback asks first, naming what it undoes; "Keep them" changes nothing.
    await run1.locator("button.rollback").click()
    confirm = run1.locator(".confirm")
    await expect(confirm).to_contain_text("This undoes 1 run")
    await expect(confirm.locator("ul.undone li")).to_have_text(["Run 2 (completed) “write two”"])
    await console.shot("rollback-confirm")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    await confirm.locator("button", has_text="Keep them").click()
    await expect(confirm).to_have_count(0)
    assert path.read_text() == "two\n"
    await run1.locator("button.rollback").click()
    await expect(confirm.locator(".files")).to_contain_text("notes.txt")  # the files it puts back, named
    await confirm.locator("input[name=keep_copy]").check()  # the way back: the undone work, forked first
    await run1.locator(".confirm button.confirm-rollback").click()
    notice = console.page.locator(".notice .ok")
    await expect(notice).to_contain_text("Rolled back to run 1's files; undid run 2.")
    assert path.read_text() == "one\n"
    kept = (await notice.locator("a.kept").get_attribute("href")).removeprefix("#/t/")
    assert (await api.thread(kept))["thread"]["parent_thread_id"] == thread
    copy = lambda: workspace(stack, api.tenant, kept) / "notes.txt"  # noqa: E731
    await wait_for(lambda: copy().is_file() and copy().read_text() == "two\n", what="the fork's copy of notes.txt")
    await expect(console.page.locator(".run").nth(1)).to_have_attribute("data-status", "rolled_back")
    assert console.errors == []


async def test_L6_a_fork_from_a_run_opens_the_new_thread(console, api):
    thread = await api.create_thread(title="fork source")
    await run_to_end(api, thread, "hello", script({"type": "text", "text": "hi there"}))
    await console.sign_in(api.token)
    await open_thread(console, thread)
    await console.page.locator(".run button", has_text="Fork from here").click()
    await console.page.wait_for_function(
        "t => location.hash.startsWith('#/t/') && !location.hash.endsWith(t)", arg=thread
    )
    await expect(console.page.locator(".thread .meta")).to_contain_text(f"forked from {thread}")
    await console.shot("fork")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    assert console.errors == []


async def test_L11_a_question_answered_with_an_option_lets_the_run_finish(console, api):
    thread = await api.create_thread(title="question")
    options = [{"label": "Blue", "description": "calm"}, {"label": "Red", "description": "loud"}]
    sent = await api.send(
        thread,
        "pick",
        script=script({"type": "question", "prompt": "Which colour?", "options": options}, {"type": "echo"}),
    )
    await api.wait_request(thread)
    await console.sign_in(api.token)
    await open_thread(console, thread)
    question = console.page.locator(".request.pending .question")
    await expect(question).to_contain_text("Which colour?")
    await expect(question.locator("button.option")).to_have_count(2)
    await question.locator("button.option", has_text="Red").click()
    run = console.page.locator(f".run[data-run={sent['run_id']}]")
    await expect(run).to_have_attribute("data-status", "completed")
    request = (await api.thread(thread))["requests"][0]
    assert request["status"] == "resolved" and "Red" in json.dumps(request["response"])
    await console.shot("question")
    assert console.errors == []


async def test_L8_interrupt_from_the_page_interrupts_the_run(console, api):
    thread = await api.create_thread(title="interrupt")
    sent = await api.send(thread, "hold", script=script(HANG, profile="full"))
    await api.wait_running(sent["run_id"])
    await console.sign_in(api.token)
    await open_thread(console, thread)
    run = console.page.locator(f".run[data-run={sent['run_id']}]")
    await run.locator("button", has_text="Interrupt").click()
    await expect(run).to_have_attribute("data-status", "interrupted")
    assert (await api.run(sent["run_id"]))["status"] == "interrupted"
    await console.shot("interrupted")
    assert console.errors == []


async def test_L3_6_queue_edit_cancel_and_drag_reorder(console, api):
    thread = await api.create_thread(title="queue edits")
    active = await api.send(thread, "hold", script=script(HANG, profile="full"))
    await api.wait_running(active["run_id"])
    a = await api.send(thread, "alpha", mode="queue_after_active")
    b = await api.send(thread, "beta", mode="queue_after_active")
    c = await api.send(thread, "gamma", mode="queue_after_active")
    await console.sign_in(api.token)
    await open_thread(console, thread)
    items = console.page.locator(".queue li")
    await expect(items).to_have_count(3)
    await items.nth(2).drag_to(items.nth(0))
    await expect(items.nth(0)).to_contain_text("gamma")
    # edited inline (no window.prompt): Enter saves, as in the composer
    await console.page.locator(f".queue li[data-queued={a['run_id']}] button", has_text="Edit").click()
    field = console.page.locator(f".queue li[data-queued={a['run_id']}] textarea.qedit")
    await expect(field).to_be_focused()
    await expect(field).to_have_value("alpha")
    await field.fill("alpha, edited")
    await console.shot("queue-editing")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    await field.press("Enter")
    await expect(console.page.locator(f".queue li[data-queued={a['run_id']}] .qtext")).to_have_text("alpha, edited")
    beta = console.page.locator(f".queue li[data-queued={b['run_id']}]")
    await beta.locator("button", has_text="Cancel").click()  # asks first, quoting the message
    await expect(beta.locator(".confirm")).to_contain_text("“beta” will not run")
    await beta.locator(".confirm button", has_text="Keep it").click()
    await expect(beta.locator(".confirm")).to_have_count(0)
    await beta.locator("button", has_text="Cancel").click()
    await beta.locator(".confirm button.confirm-drop").click()
    await expect(items).to_have_count(2)
    queue = (await api.request("GET", f"/v1/threads/{thread}/queue")).json()["queue"]
    assert [(q["run_id"], q["text"]) for q in queue] == [(c["run_id"], "gamma"), (a["run_id"], "alpha, edited")]
    assert (await api.run(b["run_id"]))["status"] == "cancelled"
    await console.shot("queue-edited")
    assert console.errors == []


async def test_L5_4_a_clean_context_run_shows_its_handoff(console, api):
    thread = await api.create_thread(title="handoff")
    await run_to_end(api, thread, "remember the colour blue", script({"type": "text", "text": "noted"}))
    await console.sign_in(api.token)
    await open_thread(console, thread)
    await console.page.check(".composer input[name=clean_context]")
    await send_from_composer(console, "what did I say?", script({"type": "echo"}))
    second = console.page.locator(".run").nth(1)
    await expect(second).to_have_attribute("data-status", "completed")
    handoff = second.locator("details.handoff")
    await expect(handoff.locator(".strategy")).to_have_text("full_thread_summary")
    await handoff.locator("summary").click()
    await expect(handoff.locator("pre")).to_contain_text("remember the colour blue")
    await console.shot("handoff")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    assert console.errors == []


async def test_L1_1_a_new_thread_from_the_form_and_a_refused_mode_shown_as_the_api_states_it(console, api):
    await console.sign_in(api.token)
    page = console.page
    await page.click("text=New thread")
    await page.fill("input[name=title]", "made in the browser")
    await page.select_option("select[name=runtime_mode]", "full_access")  # not allowed by the default policy
    await page.click("button[type=submit]")
    await expect(page.locator("form .error")).to_contain_text("mode_not_allowed")
    await console.shot("new-thread-refused")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    assert (await (await api.request("GET", "/v1/threads")).aread()).count(b"made in the browser") == 0
    await page.select_option("select[name=runtime_mode]", "approval_required")
    await page.click("button[type=submit]")
    await expect(page.locator(".thread h1")).to_have_text("made in the browser")
    thread = page.url.rsplit("/", 1)[1]
    assert (await api.thread(thread))["thread"]["title"] == "made in the browser"
    # the run graph nests a subagent's nodes under it
    await send_from_composer(
        console,
        "delegate",
        script({"type": "subagent", "title": "helper", "steps": [{"type": "tool", "name": "grep", "output": "found"}]}),
    )
    run = page.locator(".run").first
    await expect(run).to_have_attribute("data-status", "completed")
    await run.locator("details.graphbox > summary").click()
    await expect(run.locator("ul.graph li li li", has_text="grep")).to_have_count(1)
    await console.shot("run-graph")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    # the 403 of the refused create is the expected answer, and the only thing the browser reports
    assert all("403" in e for e in console.errors), console.errors


async def test_sign_out_ends_the_session_and_a_reload_asks_for_the_token_again(console, api):
    await console.sign_in(api.token)
    page = console.page
    cookies = await page.context.cookies()
    session = next(c for c in cookies if c["name"] == "treadle_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    await page.locator("#who button", has_text="Sign out").click()
    await expect(page.locator("input[name=token]")).to_be_visible()
    await page.reload()
    await expect(page.locator("input[name=token]")).to_be_visible()
    r = await api.client.request(
        "GET", "/v1/threads", headers={"Authorization": "", "Cookie": f"treadle_session={session['value']}"}
    )
    assert r.status_code == 401  # the old cookie is dead on the server, not only forgotten by the browser
    await console.shot("signed-out")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    assert console.errors == []


async def test_L12_todo_progress_and_a_proposed_plan_implemented_from_the_page(console, api):
    thread = await api.create_thread(title="plans")
    todo = [{"text": "read", "status": "completed"}, {"text": "write", "status": "in_progress"}]
    await run_to_end(
        api,
        thread,
        "plan it",
        script(
            {"type": "todo", "items": todo},
            {"type": "plan", "text": "1. add notes.txt"},
            {"type": "text", "text": "ok"},
        ),
    )
    await console.sign_in(api.token)
    await open_thread(console, thread)
    first = console.page.locator(".run").first
    await expect(first.locator(".todo")).to_contain_text("write")
    await expect(first).to_contain_text("todo 1/2")
    await expect(first.locator(".plan .md li")).to_have_text(["add notes.txt"])  # a plan is Markdown too
    await first.locator(".plan button", has_text="Implement here").click()
    await expect(console.page.locator(".run")).to_have_count(2)
    await expect(first.locator(".plan")).to_contain_text("implemented by")
    await console.shot("plan")
    assert await console.accessibility() == [] and await console.text_nulls() == []
    assert console.errors == []


async def test_the_search_box_asks_the_api_and_finds_a_thread_beyond_the_loaded_page(console, api):
    wanted = await api.create_thread(title="Needle in the list")
    others = [await api.create_thread(title=f"hay {i}") for i in range(25)]  # one full page, newer than it
    await console.sign_in(api.token)
    page = console.page
    await expect(page.locator(f"tr[data-thread={others[-1]}]")).to_be_visible()
    await expect(page.locator(".tablewrap + button")).to_be_visible()  # "More": a page is not everything
    await expect(page.locator(f"tr[data-thread={wanted}]")).to_have_count(0)  # not loaded: the first page is full
    await page.fill("main input[type=search]", "NEEDLE")
    row = page.locator(f"tr[data-thread={wanted}]")
    await expect(row).to_contain_text("Needle in the list")
    await expect(page.locator("table.threads tbody tr")).to_have_count(1)
    await expect(page.locator(".tablewrap + button")).to_be_hidden()
    await page.fill("main input[type=search]", "")
    await expect(page.locator("table.threads tbody tr")).to_have_count(25)
    await page.click(".tablewrap + button")  # More, with no search: the rest of the list
    await expect(page.locator(f"tr[data-thread={wanted}]")).to_be_visible()
    await console.shot("search")
    assert console.errors == []


async def test_the_thread_list_shows_when_each_thread_last_changed(console, api):
    thread = await api.create_thread(title="last activity")
    await run_to_end(api, thread, "hello", script(text("hi")))
    seq = (await api.thread(thread))["seq"]

    async def listed() -> dict | None:
        [item] = (await api.request("GET", "/v1/threads", params={"q": "last activity"})).json()["items"]
        return item if item["seq"] == seq else None

    summary = await wait_for(listed, what="the list item to reflect the run")
    assert datetime.fromisoformat(summary["last_activity_at"]) > datetime.fromisoformat(summary["created_at"])
    await console.sign_in(api.token)
    cell = console.page.locator(f"tr[data-thread={thread}] td.activity")
    shown = await console.page.evaluate("(iso) => new Date(iso).toLocaleString()", summary["last_activity_at"])
    await expect(cell).to_have_text(shown)
    await expect(console.page.locator("table.threads th").last).to_have_text("Last activity")
    assert console.errors == []


async def test_L1_1_a_new_thread_on_an_acp_agent_is_typed_by_name_and_a_bad_name_is_refused_as_the_api_says(
    console, api
):
    """The provider is a name, not a fixed list: a deployment's ACP agents are ``acp-<name>``."""
    await console.sign_in(api.token)
    page = console.page
    await page.click("text=New thread")
    await page.fill("input[name=title]", "on an agent")
    await page.fill("input[name=provider]", "not a provider!")
    await page.click("button[type=submit]")
    await expect(page.locator("form .error")).to_contain_text("invalid_provider")
    await page.fill("input[name=provider]", "acp-codex")
    await page.click("button[type=submit]")
    await expect(page.locator(".thread .meta")).to_contain_text("provider acp-codex")
    thread = page.url.rsplit("/", 1)[1]
    assert (await api.thread(thread))["thread"]["provider"] == "acp-codex"
    assert all("400" in e for e in console.errors), console.errors


async def test_a_thread_page_reads_only_its_last_runs_on_each_event(console, api):
    """Issue 24: the page reads the thread again on each event; it asks for its last runs (``?runs=``), a read
    that costs the same on a thread's 10,000th run as on its first, never for the whole document."""
    thread = await api.create_thread(title="long lived")
    for n in range(3):
        await run_to_end(api, thread, f"run {n}", script(text(f"reply {n}")))
    reads: list[str] = []
    doc_path = f"/v1/threads/{thread}"
    console.page.on("request", lambda r: reads.append(r.url) if r.url.split("?")[0].endswith(doc_path) else None)
    await console.sign_in(api.token)
    await open_thread(console, thread)
    await send_from_composer(console, "one more")
    await expect(console.page.locator(".run[data-status=completed]")).to_have_count(4)
    assert len(reads) >= 2 and all(url.endswith(f"{doc_path}?runs=200") for url in reads), reads
    await expect(console.page.locator(".earlier")).to_have_count(0)  # all its runs are on the page
    assert console.errors == []
