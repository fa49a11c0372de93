"""Issue 19: every list is paged the same way (``{"items", "next_cursor", "seq"}``) with opaque cursors. Paging
through a thread that grows between pages sees every item once, in the order things happened; a limit outside
1..200 and a cursor that was not issued for exactly this list are typed 400s that change nothing; another
tenant's thread is a 404 and another tenant's cursor a 400, with nothing of theirs in either answer."""

from __future__ import annotations

import json

import pytest

from tests.support.api import make_api
from tests.support.helpers import wait_for
from tests.support.scripts import approval, script, text, tool, write
from treadle.client import AsyncTreadle

pytestmark = pytest.mark.e2e

LISTS = ("runs", "messages", "activity", "requests", "checkpoints", "handoffs")


def _key(name: str, item: dict) -> str:
    """What identifies an item: its id, or the whole line for the activity feed (lines never change)."""
    return json.dumps(item, sort_keys=True) if name == "activity" else item["id"]


async def _grow(api, thread: str, i: int) -> int:
    """One more run, on the other provider than the last (a handoff), with a file, a tool, an approval and a
    reply: one more item in every list. Returns the thread's sequence once it has ended."""
    sent = await api.send(
        thread,
        f"step {i}",
        provider="scripted-b" if i % 2 else "scripted",
        script=script(write(f"f{i}.txt", f"{i}\n"), tool("ls"), approval(f"go on {i}?"), text(f"done {i}")),
    )
    request = await api.client.wait_request(thread, 30)
    await api.post(f"/v1/requests/{request['id']}/respond", {"decision": "accept"}, expect=200)
    await api.wait_run(sent["run_id"])
    return (await api.thread(thread))["seq"]


async def _page(api, path: str, **params) -> dict:
    r = await api.request("GET", path, params=params)
    assert r.status_code == 200, (path, r.text)
    page = r.json()
    assert set(page) == {"items", "next_cursor", "seq"}, page.keys()
    return page


def _refused(r, code: str) -> None:
    assert r.status_code == 400, (r.request.url, r.status_code, r.text[:300])
    assert r.json()["error"]["code"] == code, r.text[:300]


async def test_every_list_of_a_thread_that_grows_between_pages_is_seen_whole_once_in_order(api):
    thread = await api.create_thread(title="paged")
    for i in range(3):  # every list longer than a page before it grows
        await _grow(api, thread, i)
    seen: dict[str, list[dict]] = {name: [] for name in LISTS}
    cursor: dict[str, str | None] = {name: None for name in LISTS}
    seqs: dict[str, list[int]] = {name: [] for name in LISTS}
    ended_while_growing: set[str] = set()  # read to its end before the thread stopped growing
    step = 3

    def read_to_the_end(name: str) -> bool:
        return bool(seqs[name]) and cursor[name] is None

    while not all(read_to_the_end(name) for name in LISTS):
        for name in LISTS:
            if read_to_the_end(name):
                continue
            params = {"limit": 1} if cursor[name] is None else {"limit": 1, "cursor": cursor[name]}
            page = await _page(api, f"/v1/threads/{thread}/{name}", **params)
            assert len(page["items"]) == 1
            seen[name] += page["items"]
            seqs[name].append(page["seq"])
            cursor[name] = page["next_cursor"]
            if cursor[name] is None and step < 6:
                ended_while_growing.add(name)
        if step < 6:  # the thread grows while every list is part read
            await _grow(api, thread, step)
            step += 1
    final = await api.thread(thread)
    for name in LISTS:
        keys = [_key(name, item) for item in seen[name]]
        assert len(keys) == len(set(keys)), f"{name}: an item repeated"
        every = [_key(name, item) for item in final[name]]
        assert keys == every, f"{name}: skipped or reordered"
        assert seqs[name] == sorted(seqs[name]) and all(isinstance(s, int) for s in seqs[name]), seqs[name]
    # Each growth adds an item to every list (a run, a request, a handoff, ...) while a page reads one: no
    # list is read to its end before the thread stops growing.
    assert not ended_while_growing, ended_while_growing
    assert len(seen["runs"]) == len(seen["requests"]) == 6 and len(seen["handoffs"]) == 5
    # A page's items are the list's views, as the thread document shows them.
    last = await _page(api, f"/v1/threads/{thread}/runs", limit=200)
    assert last["items"] == final["runs"] and last["seq"] >= final["seq"] and last["next_cursor"] is None


