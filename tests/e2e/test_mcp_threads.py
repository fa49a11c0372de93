"""Issue 21, the thread tools of ``/mcp`` driven by the official MCP SDK's client over real HTTP against the real
stack: each tool answers the public views, another tenant's thread is not found, a revoked token is refused at
the door, a client request id makes a retried call the same call, and bad input is a typed failure that
changes nothing."""

from __future__ import annotations

import httpx
import pytest

from tests.support.api import Api, make_api
from tests.support.helpers import wait_for
from tests.support.mcp_client import ToolFailed, call, mcp_session
from tests.support.scripts import HANG, script, text, tool
from treadle.ops.tokens import TokenStore

pytestmark = pytest.mark.e2e

TOOLS = {
    "capabilities",
    "thread_start",
    "create_threads",
    "thread_list",
    "thread_read",
    "thread_send",
    "thread_wait",
    "thread_interrupt",
    "thread_update",
    "thread_fork",
    "thread_transfers",
    "delegate_task",
    "task_status",
    "task_cancel",
}


async def _failed(mcp, tool_name: str, **arguments) -> ToolFailed:
    with pytest.raises(ToolFailed) as failed:
        await call(mcp, tool_name, **arguments)
    return failed.value


async def test_capabilities_and_thread_start_list_read_wait(api):
    async with mcp_session(api.client.base_url, api.token) as mcp:
        assert TOOLS <= {t.name for t in (await mcp.list_tools()).tools}
        caps = await call(mcp, "capabilities")
        assert caps["tenant"] == api.tenant and "scripted" in caps["providers"]
        assert caps["limits"]["create_threads"] == 20
        started = await call(mcp, "thread_start", title="via mcp", text="hello")
        thread, run = started["thread_id"], started["message"]["run_id"]
        waited = await call(mcp, "thread_wait", thread_id=thread, run_id=run, timeout_seconds=30)
        assert not waited["timed_out"] and waited["run"]["status"] == "completed"
        read = await call(mcp, "thread_read", thread_id=thread, view="messages", min_seq=waited["seq"])
        assert read["items"][0]["role"] == "user" and read["next_position"] == len(read["items"])
        page = await call(mcp, "thread_list", limit=50)
        assert set(page) == {"items", "next_cursor", "seq"}
        assert thread in {t["id"] for t in page["items"]}
        activity = await call(mcp, "thread_read", thread_id=thread, view="activity")
        assert activity["items"] and all(item["run_id"] == run for item in activity["items"])


async def test_create_threads_and_read_them_incrementally_with_bounded_text(api):
    long = "x" * 300
    async with mcp_session(api.client.base_url, api.token) as mcp:
        made = await call(
            mcp,
            "create_threads",
            threads=[{"title": f"t{i}", "text": f"go {i}", "script": script(text(long))} for i in range(2)],
        )
        assert len(made["threads"]) == 2
        for one in made["threads"]:
            thread = one["thread_id"]
            done = await call(mcp, "thread_wait", thread_id=thread, run_id=one["message"]["run_id"])
            first = await call(mcp, "thread_read", thread_id=thread, limit=1, max_chars=100, min_seq=done["seq"])
            assert [m["role"] for m in first["items"]] == ["user"] and first["has_more"]
            rest = await call(
                mcp, "thread_read", thread_id=thread, after=first["next_position"], max_chars=100, min_seq=done["seq"]
            )
            (reply,) = rest["items"]
            assert reply["role"] == "assistant" and rest["truncated"] and reply["truncated"]
            assert reply["text"] == long[:100] and reply["text_chars"] == 300 and not rest["has_more"]
            again = await call(mcp, "thread_read", thread_id=thread, after=rest["next_position"])
            assert again["items"] == [] and again["next_position"] == rest["next_position"]


