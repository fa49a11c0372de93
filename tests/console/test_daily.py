"""The console as a daily tool (issue 39), in a real Chromium: a sidebar of threads with a badge where a run
waits for someone, switching threads without leaking event streams, Markdown replies that stay inert, a
coloured diff folded per file, Enter to send, no horizontal scrolling at 390 px, the dark scheme, a skeleton
while a thread loads, and no literal ``null`` on any page. Every wait is on a page condition."""

from __future__ import annotations

import asyncio
import re

from playwright.async_api import expect

from tests.support.rollbacks import run_to_end
from tests.support.scripts import HANG, script

# Counts the page's EventSources, so a test can tell an open stream from a leaked one.
COUNT_STREAMS = """(() => {
  const Real = window.EventSource;
  window.__streams = [];
  window.EventSource = class extends Real { constructor(...a) { super(...a); window.__streams.push(this); } };
})();"""
OPEN_STREAMS = "window.__streams.filter((s) => s.readyState !== 2).length"

APPROVAL = script(
    {"type": "text", "text": "I will clean the build."},
    {"type": "approval", "kind": "command", "command": "rm -rf build", "prompt": "tidy the folder"},
    {"type": "text", "text": "All done."},
)
REPLY = """# Plan

Some **bold** words and `inline code`.

```python
print("hello")
```

<img src=x onerror="window.__pwned = 1">
<script>window.__pwned = 2</script>

[a link](javascript:window.__pwned=3) and [a fine one](https://example.org/)
"""


async def open_thread(console, thread: str) -> None:
    await console.page.goto(f"{console.base}/#/t/{thread}")
    await console.page.wait_for_selector(".thread[data-stream=open]")


async def test_L11_the_sidebar_shows_where_you_are_needed_and_switching_keeps_one_stream(console, api):
    waiting = await api.create_thread(title="waits for you")
    sent = await api.send(waiting, "clean up", script=APPROVAL)
    await api.wait_request(waiting)
    quiet = await api.create_thread(title="quiet one")
    await run_to_end(api, quiet, "hello", script({"type": "text", "text": "hi"}))
    page = console.page
    await page.context.add_init_script(COUNT_STREAMS)
    await console.sign_in(api.token)
    side = page.locator("nav#sidebar")
    item = side.locator(f"li[data-thread={waiting}]")
    await expect(item.locator(".badge")).to_have_text("1")
    await expect(item.locator(".status")).to_have_text("needs you")  # not "running"
    await expect(side.locator(f"li[data-thread={quiet}] .status")).to_have_text("completed")
    await expect(page.locator(f"tr[data-thread={waiting}] .status")).to_have_text("needs you")
    await expect(page).to_have_title(re.compile(r"^\(1\) "))
    assert "circle" in await page.locator("link#favicon").get_attribute("href")
    await console.shot("sidebar")
    assert await console.accessibility() == []
    # Switch back and forth from the sidebar: one stream open at a time, on the thread shown.
    for thread, title in [
        (quiet, "quiet one"),
        (waiting, "waits for you"),
        (quiet, "quiet one"),
        (waiting, "waits for you"),
    ]:
        await side.locator(f"li[data-thread={thread}] a").click()
        await expect(page.locator(".thread h1")).to_have_text(title)
        await page.wait_for_selector(".thread[data-stream=open]")
        assert page.url.endswith(f"#/t/{thread}")
        await expect(side.locator("li.current")).to_have_attribute("data-thread", thread)
    assert await page.evaluate(OPEN_STREAMS) == 1
    assert await console.accessibility() == []  # a thread with a pending approval
    await expect(page).to_have_title("(1) waits for you · Treadle")
    # The stream of the thread switched to still works: the approval's answer ends the run on the page.
    await page.locator(".request.pending button.approve").click()
    run = page.locator(f".run[data-run={sent['run_id']}]")
    await expect(run).to_have_attribute("data-status", "completed")
    await expect(run.locator(".msg.assistant").last).to_contain_text("All done.")
    await expect(item.locator(".badge")).to_have_count(0)
    await expect(item.locator(".status")).to_have_text("completed")
    await expect(page).to_have_title("waits for you · Treadle")
    # The URL is the thread's: a reload opens it again.
    await page.reload()
    await expect(page.locator(".thread h1")).to_have_text("waits for you")
    # A thread seen before that moved since is marked unread until opened again.
    await expect(side.locator(f"li[data-thread={quiet}] .unread")).to_have_count(0)
    await run_to_end(api, quiet, "more", script({"type": "text", "text": "news"}))
    await expect(side.locator(f"li[data-thread={quiet}] .unread")).to_have_count(1, timeout=15_000)  # next poll
    await side.locator(f"li[data-thread={quiet}] a").click()
    await expect(page.locator(".run")).to_have_count(2)
    await expect(side.locator(f"li[data-thread={quiet}] .unread")).to_have_count(0)
    # Arrow keys move through the sidebar.
    links = side.locator("li a")
    await links.first.focus()
    await page.keyboard.press("ArrowDown")
    await expect(links.nth(1)).to_be_focused()
    assert console.errors == []