async def test_filtered_lists_page_within_their_filter_and_keep_it_in_the_cursor(api):
    thread = await api.create_thread()
    for i in range(3):
        await _grow(api, thread, i)
    doc = await api.thread(thread)
    run = doc["runs"][1]["id"]
    mine = [a for a in doc["activity"] if a["run_id"] == run]
    got, cursor = [], None
    while True:
        page = await _page(
            api, f"/v1/threads/{thread}/activity", run_id=run, limit=1, **({"cursor": cursor} if cursor else {})
        )
        got += page["items"]
        if (cursor := page["next_cursor"]) is None:
            break
        other_run = await api.request(
            "GET", f"/v1/threads/{thread}/activity", params={"run_id": doc["runs"][0]["id"], "cursor": cursor}
        )
        _refused(other_run, "invalid_cursor")  # the cursor serves only its own filter
        _refused(
            await api.request("GET", f"/v1/threads/{thread}/activity", params={"cursor": cursor}), "invalid_cursor"
        )
    assert got == mine and len(mine) >= 3
    resolved = await _page(api, f"/v1/threads/{thread}/requests", status="resolved", limit=2)
    assert [r["status"] for r in resolved["items"]] == ["resolved", "resolved"] and resolved["next_cursor"]
    rest = await _page(api, f"/v1/threads/{thread}/requests", status="resolved", cursor=resolved["next_cursor"])
    assert [r["id"] for r in resolved["items"] + rest["items"]] == [r["id"] for r in doc["requests"]]
    assert (await _page(api, f"/v1/threads/{thread}/requests", status="pending"))["items"] == []
    _refused(
        await api.request("GET", f"/v1/threads/{thread}/requests", params={"status": "x" * 5000}), "invalid_parameter"
    )
    _refused(await api.request("GET", f"/v1/threads/{thread}/activity", params={"run_id": "run_*"}), "invalid_id")


async def _listed(api, threads: list[str]) -> None:
    async def all_there() -> bool:
        listed = {t["id"] for t in (await _page(api, "/v1/threads", limit=200))["items"]}
        return listed.issuperset(threads)

    await wait_for(all_there, what=f"threads {threads} in the tenant's list")


async def test_the_tenants_threads_are_paged_newest_first_and_new_threads_shift_nothing(stack, stack_nc, tenant):
    api = await make_api(stack, stack_nc, tenant)
    try:
        made = [await api.create_thread(title=f"t{i}") for i in range(5)]
        await _listed(api, made)  # the tenant's list spans threads: it is projected, with no sequence to ask for
        first = await _page(api, "/v1/threads", limit=2)
        assert first["seq"] is None and [t["id"] for t in first["items"]] == made[::-1][:2]
        newer = [await api.create_thread(title=f"new{i}") for i in range(2)]  # at the top, ahead of the cursor
        rest, cursor = [], first["next_cursor"]
        while cursor is not None:
            page = await _page(api, "/v1/threads", limit=2, cursor=cursor)
            rest += page["items"]
            cursor = page["next_cursor"]
        assert [t["id"] for t in first["items"] + rest] == made[::-1]
        await _listed(api, newer)
        again = await _page(api, "/v1/threads", limit=200)
        assert [t["id"] for t in again["items"]] == newer[::-1] + made[::-1] and again["next_cursor"] is None
    finally:
        await api.close()


