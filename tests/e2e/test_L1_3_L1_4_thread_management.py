"""L1.3 and L1.4 on the real stack: renaming, archiving and deleting threads over HTTP. A deleted thread's bytes
are gone from the event stream (its tombstone alone stays), Redis and the durable checkpoint store; another
tenant's thread is a 404 that changes nothing; a fork of a deleted thread keeps working."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from tests.e2e.test_cli import treadle
from tests.support.api import make_api
from tests.support.helpers import wait_for
from tests.support.lineage import fork
from tests.support.mcp_client import ToolFailed, call, mcp_session
from tests.support.scripts import approval, script, text, write
from treadle.client import AsyncTreadle, NotFound, Treadle
from treadle.core import events as ev
from treadle.core.policy import TenantPolicy
from treadle.eventlog.streams import CHECKPOINTS_BUCKET
from treadle.eventlog.subjects import EVENTS_STREAM, thread_events
from treadle.ops.policies import PolicyStore
from treadle.projections.check import check_projections

pytestmark = pytest.mark.e2e


async def _patch(api, thread: str, body: dict, status: int = 200) -> dict:
    r = await api.request("PATCH", f"/v1/threads/{thread}", json=body)
    assert r.status_code == status, r.text
    return r.json()


async def _delete(api, thread: str, status: int = 200) -> dict:
    r = await api.request("DELETE", f"/v1/threads/{thread}")
    assert r.status_code == status, r.text
    return r.json()


async def _listed(api, **params) -> list[str]:
    r = await api.request("GET", "/v1/threads", params=params)
    assert r.status_code == 200, r.text
    return [t["id"] for t in r.json()["items"]]


async def _code(r) -> str:
    return r.json()["error"]["code"]


async def _messages_of_thread(stack_nc, tenant: str, thread: str) -> int:
    info = await stack_nc.jetstream().stream_info(EVENTS_STREAM, subjects_filter=thread_events(tenant, thread))
    return sum((info.state.subjects or {}).values())


async def _objects_of(stack_nc, tenant: str, thread: str) -> list[str]:
    store = await stack_nc.jetstream().object_store(CHECKPOINTS_BUCKET)
    try:
        found = await store.list(ignore_deletes=True)
    except Exception:  # an empty bucket lists as not found
        return []
    return [o.name for o in found if o.name.startswith(f"{tenant}/") and f"/{thread}/" in o.name]


async def test_L1_3_rename_archive_and_unarchive_with_the_list_filter_and_messages_refused(api):
    thread = await api.create_thread(title="first title")
    other = await api.create_thread(title="stays")
    done = await _patch(api, thread, {"title": "second title"})
    assert done["changed"] is True
    again = await _patch(api, thread, {"title": "second title"})
    assert again["changed"] is False and again["seq"] == done["seq"]  # nothing appended
    assert (await api.thread(thread))["thread"]["title"] == "second title"

    await _patch(api, thread, {"archived": True})
    doc = await api.thread(thread)
    assert doc["thread"]["archived"] is True
    assert thread not in await _listed(api) and other in await _listed(api)
    assert await _listed(api, archived="only") == [thread]
    assert {thread, other} <= set(await _listed(api, archived="include"))
    summary = next(t for t in (await api.request("GET", "/v1/threads", params={"archived": "only"})).json()["items"])
    assert summary["archived"] is True and summary["title"] == "second title"
    r = await api.request("GET", "/v1/threads", params={"archived": "maybe"})
    assert r.status_code == 400 and await _code(r) == "invalid_parameter"

    r = await api.request("POST", f"/v1/threads/{thread}/messages", json={"text": "hello"})
    assert r.status_code == 409 and await _code(r) == "thread_archived", r.text
    await _patch(api, thread, {"archived": False})
    sent = await api.send(thread, "hello", script=script(text("back")))
    await api.wait_run(sent["run_id"])
    assert thread in await _listed(api)


async def test_L1_3_rename_goes_on_during_a_run_and_archiving_it_is_refused_until_it_ends(api):
    thread = await api.create_thread(title="busy")
    sent = await api.send(thread, "go", script=script(approval("go on?"), text("done")))
    request = await api.wait_request(thread)
    await _patch(api, thread, {"title": "renamed while running"})
    r = await api.request("PATCH", f"/v1/threads/{thread}", json={"archived": True})
    assert r.status_code == 409 and await _code(r) == "thread_busy", r.text
    doc = await api.thread(thread)
    assert doc["thread"]["title"] == "renamed while running" and doc["thread"]["archived"] is False
    await api.post(f"/v1/requests/{request['id']}/respond", {"decision": "accept"}, expect=200)
    await api.wait_run(sent["run_id"])
    await _patch(api, thread, {"archived": True})


async def test_L1_3_bad_bodies_and_ids_are_typed_refusals_that_change_nothing(api):
    thread = await api.create_thread(title="kept")
    seq = (await api.thread(thread))["seq"]
    cases = [
        ({"title": "x" * 201}, 400, "invalid_title"),
        ({"archived": True, "owner": "mallory"}, 400, "bad_request"),
        ({}, 400, "empty_update"),
        ({"archived": "yes"}, 400, "bad_request"),
    ]
    for body, status, code in cases:
        r = await api.request("PATCH", f"/v1/threads/{thread}", json=body)
        assert (r.status_code, await _code(r)) == (status, code), (body, r.text)
    for bad in ("..%2F..%2Fetc", "thr_x.>", "thr_*", "run_01m8zgdc42w521bfn4wd2afbte"):
        for method in ("PATCH", "DELETE"):
            r = await api.request(method, f"/v1/threads/{bad}", json={"title": "x"} if method == "PATCH" else None)
            assert r.status_code in (400, 404), (method, bad, r.text)
            if r.status_code == 400:
                assert await _code(r) == "invalid_id", r.text
    doc = await api.thread(thread)
    assert doc["seq"] == seq and doc["thread"]["title"] == "kept"


async def test_L1_3_L1_4_another_tenants_thread_is_a_404_and_nothing_changes(api, stack, stack_nc):
    thread = await api.create_thread(title="mine")
    seq = (await api.thread(thread))["seq"]
    mallory = await make_api(stack, stack_nc, f"{api.tenant}x")
    try:
        r = await mallory.request("PATCH", f"/v1/threads/{thread}", json={"title": "theirs", "archived": True})
        assert r.status_code == 404 and await _code(r) == "thread_not_found", r.text
        r = await mallory.request("DELETE", f"/v1/threads/{thread}")
        assert r.status_code == 404 and await _code(r) == "thread_not_found", r.text
    finally:
        await mallory.close()
    doc = await api.thread(thread)
    assert doc["seq"] == seq and doc["thread"]["title"] == "mine" and not doc["thread"]["archived"]


async def test_L1_4_delete_is_refused_during_a_run_then_erases_the_thread_everywhere(api, stack, stack_nc):
    thread = await api.create_thread(title="to delete")
    first = await api.send(thread, "write", script=script(write("secret.txt", "s3cret\n"), text("wrote it")))
    await api.wait_run(first["run_id"])
    sent = await api.send(thread, "wait", script=script(approval("go on?"), text("done")))
    request = await api.wait_request(thread)
    r = await api.request("DELETE", f"/v1/threads/{thread}")
    assert r.status_code == 409 and await _code(r) == "thread_busy", r.text
    assert (await api.thread(thread))["thread"]["title"] == "to delete"
    await api.post(f"/v1/requests/{request['id']}/respond", {"decision": "accept"}, expect=200)
    await api.wait_run(sent["run_id"])
    assert await _objects_of(stack_nc, api.tenant, thread), "the run's checkpoints were archived"
    workspace = stack.workspace_of(api.tenant, thread)
    assert (workspace / "secret.txt").read_text() == "s3cret\n"
    shadows = stack.node_dir_of(api.tenant, thread)
    assert await _messages_of_thread(stack_nc, api.tenant, thread) > 5

    deleted = await _delete(api, thread)
    assert deleted["thread_id"] == thread
    for path in (f"/v1/threads/{thread}", f"/v1/threads/{thread}/runs", f"/v1/runs/{first['run_id']}"):
        r = await api.request("GET", path)
        assert r.status_code == 404, (path, r.text)
    assert thread not in await _listed(api, archived="include")
    # the stream keeps the tombstone alone
    assert await _messages_of_thread(stack_nc, api.tenant, thread) == 1
    tombstone = [e async for e in _events(stack_nc, api.tenant, thread)]
    assert [e.type for e in tombstone] == ["thread.deleted"] and tombstone[0].data.by == "alice"
    assert await _objects_of(stack_nc, api.tenant, thread) == []
    assert not workspace.exists()  # the thread's own workspace, and every git dir naming its checkpoints
    assert not [p for p in shadows.rglob("*.git") if _names_thread(p, thread)]
    redis = Redis.from_url(stack.redis_url)
    try:
        doc_key = f"treadle:{{{api.tenant}}}:thread:{thread}"
        assert set(await redis.hkeys(doc_key)) <= {b"seq", b"v", b"deleted"}
        assert await redis.hget(f"treadle:{{{api.tenant}}}:summaries", thread) is None
        assert await redis.zscore(f"treadle:{{{api.tenant}}}:threads", thread) is None
        index = await redis.hgetall(f"treadle:{{{api.tenant}}}:runs")
        assert thread.encode() not in index.values()
        assert not await redis.exists(f"treadle:{{{api.tenant}}}:places:{thread}")
        report = await check_projections(stack_nc, redis, api.tenant, settle=5)
        assert report.ok, report.summary()  # `treadle check`: the log and the projections agree on a deleted thread
    finally:
        await redis.aclose()

    audited = await stack_nc.jetstream().get_last_msg("TREADLE_AUDIT", f"treadle.audit.{api.tenant}.thread.deleted")
    record = json.loads(audited.data)
    assert (record["target"], record["actor"], record["details"]["repeated"]) == (thread, "alice", False)

    again = await _delete(api, thread)  # deleting again answers the same and changes nothing
    assert again["thread_id"] == thread
    assert await _messages_of_thread(stack_nc, api.tenant, thread) == 1
    r = await api.request("PATCH", f"/v1/threads/{thread}", json={"title": "back"})
    assert r.status_code == 404 and await _code(r) == "thread_not_found"
    r = await api.request("POST", f"/v1/threads/{thread}/messages", json={"text": "hello"})
    assert r.status_code == 404 and await _code(r) == "thread_not_found"


def _names_thread(gitdir, thread: str) -> bool:
    """Whether a git dir holds a checkpoint ref of ``thread`` (loose or packed)."""
    refs = gitdir / "refs" / "treadle" / "checkpoints" / thread
    packed = gitdir / "packed-refs"
    return refs.exists() or (packed.exists() and f"/{thread}/" in packed.read_text())


async def _events(stack_nc, tenant: str, thread: str):
    from treadle.eventlog.log import EventLog

    for e in await EventLog(stack_nc).read(tenant, thread):
        yield e


async def test_L1_4_a_fork_of_a_deleted_thread_keeps_working(api, stack):
    source = await api.create_thread(title="parent")
    first = await api.send(source, "one", script=script(write("a.txt", "a\n"), text("one")))
    await api.wait_run(first["run_id"])
    child = (await fork(api, source, {"type": "run", "id": first["run_id"]}, title="child"))["thread_id"]
    await api.wait_thread(child, lambda d: d["transfers"], "the fork's transfer")
    await _delete(api, source)
    sent = await api.send(child, "go on", script=script(write("b.txt", "b\n"), text("child goes on")))
    await api.wait_run(sent["run_id"])
    doc = await api.thread(child)
    assert doc["thread"]["title"] == "child" and doc["runs"][-1]["status"] == "completed"
    workspace = stack.workspace_of(api.tenant, child)
    assert (workspace / "a.txt").read_text() == "a\n" and (workspace / "b.txt").read_text() == "b\n"
    r = await api.request("GET", f"/v1/threads/{child}/lineage")
    assert r.status_code == 200, r.text
    assert r.json()["root_thread_id"] == child  # the deleted parent is no longer readable


async def test_L1_3_an_agent_archives_and_renames_threads_with_the_mcp_tool_and_cannot_delete(api):
    async with mcp_session(api.client.base_url, api.token) as mcp:
        tools = {t.name for t in (await mcp.list_tools()).tools}
        assert "thread_update" in tools and not any("thread" in name and "delete" in name for name in tools)
        started = await call(mcp, "thread_start", title="child of an agent")
        thread = started["thread_id"]
        done = await call(mcp, "thread_update", thread_id=thread, title="tidied", archived=True)
        assert done["changed"] is True
        assert (await call(mcp, "thread_update", thread_id=thread, archived=True))["changed"] is False
        listed = await call(mcp, "thread_list", archived="only")
        assert [(t["id"], t["title"], t["archived"]) for t in listed["items"]] == [(thread, "tidied", True)]
        assert thread not in {t["id"] for t in (await call(mcp, "thread_list"))["items"]}
        with pytest.raises(ToolFailed) as refused:
            await call(mcp, "thread_update", thread_id=thread, title="x" * 201)
        assert refused.value.kind == "invalid_request"
        with pytest.raises(ToolFailed) as refused:
            await call(mcp, "thread_update", thread_id="thr_..>", title="x")
        assert refused.value.kind in ("invalid_request", "not_found")
    assert (await api.thread(thread))["thread"]["title"] == "tidied"


async def test_L1_3_L1_4_the_sdk_and_the_cli_rename_archive_and_delete(api, stack, tmp_path):
    async with AsyncTreadle(stack.api_url, api.token) as client:
        thread = (await client.create_thread(title="sdk")).thread_id
        changed = await client.update_thread(thread, title="sdk renamed")
        assert changed.changed and (await client.get_thread(thread)).thread.title == "sdk renamed"
        assert (await client.archive_thread(thread)).changed
        assert [t.id async for t in await client.list_threads(archived="only")] == [thread]
        assert (await client.unarchive_thread(thread)).changed
        with Treadle(stack.api_url, api.token) as sync:  # the sync client: the same calls
            assert sync.update_thread(thread, title="sync").changed
            assert sync.archive_thread(thread).changed

        flags = ["--api", stack.api_url, "--token", api.token]
        code, out, err = await treadle("threads", "unarchive", thread, *flags, cwd=tmp_path)
        assert code == 0, out + err
        code, out, err = await treadle("threads", "rename", thread, "from the cli", *flags, cwd=tmp_path)
        assert code == 0 and "updated" in out, out + err
        code, out, err = await treadle("threads", "list", "--archived", "include", "-o", "json", *flags, cwd=tmp_path)
        assert code == 0 and json.loads(out)["items"][0]["title"] == "from the cli", out + err
        code, out, err = await treadle("threads", "delete", thread, *flags, cwd=tmp_path)  # no terminal, no --yes
        assert code != 0 and "--yes" in err, out + err
        assert (await client.get_thread(thread)).thread.title == "from the cli"
        code, out, err = await treadle("threads", "delete", thread, "--yes", *flags, cwd=tmp_path)
        assert code == 0 and "deleted" in out, out + err
        with pytest.raises(NotFound):
            await client.get_thread(thread)
        assert (await client.delete_thread(thread)).thread_id == thread  # a repeat answers the same


async def test_L1_4_a_delete_that_stopped_after_its_tombstone_is_finished_by_the_next(api, stack, stack_nc, log):
    """The coordinator appends the tombstone, then erases: a crash between the two leaves a deleted thread whose
    data is all still there. Its reads are already 404s, and the next delete erases everything."""
    thread = await api.create_thread(title="half deleted")
    sent = await api.send(thread, "write", script=script(write("left.txt", "still here\n"), text("ok")))
    await api.wait_run(sent["run_id"])
    doc = await api.thread(thread)
    tombstone = ev.ThreadDeleted(by="alice", workspace=doc["thread"]["workspace"], volume=doc["thread"]["volume"])
    envelope = ev.Envelope(
        id=f"evt_{api.tenant}_tombstone", type=ev.ThreadDeleted.TYPE, tenant=api.tenant, thread=thread,
        at=datetime.now(UTC), command_id="cmd_crashed_delete", actor="alice", data=tombstone,
    )  # fmt: skip
    await log.append(api.tenant, thread, doc["seq"], [envelope])  # what a coordinator that then crashed appended
    r = await api.request("GET", f"/v1/threads/{thread}")
    assert r.status_code == 404, r.text
    assert await _messages_of_thread(stack_nc, api.tenant, thread) > 1 and await _objects_of(
        stack_nc, api.tenant, thread
    )
    assert stack.workspace_of(api.tenant, thread).exists()

    await _delete(api, thread)
    assert await _messages_of_thread(stack_nc, api.tenant, thread) == 1
    assert await _objects_of(stack_nc, api.tenant, thread) == []
    assert not stack.workspace_of(api.tenant, thread).exists()


async def test_L1_4_a_projector_behind_the_erasure_erases_the_views_from_the_tombstone(api, stack, stack_nc):
    """The projector folds the tombstone after the erasure purged the events before it: it needs none of them."""
    thread = await api.create_thread(title="projected late")
    sent = await api.send(thread, "hi", script=script(text("hello")))
    await api.wait_run(sent["run_id"])
    await stack.processes.halt("projector")
    try:
        await _delete(api, thread)
        assert await _messages_of_thread(stack_nc, api.tenant, thread) == 1
    finally:
        await stack.processes.start()
    await stack.wait_ready(names=["projector"])
    redis = Redis.from_url(stack.redis_url)
    try:
        doc_key = f"treadle:{{{api.tenant}}}:thread:{thread}"
        await wait_for(lambda: _erased(redis, doc_key), timeout=30, what="the projector erased the thread's views")
        assert await redis.hget(f"treadle:{{{api.tenant}}}:summaries", thread) is None
    finally:
        await redis.aclose()
    r = await api.request("GET", f"/v1/threads/{thread}")
    assert r.status_code == 404, r.text


async def _erased(redis, doc_key: str) -> bool:
    return await redis.hget(doc_key, "deleted") == b"1"


async def test_L1_4_a_deleted_thread_no_longer_counts_against_the_tenants_thread_limit(api, stack_nc):
    await PolicyStore(stack_nc.jetstream()).put(api.tenant, TenantPolicy(max_threads=2), "test")
    first = await api.create_thread(title="one")
    await api.create_thread(title="two")
    r = await api.request("POST", "/v1/threads", json={"title": "three"})
    assert r.status_code == 429 and await _code(r) == "quota_exceeded", r.text
    await _delete(api, first)  # not the newest thread: the coordinator's count must not be the cached one
    await api.create_thread(title="three")


async def test_L1_3_paging_the_default_list_skips_archived_threads_between_pages(api):
    made = [await api.create_thread(title=f"t{i}") for i in range(6)]
    for thread in (made[1], made[2], made[4]):  # newest first: t5, [t4], t3, [t2], [t1], t0
        await _patch(api, thread, {"archived": True})
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        r = await api.request("GET", "/v1/threads", params=params)
        assert r.status_code == 200, r.text
        seen += [t["id"] for t in r.json()["items"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == [made[5], made[3], made[0]]
    r = await api.request("GET", "/v1/threads", params={"limit": 2, "archived": "only"})
    assert [t["id"] for t in r.json()["items"]] == [made[4], made[2]]
    cursor = r.json()["next_cursor"]
    r = await api.request("GET", "/v1/threads", params={"limit": 2, "cursor": cursor})  # another filter's cursor
    assert r.status_code == 400 and await _code(r) == "invalid_cursor", r.text