async def test_L3_2_L8_steer_and_interrupt_through_the_tools(api):
    async with mcp_session(api.client.base_url, api.token) as mcp:
        started = await call(
            mcp, "thread_start", text="build it", script=script(tool("pytest", delay_ms=400), HANG, profile="full")
        )
        thread, run = started["thread_id"], started["message"]["run_id"]
        await api.wait_thread(
            thread, lambda d: any(n["kind"] == "tool" for r in d["runs"] for n in r["nodes"]), "tool running"
        )
        steer = await call(
            mcp, "thread_send", thread_id=thread, text="use the fast tests", mode="steer", target_run_id=run
        )
        assert steer["disposition"] == "steered" and steer["run_id"] == run
        assert (await call(mcp, "thread_wait", thread_id=thread, run_id=run))["run"]["status"] == "completed"

        hanging = await call(mcp, "thread_send", thread_id=thread, text="hang", script=script(HANG))
        await api.wait_running(hanging["run_id"])
        queued = await call(mcp, "thread_send", thread_id=thread, text="later", mode="queue")
        assert queued["disposition"] == "queued"
        short = await call(mcp, "thread_wait", thread_id=thread, run_id=hanging["run_id"], timeout_seconds=0.2)
        assert short["timed_out"] and short["run"]["status"] == "running"  # a wait that times out changes nothing
        ack = await call(mcp, "thread_interrupt", run_id=hanging["run_id"])
        assert ack["run_id"] == hanging["run_id"]
        ended = await call(mcp, "thread_wait", thread_id=thread, run_id=hanging["run_id"])
        assert ended["run"]["status"] == "interrupted"
        assert (await call(mcp, "thread_wait", thread_id=thread, run_id=queued["run_id"]))["run"][
            "status"
        ] == "completed"
        refused = await _failed(mcp, "thread_interrupt", run_id=hanging["run_id"])
        assert (refused.kind, refused.code) == ("not_interruptible", "run_not_active")


async def test_L6_1_thread_fork_and_thread_transfers(api):
    async with mcp_session(api.client.base_url, api.token) as mcp:
        started = await call(mcp, "thread_start", text="hello")
        thread, run = started["thread_id"], started["message"]["run_id"]
        await call(mcp, "thread_wait", thread_id=thread, run_id=run)
        fork = await call(mcp, "thread_fork", thread_id=thread, source_type="run", source_id=run, title="fork")
        assert fork["parent_thread_id"] == thread
        seen = await call(mcp, "thread_transfers", thread_id=fork["thread_id"])
        (transfer,) = seen["transfers"]
        assert (transfer["type"], transfer["status"], transfer["source_thread_id"]) == ("fork", "pending", thread)
        assert seen["lineage"]["parent_thread_id"] == thread


async def test_another_tenants_thread_is_not_found_and_unchanged(api, stack, stack_nc, log):
    other = await make_api(stack, stack_nc, f"{api.tenant}-other")
    try:
        theirs = await other.create_thread(title="not yours")
        run = (await other.send(theirs, "hi"))["run_id"]
        await other.wait_run(run)
        before = await log.last_seq(other.tenant, theirs)
        async with mcp_session(api.client.base_url, api.token) as mcp:
            for name, args in (
                ("thread_read", {"thread_id": theirs}),
                ("thread_send", {"thread_id": theirs, "text": "hijack"}),
                ("thread_wait", {"thread_id": theirs}),
                ("thread_transfers", {"thread_id": theirs}),
                ("thread_fork", {"thread_id": theirs, "source_type": "run", "source_id": run}),
                ("thread_interrupt", {"run_id": run}),
            ):
                failed = await _failed(mcp, name, **args)
                assert failed.kind == "not_found", (name, failed.error)
                assert theirs not in str(failed.error.get("details", {}).get("created", ""))
            assert theirs not in {t["id"] for t in (await call(mcp, "thread_list"))["items"]}
        assert await log.last_seq(other.tenant, theirs) == before
    finally:
        await other.close()


async def test_a_revoked_or_unknown_token_is_refused_at_the_door(stack, stack_nc, tenant):
    tokens = TokenStore(stack_nc.jetstream())
    token = await tokens.create(tenant, "bob")
    async with mcp_session(stack.api_url, token) as mcp:
        assert (await call(mcp, "capabilities"))["user"] == "bob"
    await tokens.revoke(token)
    probe = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}

    async def refused(bearer: str) -> httpx.Response | None:
        async with httpx.AsyncClient() as http:
            r = await http.post(f"{stack.api_url}/mcp", json=probe, headers={"Authorization": f"Bearer {bearer}"})
        return r if r.status_code == 401 else None

    answer = await wait_for(lambda: refused(token), timeout=20, interval=0.2, what="the revoked token refused")
    assert answer.json()["error"]["code"] == "unauthorized"
    assert (await refused("trd_never-issued")) is not None
    async with httpx.AsyncClient() as http:
        assert (await http.post(f"{stack.api_url}/mcp", json=probe)).status_code == 401


async def test_a_client_request_id_makes_a_retried_call_the_same_call(api, log):
    async with mcp_session(api.client.base_url, api.token) as mcp:
        first = await call(mcp, "thread_start", title="once", text="hi", client_request_id="start-1")
        again = await call(mcp, "thread_start", title="once", text="hi", client_request_id="start-1")
        assert again["thread_id"] == first["thread_id"] and again["message"]["run_id"] == first["message"]["run_id"]
        thread = first["thread_id"]
        await call(mcp, "thread_wait", thread_id=thread)
        sent = [await call(mcp, "thread_send", thread_id=thread, text="more", client_request_id="send-1") for _ in "ab"]
        assert sent[0]["run_id"] == sent[1]["run_id"] and sent[0]["message_id"] == sent[1]["message_id"]
        many = [
            await call(mcp, "create_threads", threads=[{"title": "a"}, {"title": "b"}], client_request_id="many-1")
            for _ in "ab"
        ]
        assert many[0] == many[1]
        reused = await _failed(mcp, "thread_start", title="other", client_request_id="start-1")
        assert (reused.kind, reused.code) == ("invalid_request", "idempotency_key_reused")
        titles = [t["title"] for t in (await call(mcp, "thread_list", limit=200))["items"]]
        assert sorted(titles) == ["a", "b", "once"]