async def test_a_bad_limit_or_cursor_is_a_typed_400_and_changes_nothing(api):
    thread = await api.create_thread()
    for i in range(2):
        await _grow(api, thread, i)
    other = await api.create_thread()
    await _grow(api, other, 0)
    before = await api.thread(thread)
    runs = f"/v1/threads/{thread}/runs"
    real = (await _page(api, f"/v1/threads/{thread}/messages", limit=1))["next_cursor"]
    of_runs = (await _page(api, runs, limit=1))["next_cursor"]
    of_other = (await _page(api, f"/v1/threads/{other}/messages", limit=1))["next_cursor"]
    of_threads = (await _page(api, "/v1/threads", limit=1))["next_cursor"]
    assert real and of_runs and of_other and of_threads
    for limit in ("0", "201", "-1", "1e2", "", "99999999999999999999"):
        _refused(await api.request("GET", runs, params={"limit": limit}), "invalid_parameter")
    body, _, tag = real.partition(".")
    flipped = real[:-1] + ("A" if real[-1] != "A" else "B")
    bad = [
        "x",
        "",
        ".",
        "a.b",
        "!!!",
        "é" * 10,
        "A" * 10_000,
        body,  # the position without its MAC
        f"{body}.{'A' * len(tag)}",
        flipped,
        real + "A",
        of_runs,  # another list's
        of_other,  # another thread's
        of_threads,
    ]
    for cursor in bad:
        _refused(
            await api.request("GET", f"/v1/threads/{thread}/messages", params={"cursor": cursor}), "invalid_cursor"
        )
    _refused(await api.request("GET", "/v1/threads", params={"cursor": real}), "invalid_cursor")
    after = await api.thread(thread)
    assert after == before


async def test_another_tenants_thread_is_a_404_and_their_cursor_a_400_with_nothing_of_theirs_leaked(
    api, stack, stack_nc
):
    thread = await api.create_thread(title="secret-title")
    await _grow(api, thread, 0)
    theirs = {name: (await _page(api, f"/v1/threads/{thread}/{name}", limit=1))["next_cursor"] for name in LISTS}
    their_threads = (await _page(api, "/v1/threads", limit=1))["next_cursor"]
    await api.create_thread(title="second")  # so their thread list has a next page
    their_threads = (await _page(api, "/v1/threads", limit=1))["next_cursor"]
    mallory = await make_api(stack, stack_nc, api.tenant + "-other")
    try:
        own = await mallory.create_thread()
        for name in LISTS:
            r = await mallory.request("GET", f"/v1/threads/{thread}/{name}")
            assert r.status_code == 404 and r.json()["error"]["code"] == "thread_not_found", (name, r.text)
            for path in (f"/v1/threads/{thread}/{name}", f"/v1/threads/{own}/{name}"):
                if theirs[name] is None:
                    continue
                r = await mallory.request("GET", path, params={"cursor": theirs[name]})
                assert r.status_code in (400, 404) and "secret" not in r.text and "step" not in r.text, r.text
                if path.endswith(f"{own}/{name}"):
                    _refused(r, "invalid_cursor")
        r = await mallory.request("GET", "/v1/threads", params={"cursor": their_threads})
        _refused(r, "invalid_cursor")
        listed = await _page(mallory, "/v1/threads")
        assert [t["id"] for t in listed["items"]] == [own]
    finally:
        await mallory.close()


async def _searched(api, q: str, limit: int) -> list[dict]:
    """Every page of the title search ``q``, each page only matching threads; the whole search in order."""
    found, cursor = [], None
    while True:
        page = await _page(api, "/v1/threads", q=q, limit=limit, **({"cursor": cursor} if cursor else {}))
        assert len(page["items"]) <= limit and all(q.casefold() in t["title"].casefold() for t in page["items"])
        found += page["items"]
        if (cursor := page["next_cursor"]) is None:
            return found