async def test_a_markdown_reply_renders_code_blocks_and_its_html_stays_inert(console, api):
    thread = await api.create_thread(title="markdown")
    await run_to_end(api, thread, "explain", script({"type": "text", "text": REPLY}))
    await console.sign_in(api.token)
    await open_thread(console, thread)
    md = console.page.locator(".msg.assistant .text.md")
    await expect(md.locator("h1")).to_have_text("Plan")
    await expect(md.locator("strong")).to_have_text("bold")
    await expect(md.locator("pre code")).to_have_text('print("hello")')
    await expect(md).to_contain_text("<img src=x onerror=")  # the model's HTML, shown as the text it wrote
    await expect(md).to_contain_text("<script>")
    assert await md.locator("img, script, style, iframe").count() == 0
    assert await md.locator("[onerror], [onclick], [style]").count() == 0
    hrefs = await md.locator("a").evaluate_all("links => links.map((a) => a.getAttribute('href'))")
    assert hrefs == [None, "https://example.org/"], hrefs  # javascript: dropped
    assert await md.locator("a").nth(1).get_attribute("rel") == "noopener noreferrer"
    assert await console.page.evaluate("window.__pwned") is None
    await console.shot("markdown")
    assert await console.accessibility() == []
    assert console.errors == []  # nothing the CSP had to refuse


async def test_L10_the_diff_is_coloured_and_folds_per_file(console, api):
    thread = await api.create_thread(title="diff")
    await run_to_end(
        api,
        thread,
        "two files",
        script(
            {"type": "write_file", "path": "a.txt", "content": "alpha\n"},
            {"type": "write_file", "path": "b.txt", "content": "beta\n"},
        ),
    )
    await console.sign_in(api.token)
    await open_thread(console, thread)
    run = console.page.locator(".run").first
    await run.locator("button", has_text="Changes").click()
    files = run.locator(".diffview details.dfile")
    await expect(files).to_have_count(2)
    await expect(files.locator("summary code")).to_have_text(["a.txt", "b.txt"])
    added = files.first.locator(".dl.add")
    await expect(added).to_have_text(["+alpha"])
    colours = await added.evaluate("e => getComputedStyle(e).backgroundColor")
    plain = await files.first.locator(".dl.meta").first.evaluate("e => getComputedStyle(e).backgroundColor")
    assert colours != plain and colours != "rgba(0, 0, 0, 0)", (colours, plain)
    await files.first.locator("summary").click()
    await expect(files.first).not_to_have_attribute("open", "")
    await expect(added).to_be_hidden()
    await expect(files.nth(1).locator(".dl.add")).to_be_visible()
    await console.shot("diff-folded")
    assert await console.accessibility() == []
    # Side by side: b.txt's new line on the right, nothing on the left; and back to one column.
    await run.locator(".diffview button.layout").click()
    row = files.nth(1).locator(".dsplit .srow", has=console.page.locator(".sc.add"))
    await expect(row.locator(".sc")).to_have_text([" ", "+beta"])
    await expect(row.locator(".sc.empty")).to_have_count(1)
    await console.shot("diff-split")
    assert await console.accessibility() == []
    await run.locator(".diffview button.layout", has_text="Unified view").click()
    await expect(files.nth(1).locator(".dl.add")).to_have_text(["+beta"])
    assert console.errors == []


