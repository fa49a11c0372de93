"""Issue 21, part 3: ``delegate_task``, ``task_status`` and ``task_cancel`` through ``/mcp`` against the real
stack. A delegated task is a child thread with lineage ``subagent`` (L5/L6 lineage) shown as an app-owned node
of the parent run; the child's end finalises that node with one result transfer, driven by the child's
run-ended event — also when a worker is killed in between (L9); an interrupted parent interrupts its async
tasks when the tenant's setting says so (L8); the policy's modes only narrow and its bounds are typed quotas."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.api import Api, make_api
from tests.support.helpers import wait_for
from tests.support.mcp_client import ToolFailed, call, mcp_session
from tests.support.scripts import HANG, script, text
from treadle.core import events as ev
from treadle.ops.tokens import TokenStore

pytestmark = pytest.mark.e2e

SLOW = "".join(f"part {i:02d}. " for i in range(30))  # streamed over about 1.5 s


async def _failed(mcp, tool_name: str, **arguments) -> ToolFailed:
    with pytest.raises(ToolFailed) as failed:
        await call(mcp, tool_name, **arguments)
    return failed.value


async def _parent(api: Api, profile: str = "full") -> tuple[str, str]:
    """A thread whose run hangs (the parent run a task is delegated from)."""
    thread = await api.create_thread(title="parent")
    run = (await api.send(thread, "orchestrate", script=script(HANG, profile=profile)))["run_id"]
    await api.wait_running(run)
    return thread, run


async def _types(log, tenant: str, thread: str, *types: type) -> list:
    return [e for e in await log.read(tenant, thread) if isinstance(e.data, types)]


async def _admin(api: Api, stack, stack_nc) -> Api:
    return Api(stack.api_url, await TokenStore(stack_nc.jetstream()).create(api.tenant, "root", "admin"), api.tenant)


async def _finalised(mcp, task: str) -> dict:
    async def done():
        status = await call(mcp, "task_status", task_id=task)
        return status if status["finalised"] else None

    return await wait_for(done, timeout=30, interval=0.05, what=f"task {task} finalised")


async def test_L5_L6_delegate_async_then_task_status_until_the_result_is_recorded_once(api, log):
    parent, parent_run = await _parent(api)
    async with mcp_session(api.client.base_url, api.token) as mcp:
        args = {
            "parent_thread_id": parent,
            "task": "list the files",
            "role": "You are terse.",
            "script": script(text("two files")),
            "client_request_id": "task-1",
        }
        made = await call(mcp, "delegate_task", **args)
        task = made["task_id"]
        assert (made["parent_thread_id"], made["parent_run_id"], made["mode"]) == (parent, parent_run, "async")
        again = await call(mcp, "delegate_task", **args)  # a retry names the same child
        assert (again["task_id"], again["run_id"]) == (task, made["run_id"])
        reused = await _failed(mcp, "delegate_task", **{**args, "task": "something else"})
        assert (reused.kind, reused.code) == ("invalid_request", "idempotency_key_reused")

        status = await _finalised(mcp, task)
        assert status["status"] == "completed" and status["done"]
        assert status["result"] == {"status": "completed", "summary": "two files"}

    child = await api.thread(task)
    assert child["lineage"]["relationship"] == "subagent" and child["lineage"]["parent_thread_id"] == parent
    assert child["lineage"]["source_point"] == {"thread_id": parent, "run_id": parent_run, "node_id": status["node_id"]}
    assert [m["text"] for m in child["messages"] if m["role"] == "user"] == ["You are terse.\n\nlist the files"]
    doc = await api.thread(parent)
    (node,) = [n for r in doc["runs"] for n in r["nodes"] if n["owner"] == "app"]
    assert (node["kind"], node["child_thread_id"], node["status"], node["output"]) == (
        "subagent", task, "completed", "two files",
    )  # fmt: skip
    (transfer,) = doc["transfers"]
    assert (transfer["type"], transfer["source_thread_id"], transfer["summary"]) == (
        "delegation_result", task, "two files",
    )  # fmt: skip
    assert [c["thread_id"] for c in doc["lineage"]["children"]] == [task]
    assert len(await _types(log, api.tenant, parent, ev.DelegationStarted)) == 1
    assert len(await _types(log, api.tenant, parent, ev.DelegationFinished)) == 1
    assert len(await _types(log, api.tenant, task, ev.DelegationEnded)) == 1
    assert len([t for t in await _types(log, api.tenant, task, ev.ThreadCreated)]) == 1