async def test_a_title_search_pages_through_matching_threads_and_its_cursor_serves_only_that_search(
    stack, stack_nc, tenant
):
    api = await make_api(stack, stack_nc, tenant)
    try:
        titles = ["Alpha fix 0", "beta 0", "ALPHA FIX 1", "beta 1", "the alpha Fix 2", "beta 2", "alpha fix 3"]
        made = [await api.create_thread(title=t) for t in titles]
        await _listed(api, made)
        matching = [t for t, title in zip(made, titles, strict=True) if "alpha fix" in title.lower()][::-1]
        found = await _searched(api, "aLPHA fIX", limit=2)
        assert [t["id"] for t in found] == matching  # newest first, each once, none of the others
        assert all(t["last_activity_at"] for t in found)
        assert [t["id"] for t in (await api.client.list_threads(q="alpha fix", limit=5))["items"]] == matching
        async with AsyncTreadle(stack.api_url, api.token) as sdk:  # the typed SDK, page after page
            assert [t.id async for t in await sdk.list_threads(q="Alpha Fix", limit=2)] == matching
        assert await _searched(api, "no such title", limit=2) == []
        assert await _searched(api, "%_.*[", limit=2) == []  # a substring, not a pattern

        first = await _page(api, "/v1/threads", q="alpha fix", limit=1)
        unfiltered = (await _page(api, "/v1/threads", limit=1))["next_cursor"]
        assert first["next_cursor"] and unfiltered
        _refused(
            await api.request("GET", "/v1/threads", params={"q": "beta", "cursor": first["next_cursor"]}),
            "invalid_cursor",
        )
        _refused(await api.request("GET", "/v1/threads", params={"cursor": first["next_cursor"]}), "invalid_cursor")
        _refused(
            await api.request("GET", "/v1/threads", params={"q": "alpha fix", "cursor": unfiltered}), "invalid_cursor"
        )
        again = await _page(api, "/v1/threads", q="ALPHA FIX", limit=1, cursor=first["next_cursor"])
        assert [t["id"] for t in again["items"]] == matching[1:2]  # the same search, spelled in another case
    finally:
        await api.close()


async def test_last_activity_of_a_listed_thread_moves_with_its_events(api):
    thread = await api.create_thread(title="activity moves")
    await _listed(api, [thread])
    before = next(t for t in (await _page(api, "/v1/threads", q="activity moves"))["items"] if t["id"] == thread)
    assert before["last_activity_at"] == before["created_at"]  # only the creation so far
    sent = await api.send(thread, "hello", script=script(text("hi")))
    await api.wait_run(sent["run_id"])
    doc = await api.thread(thread)

    async def moved() -> dict | None:
        items = (await _page(api, "/v1/threads", q="activity moves"))["items"]
        item = next(t for t in items if t["id"] == thread)
        return item if item["seq"] == doc["seq"] else None

    after = await wait_for(moved, what="the list item to reflect the run")
    assert after["last_activity_at"] > before["last_activity_at"]


async def test_a_hostile_search_is_a_typed_400_and_never_finds_another_tenants_threads(api, stack, stack_nc):
    thread = await api.create_thread(title="secret-title")
    second = await api.create_thread(title="secret two")  # so their search has a next page
    await _listed(api, [thread, second])
    before = await _page(api, "/v1/threads", limit=200)
    for q in ("", "x" * 201, "é" * 201):
        r = await api.request("GET", "/v1/threads", params={"q": q})
        _refused(r, "invalid_parameter")
        assert r.json()["error"]["details"]["parameter"] == "q"
    assert await _searched(api, "é" * 200, limit=5) == []  # 200 characters is the most, in any script
    assert [t["id"] for t in await _searched(api, "SECRET", limit=5)] == [second, thread]
    mallory = await make_api(stack, stack_nc, api.tenant + "-other")
    try:
        own = await mallory.create_thread(title="mine, not secret")
        await _listed(mallory, [own])
        assert [t["id"] for t in await _searched(mallory, "secret", limit=5)] == [own]
        assert await _searched(mallory, "secret-title", limit=5) == []
        their = await _page(api, "/v1/threads", q="secret", limit=1)
        if their["next_cursor"]:
            _refused(
                await mallory.request("GET", "/v1/threads", params={"q": "secret", "cursor": their}),
                "invalid_cursor",
            )
    finally:
        await mallory.close()
    assert await _page(api, "/v1/threads", limit=200) == before  # nothing changed