async def test_L10_a_removed_sql_comment_is_a_removed_line_not_a_file_header(console, api):
    """``--- old`` inside a hunk is the line ``-- old`` removed; only before the first hunk is it a header."""
    thread = await api.create_thread(title="sql diff")
    write = lambda content: script({"type": "write_file", "path": "q.sql", "content": content})  # noqa: E731
    await run_to_end(api, thread, "first", write("-- old\nselect 1;\n"))
    await run_to_end(api, thread, "second", write("-- new\nselect 1;\n"))
    await console.sign_in(api.token)
    await open_thread(console, thread)
    run = console.page.locator(".run").nth(1)
    await run.locator("button", has_text="Changes").click()
    file = run.locator(".diffview details.dfile")
    await expect(file.locator("summary")).to_contain_text("q.sql +1 −1")
    await expect(file.locator(".dl.del")).to_have_text(["--- old"])
    await expect(file.locator(".dl.add")).to_have_text(["+-- new"])
    assert console.errors == []


async def test_L2_enter_sends_and_shift_enter_is_a_new_line(console, api):
    thread = await api.create_thread(title="keys")
    await console.sign_in(api.token)
    await open_thread(console, thread)
    box = console.page.locator(".composer textarea[name=text]")
    await expect(console.page.locator(".composer .hint")).to_contain_text("Enter sends")
    await box.fill("line one")
    await box.press("Shift+Enter")
    await box.press_sequentially("line two")
    assert await box.input_value() == "line one\nline two"
    await box.press("Enter")
    await expect(console.page.locator(".disposition .disp")).to_have_text("started")
    user = console.page.locator(".msg.user .text")
    await expect(user).to_have_count(1)
    assert await user.evaluate("e => e.textContent") == "line one\nline two"
    await expect(box).to_have_value("")
    await box.fill("sent with ctrl")  # Ctrl+Enter sends as well
    await box.press("Control+Enter")
    await expect(user).to_have_count(2)
    await expect(user.nth(1)).to_have_text("sent with ctrl")
    assert console.errors == []


async def test_L8_escape_in_the_composer_interrupts_the_active_run(console, api):
    thread = await api.create_thread(title="escape")
    sent = await api.send(thread, "hold", script=script(HANG, profile="full"))
    await api.wait_running(sent["run_id"])
    await console.sign_in(api.token)
    await open_thread(console, thread)
    await console.page.locator(".composer textarea[name=text]").press("Escape")
    await expect(console.page.locator(f".run[data-run={sent['run_id']}]")).to_have_attribute(
        "data-status", "interrupted"
    )
    assert (await api.run(sent["run_id"]))["status"] == "interrupted"
    assert console.errors == []


async def test_at_390_px_nothing_scrolls_sideways(console_at, api):
    thread = await api.create_thread(title="a phone-sized look at a thread with a rather long title, to wrap")
    long_command = "find . -name '*.pyc' -delete && " + "x" * 120
    await api.send(
        thread,
        "clean up",
        script=script(
            {"type": "text", "text": "```\n" + "y" * 200 + "\n```"},
            {"type": "approval", "kind": "command", "command": long_command, "prompt": "tidy"},
        ),
    )
    await api.wait_request(thread)
    console = await console_at(width=390, height=844)
    await console.sign_in(api.token)
    assert await console.overflow() <= 0
    await console.shot("phone-list")
    assert await console.accessibility() == []
    await open_thread(console, thread)
    await expect(console.page.locator(".request.pending code.command")).to_have_text(long_command)
    assert await console.page.evaluate("document.documentElement.scrollWidth") <= 390
    await expect(console.page.locator("nav#sidebar")).to_be_hidden()  # folded behind the Threads button
    await console.shot("phone-thread")
    assert await console.accessibility() == []
    await console.page.click("#navtoggle")
    await expect(console.page.locator(f"nav#sidebar li[data-thread={thread}] .badge")).to_have_text("1")
    assert await console.page.evaluate("document.documentElement.scrollWidth") <= 390
    await console.shot("phone-sidebar")
    await console.page.set_viewport_size({"width": 360, "height": 740})  # the narrowest phone the issue names
    assert await console.overflow() <= 0
    await console.page.goto(f"{console.base}/#/new")
    await expect(console.page.locator("form.newthread")).to_be_visible()
    assert await console.overflow() <= 0
    assert await console.accessibility() == []
    assert console.errors == []