async def test_bad_input_escalation_and_quota_are_typed_and_change_nothing(api, stack, stack_nc, log):
    admin = Api(stack.api_url, await TokenStore(stack_nc.jetstream()).create(api.tenant, "root", "admin"), api.tenant)
    try:
        async with mcp_session(api.client.base_url, api.token) as mcp:
            too_many = await _failed(mcp, "create_threads", threads=[{"title": str(i)} for i in range(21)])
            assert too_many.kind == "invalid_request" and too_many.error["details"]["fields"] == ["threads"]
            for name, args in (
                ("thread_read", {"thread_id": "../thr_x"}),
                ("thread_read", {"thread_id": "thr_" + "0" * 26, "limit": 10_000}),
                ("thread_send", {"thread_id": "thr_*", "text": "x"}),
                ("thread_interrupt", {"run_id": "thr_notarun"}),
                ("thread_start", {"provider": "nope"}),
                ("thread_wait", {"thread_id": "thr_x", "timeout_seconds": 10_000}),
            ):
                failed = await _failed(mcp, name, **args)
                assert failed.kind == "invalid_request", (name, failed.error)
            for name, args, code in (  # the contract's limits (treadle.api), as on the HTTP routes
                ("thread_send", {"thread_id": "thr_" + "0" * 26, "text": "x" * 100_001}, "text_too_long"),
                ("thread_send", {"thread_id": "thr_" + "0" * 26, "text": "x", "model": "m" * 201}, "invalid_model"),
                ("thread_start", {"runtime_mode": "yolo"}, "invalid_runtime_mode"),
                ("thread_start", {"text": "x" * 100_001}, "text_too_long"),
                (
                    "thread_fork",
                    {"thread_id": "thr_" + "0" * 26, "source_type": "run", "source_id": "r" * 65},
                    "invalid_id",
                ),
            ):
                failed = await _failed(mcp, name, **args)
                assert (failed.kind, failed.code) == ("invalid_request", code), (name, failed.error)
            escalated = await _failed(mcp, "thread_start", runtime_mode="full_access")
            assert (escalated.kind, escalated.code) == ("mode_escalation_denied", "mode_not_allowed")
            assert (await call(mcp, "thread_list"))["items"] == []

            assert (await admin.request("PUT", "/v1/policy", json={"max_threads": 2})).status_code == 200
            quota = await _failed(mcp, "create_threads", threads=[{"title": f"q{i}"} for i in range(3)])
            assert (quota.kind, quota.code, quota.error["details"]["index"]) == ("quota_exceeded", "quota_exceeded", 2)
            assert len(quota.error["details"]["created"]) == 2
            assert len((await call(mcp, "thread_list"))["items"]) == 2
    finally:
        await admin.close()


async def test_thread_list_filters_by_search_status_and_provider(api):
    async with mcp_session(api.client.base_url, api.token) as mcp:
        done = await call(mcp, "thread_start", title="Build Docs", text="hi")
        await call(mcp, "thread_wait", thread_id=done["thread_id"])
        busy = await call(mcp, "thread_start", title="build tests", text="hang", script=script(HANG, profile="full"))
        await api.wait_running(busy["message"]["run_id"])
        idle = await call(mcp, "thread_start", title="notes", provider="scripted-b")

        async def ids(**filters) -> set[str]:
            return {t["id"] for t in (await call(mcp, "thread_list", limit=200, **filters))["items"]}

        assert await ids(search="BUILD") == {done["thread_id"], busy["thread_id"]}
        assert await ids(status="active") == {busy["thread_id"]}
        assert await ids(status="completed") == {done["thread_id"]}
        assert await ids(status="idle") == {idle["thread_id"]}
        assert await ids(provider="scripted-b") == {idle["thread_id"]}
        assert await ids(search="build", status="active") == {busy["thread_id"]}
        assert await ids(search="nothing like it") == set()
        bad = await _failed(mcp, "thread_list", status="sleeping")
        assert bad.kind == "invalid_request" and bad.error["details"]["fields"] == ["status"]
        await call(mcp, "thread_interrupt", run_id=busy["message"]["run_id"])