async def test_the_dark_scheme_follows_the_system_and_the_toggle_overrides_it(console_at, api):
    thread = await api.create_thread(title="dark")
    await run_to_end(api, thread, "hello", script({"type": "text", "text": "hi in the dark"}))
    console = await console_at(color_scheme="dark")
    await console.sign_in(api.token)
    await console.shot("threads-dark")
    assert await console.accessibility() == []
    await open_thread(console, thread)
    background = "getComputedStyle(document.body).backgroundColor"
    assert await console.page.evaluate(background) == "rgb(18, 21, 27)"
    await console.shot("thread-dark")
    assert await console.accessibility() == []
    toggle = console.page.locator("#theme")
    await toggle.click()  # system -> light
    await expect(toggle).to_have_text("Theme: light")
    assert await console.page.evaluate(background) == "rgb(244, 245, 248)"
    await console.page.reload()  # the choice is kept
    await expect(console.page.locator(".thread h1")).to_have_text("dark")
    assert await console.page.evaluate(background) == "rgb(244, 245, 248)"
    assert console.errors == []
    phone = await console_at(width=390, height=844, color_scheme="dark")  # dark at phone width
    await phone.sign_in(api.token)
    await open_thread(phone, thread)
    assert await phone.page.evaluate(background) == "rgb(18, 21, 27)"
    assert await phone.overflow() <= 0
    assert await phone.accessibility() == []
    await phone.shot("phone-dark")
    assert phone.errors == []


async def test_a_thread_shows_a_skeleton_while_it_loads(console, api):
    thread = await api.create_thread(title="slow read")
    await console.sign_in(api.token)
    release = asyncio.Event()

    async def hold(route):
        await release.wait()
        await route.continue_()

    await console.page.route(re.compile(rf"/v1/threads/{thread}\?runs="), hold)
    await console.page.goto(f"{console.base}/#/t/{thread}")
    await expect(console.page.locator("main .skeleton")).to_be_visible()
    await console.shot("skeleton")
    release.set()
    await expect(console.page.locator(".thread h1")).to_have_text("slow read")
    await expect(console.page.locator("main .skeleton")).to_have_count(0)
    assert console.errors == []


async def test_a_refused_event_stream_is_subscribed_again(console, api):
    """The browser gives up on a stream the server refused (an error status): the page reads the thread again
    and opens a new stream after what it read, and that stream carries the thread's next events."""
    thread = await api.create_thread(title="subscribed again")
    await console.sign_in(api.token)
    refused: list[str] = []

    async def refuse_once(route):
        if refused:
            await route.continue_()
        else:
            refused.append(route.request.url)
            await route.fulfill(status=503, body="busy")

    await console.page.route(re.compile(rf"/v1/threads/{thread}/events"), refuse_once)
    await console.page.goto(f"{console.base}/#/t/{thread}")
    await console.page.wait_for_selector(".thread[data-stream=open]")
    assert len(refused) == 1
    await api.send(thread, "from elsewhere", script=script({"type": "text", "text": "seen through the new stream"}))
    # sent by another client: only the stream can tell the page
    await expect(console.page.locator(".run").first).to_have_attribute("data-status", "completed")
    await expect(console.page.locator(".msg.assistant .text")).to_have_text(["seen through the new stream"])
    assert all("503" in e for e in console.errors), console.errors  # the refusal, and nothing else


async def test_no_page_says_null_new_thread_question_and_fork(console, api):
    await console.sign_in(api.token)
    page = console.page
    fresh = await api.create_thread(title="brand new")
    await open_thread(console, fresh)
    await expect(page.locator(".runs .empty")).to_contain_text("No runs yet")
    assert await console.text_nulls() == []
    asked = await api.create_thread(title="asked")
    options = [{"label": "Blue", "description": "calm"}, {"label": "Red", "description": "loud"}]
    await api.send(asked, "pick", script=script({"type": "question", "prompt": "Which colour?", "options": options}))
    await api.wait_request(asked)
    await open_thread(console, asked)
    await expect(page.locator(".request.pending .question")).to_contain_text("Which colour?")
    assert await console.text_nulls() == []
    await page.locator(".request.pending button.option", has_text="Red").click()
    await expect(page.locator(".request .answer")).to_have_text("Answered: Red")
    assert await console.text_nulls() == []
    await expect(page.locator(".run").first).to_have_attribute("data-status", "completed")
    await page.locator(".run button", has_text="Fork from here").click()
    await expect(page.locator(".thread .meta")).to_contain_text(f"forked from {asked}")
    assert await console.text_nulls() == []
    assert console.errors == []


async def test_the_activity_reads_oldest_first_like_the_timeline(console, api):
    thread = await api.create_thread(title="activity order")
    await run_to_end(api, thread, "write", script({"type": "write_file", "path": "n.txt", "content": "n\n"}))
    await console.sign_in(api.token)
    await open_thread(console, thread)
    kinds = await console.page.locator(".activity li b").all_text_contents()
    listed = (await api.request("GET", f"/v1/threads/{thread}/activity")).json()["items"]
    assert kinds == [a["kind"] for a in listed][-50:] and kinds, kinds
    assert console.errors == []


async def test_the_composer_offers_the_providers_the_deployment_configured(console, api):
    thread = await api.create_thread(title="providers")
    await console.sign_in(api.token)
    session = await console.page.evaluate("fetch('/console/session').then((r) => r.json())")
    assert {"scripted", "codex", "claude"} <= set(session["providers"])
    await open_thread(console, thread)
    offered = await console.page.locator("#providers-send option").evaluate_all("os => os.map((o) => o.value)")
    assert offered == session["providers"]
    assert console.errors == []


async def test_L1_3_L1_4_rename_archive_and_delete_from_the_thread_page(console, api):
    thread = await api.create_thread(title="before")
    await run_to_end(api, thread, "hello", script({"type": "text", "text": "hi"}))
    page = console.page
    await console.sign_in(api.token)
    await open_thread(console, thread)
    side = page.locator("nav#sidebar")
    item = side.locator(f"li[data-thread={thread}]")
    await page.locator(".threadactions button.rename").click()
    await page.locator("input.newtitle").fill("after")
    await page.locator(".renameform button[type=submit]").click()
    await expect(page.locator(".thread h1")).to_have_text("after")
    await expect(item.locator(".ttitle")).to_have_text("after")
    # Archived: out of the sidebar unless asked for, and the page says why a message would be refused.
    await page.locator(".threadactions button.archive").click()
    await expect(page.locator(".thead .archived")).to_be_visible()
    await expect(item).to_have_count(0)
    await side.locator("input.showarchived").check()
    await expect(item.locator(".archivedtag")).to_have_count(1)
    await console.shot("thread-archived")
    assert await console.accessibility() == []
    await page.locator(".threadactions button.archive").click()  # now "Unarchive"
    await expect(page.locator(".threadactions button.archive")).to_have_text("Archive")
    await expect(item.locator(".archivedtag")).to_have_count(0)
    # Delete asks first; keeping it changes nothing.
    await page.locator(".threadactions button.delete").click()
    confirm = page.locator(".manage .confirm")
    await expect(confirm).to_contain_text("erased for good")
    assert await console.accessibility() == []
    await confirm.locator("button", has_text="Keep it").click()
    await expect(confirm).to_have_count(0)
    assert (await api.thread(thread))["thread"]["title"] == "after"
    await page.locator(".threadactions button.delete").click()
    await page.locator("button.confirm-delete").click()
    await page.wait_for_url(re.compile(r"#/$"))
    await expect(item).to_have_count(0)
    r = await api.request("GET", f"/v1/threads/{thread}")
    assert r.status_code == 404
    assert console.errors == []
