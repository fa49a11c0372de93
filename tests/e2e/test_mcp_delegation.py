"""Issue 21, part 3: ``delegate_task``, ``task_status`` and ``task_cancel`` through ``/mcp`` against the real
stack. A delegated task is a child thread with lineage ``subagent`` (L5/L6 lineage) shown as an app-owned node
of the parent run; the child's end finalises that node with one result transfer, driven by the child's
run-ended event — also when a worker is killed in between (L9); an interrupted parent interrupts its async
tasks when the tenant's setting says so (L8); the policy's modes only narrow and its bounds are typed quotas."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from tests.support.api import Api, make_api
from tests.support.helpers import wait_for
from tests.support.mcp_client import ToolFailed, call, mcp_session
from tests.support.scripts import HANG, approval, script, text
from treadle.core import events as ev
from treadle.core.ids import new_id
from treadle.ops.session_credentials import SessionCredentials
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


async def _ended_once(log, tenant: str, task: str) -> None:
    """The task's own mark is appended after the parent's record of its result (coordinator/delegations.py), so a
    reader who saw the result finalised waits for the mark, then finds it once."""
    found = await wait_for(lambda: _types(log, tenant, task, ev.DelegationEnded), timeout=30, what="the task's mark")
    assert len(found) == 1


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
    await _ended_once(log, api.tenant, task)
    assert len([t for t in await _types(log, api.tenant, task, ev.ThreadCreated)]) == 1


async def test_delegate_wait_answers_the_result_and_a_wait_that_times_out_never_cancels(api, log):
    parent, _ = await _parent(api)
    async with mcp_session(api.client.base_url, api.token) as mcp:
        done = await call(
            mcp, "delegate_task", parent_thread_id=parent, task="sum it", mode="wait", script=script(text("42"))
        )
        assert not done["timed_out"] and done["finalised"] and done["result"]["summary"] == "42"

        short = await call(
            mcp, "delegate_task", parent_thread_id=parent, task="hang", mode="wait", timeout_seconds=0.3,
            script=script(HANG, profile="full"),
        )  # fmt: skip
        assert short["timed_out"] and not short["finalised"] and short["result"] is None
        task = short["task_id"]
        await api.wait_running(short["run_id"])
        assert (await call(mcp, "task_status", task_id=task))["status"] == "running"  # the timeout cancelled nothing
        assert not await _types(log, api.tenant, task, ev.InterruptRequested)

        cancelled = await call(mcp, "task_cancel", task_id=task)
        assert cancelled["run_id"] == short["run_id"] and cancelled["disposition"] == "interrupting"
        status = await _finalised(mcp, task)
        assert status["result"] == {"status": "interrupted", "summary": "the delegated task ended interrupted"}
        again = await _failed(mcp, "task_cancel", task_id=task)
        assert (again.kind, again.code) == ("not_interruptible", "run_not_active")
    assert len(await _types(log, api.tenant, parent, ev.DelegationFinished)) == 2


async def test_escalation_other_tenants_and_inactive_parents_are_typed_and_change_nothing(api, stack, stack_nc, log):
    parent, _ = await _parent(api)
    idle = await api.create_thread(title="idle")
    other = await make_api(stack, stack_nc, f"{api.tenant}-other")
    try:
        theirs, _ = await _parent(other)
        their_task = None
        async with mcp_session(other.client.base_url, other.token) as mcp:
            their_task = (await call(mcp, "delegate_task", parent_thread_id=theirs, task="x", script=script(HANG)))[
                "task_id"
            ]
        before = {t: await log.last_seq(api.tenant, t) for t in (parent, idle)}
        async with mcp_session(api.client.base_url, api.token) as mcp:
            wider = await _failed(mcp, "delegate_task", parent_thread_id=parent, task="x", runtime_mode="full_access")
            assert (wider.kind, wider.code) == ("mode_escalation_denied", "mode_not_allowed")
            unknown = await _failed(mcp, "delegate_task", parent_thread_id=parent, task="x", runtime_mode="root")
            assert unknown.kind == "invalid_request"
            for name, args in (
                ("delegate_task", {"parent_thread_id": theirs, "task": "x"}),
                ("task_status", {"task_id": their_task}),
                ("task_cancel", {"task_id": their_task}),
                ("task_status", {"task_id": parent}),  # a thread that is not a task
            ):
                failed = await _failed(mcp, name, **args)
                assert failed.kind == "not_found", (name, failed.error)
            inactive = await _failed(mcp, "delegate_task", parent_thread_id=idle, task="x")
            assert (inactive.kind, inactive.code) == ("parent_not_active", "parent_not_active")
            unnamed = await _failed(mcp, "delegate_task", task="x")
            assert unnamed.kind == "invalid_request"
            bad = await _failed(mcp, "delegate_task", parent_thread_id="../thr_x", task="x")
            assert bad.kind == "invalid_request"
            huge = await _failed(mcp, "delegate_task", parent_thread_id=parent, task="x" * 100_000)
            assert huge.kind == "invalid_request" and huge.error["details"]["fields"] == ["task"]
        assert {t: await log.last_seq(api.tenant, t) for t in (parent, idle)} == before
        assert (await other.thread(their_task))["runs"][0]["status"] in ("starting", "running")
    finally:
        await other.close()


async def test_delegation_depth_children_per_run_and_running_children_are_quotas(api, stack, stack_nc, log):
    admin = await _admin(api, stack, stack_nc)
    try:
        for bad in ({"max_delegation_depth": 0}, {"max_running_children": 10**9}, {"cascade_interrupts": "yes"}):
            assert (await admin.request("PUT", "/v1/policy", json=bad)).status_code == 400, bad
        policy = {"max_delegation_depth": 1, "max_children_per_run": 2, "max_running_children": 2}
        assert (await admin.request("PUT", "/v1/policy", json=policy)).status_code == 200
        parent, _ = await _parent(api)
        async with mcp_session(api.client.base_url, api.token) as mcp:
            hang = script(HANG, profile="full")
            first = await call(mcp, "delegate_task", parent_thread_id=parent, task="one", script=hang)
            await api.wait_running(first["run_id"])
            deeper = await _failed(mcp, "delegate_task", parent_thread_id=first["task_id"], task="deeper")
            assert (deeper.kind, deeper.error["details"]["quota"]) == ("quota_exceeded", "delegation_depth")
            await call(mcp, "delegate_task", parent_thread_id=parent, task="two", script=hang)
            third = await _failed(mcp, "delegate_task", parent_thread_id=parent, task="three")
            assert (third.kind, third.error["details"]["quota"]) == ("quota_exceeded", "children_per_run")

            another, _ = await _parent(api)
            running = await _failed(mcp, "delegate_task", parent_thread_id=another, task="four")
            assert (running.kind, running.error["details"]) == (
                "quota_exceeded", {"quota": "running_children", "limit": 2, "current": 2},
            )  # fmt: skip
            await call(mcp, "task_cancel", task_id=first["task_id"])
            await _finalised(mcp, first["task_id"])
            await wait_for(
                lambda: _types(log, api.tenant, first["task_id"], ev.DelegationEnded), timeout=30, what="reported"
            )
            freed = await call(mcp, "delegate_task", parent_thread_id=another, task="four", script=script(text("ok")))
            assert (await _finalised(mcp, freed["task_id"]))["result"]["summary"] == "ok"
        assert len(await _types(log, api.tenant, parent, ev.DelegationStarted)) == 2
    finally:
        await admin.close()


@pytest.mark.parametrize("cascade", [True, False])
async def test_L8_interrupting_a_parent_run_cascades_to_its_async_tasks_when_the_setting_says_so(
    cascade, api, stack, stack_nc, log
):
    admin = await _admin(api, stack, stack_nc)
    try:
        assert (await admin.request("PUT", "/v1/policy", json={"cascade_interrupts": cascade})).status_code == 200
        parent, parent_run = await _parent(api)
        async with mcp_session(api.client.base_url, api.token) as mcp:
            made = await call(
                mcp, "delegate_task", parent_thread_id=parent, task="t", script=script(HANG, profile="full")
            )
            await api.wait_running(made["run_id"])
            later = await call(mcp, "thread_send", thread_id=parent, text="after", mode="queue")
            await call(mcp, "thread_interrupt", run_id=parent_run)
            await api.wait_run(parent_run, "interrupted")
            # the queued run starts from the same reaction to the parent's end that cascades (or not)
            await api.wait_run(later["run_id"])
            if cascade:
                status = await _finalised(mcp, made["task_id"])
                assert status["result"]["status"] == "interrupted"
                (asked,) = await _types(log, api.tenant, made["task_id"], ev.InterruptRequested)
                assert asked.data.by == "coordinator"
            else:
                assert (await call(mcp, "task_status", task_id=made["task_id"]))["status"] == "running"
                assert not await _types(log, api.tenant, made["task_id"], ev.InterruptRequested)
                await call(mcp, "task_cancel", task_id=made["task_id"])
                await _finalised(mcp, made["task_id"])
    finally:
        await admin.close()


async def _streaming(log, tenant: str, thread: str, run_id: str) -> bool:
    return any(isinstance(e.data, ev.MessageDelta) and e.data.run_id == run_id for e in await log.read(tenant, thread))


async def test_L9_the_provider_host_killed_while_a_parent_waits_on_its_task_both_recover_and_finalise_once(
    api, stack, log
):
    parent, parent_run = await _parent(api)
    async with mcp_session(api.client.base_url, api.token) as mcp:
        waiting = asyncio.create_task(
            call(
                mcp, "delegate_task", parent_thread_id=parent, task="stream", mode="wait", timeout_seconds=90,
                script=script(text(SLOW, delay_ms=50, chunk=10)), client_request_id="crash-1",
            )
        )  # fmt: skip

        async def child_streaming():
            (started,) = await _types(log, api.tenant, parent, ev.DelegationStarted) or [None]
            if started is None:
                return None
            child, run = started.data.child_thread_id, started.data.child_run_id
            return (child, run) if await _streaming(log, api.tenant, child, run) else None

        child, child_run = await wait_for(child_streaming, timeout=30, what="the task streaming")
        restarts = stack.processes.restarts("provider-host")
        await stack.processes.kill("provider-host")
        await wait_for(lambda: stack.processes.restarts("provider-host") > restarts, timeout=20, what="host back")

        done = await waiting
        assert done["task_id"] == child and done["finalised"] and not done["timed_out"]
        assert done["result"] == {"status": "completed", "summary": SLOW.strip()}
        run = await api.wait_run(child_run)
        assert [a["status"] for a in run["attempts"]] == ["lost", "completed"]  # the task recovered

        def parent_recovered(doc):
            (r,) = [r for r in doc["runs"] if r["id"] == parent_run]
            return r["status"] == "running" and len(r["attempts"]) == 2

        await api.wait_thread(parent, parent_recovered, "the parent's turn retried", timeout=60)
        assert len(await _types(log, api.tenant, parent, ev.DelegationFinished)) == 1
        (node,) = [n for r in (await api.thread(parent))["runs"] for n in r["nodes"] if n["owner"] == "app"]
        assert (node["status"], node["output"]) == ("completed", SLOW.strip())
        await call(mcp, "thread_interrupt", run_id=parent_run)


async def test_L9_a_coordinator_down_when_the_task_ends_finalises_the_parent_once_it_is_back(api, stack, log):
    parent, _ = await _parent(api)
    async with mcp_session(api.client.base_url, api.token) as mcp:
        made = await call(
            mcp, "delegate_task", parent_thread_id=parent, task="stream",
            script=script(text(SLOW, delay_ms=50, chunk=10)),
        )  # fmt: skip
        task, run_id = made["task_id"], made["run_id"]
        await wait_for(lambda: _streaming(log, api.tenant, task, run_id), timeout=30, what="the task streaming")
        await stack.processes.halt("coordinator")
        try:

            async def ended():
                return await _types(log, api.tenant, task, ev.RunEnded)

            await wait_for(ended, timeout=60, what="the task's run ended while the coordinator is down")
            assert not await _types(log, api.tenant, parent, ev.DelegationFinished)  # nobody finalised it yet
        finally:
            await stack.processes.start()
        status = await _finalised(mcp, task)
        assert status["result"] == {"status": "completed", "summary": SLOW.strip()}
        assert len(await _types(log, api.tenant, parent, ev.DelegationFinished)) == 1
        await _ended_once(log, api.tenant, task)


async def test_a_session_credential_delegates_from_its_own_threads_active_run_and_lists_only_its_tools(
    api, stack_nc, log
):
    parent, parent_run = await _parent(api)
    elsewhere, _ = await _parent(api)
    tools = ("delegate_task", "task_status")
    session = new_id("ps", int(datetime.now(UTC).timestamp() * 1000))
    token = await SessionCredentials(stack_nc.jetstream()).mint(
        tenant=api.tenant, thread=parent, session_id=session, capabilities=tools
    )
    async with mcp_session(api.client.base_url, token) as mcp:
        assert {t.name for t in (await mcp.list_tools()).tools} == set(tools)
        made = await call(mcp, "delegate_task", task="look", script=script(text("seen")))
        assert (made["parent_thread_id"], made["parent_run_id"]) == (parent, parent_run)
        assert (await _finalised(mcp, made["task_id"]))["result"]["summary"] == "seen"
        other = await _failed(mcp, "delegate_task", parent_thread_id=elsewhere, task="look")
        assert other.kind == "capability_denied"
        denied = await _failed(mcp, "task_cancel", task_id=made["task_id"])
        assert denied.kind == "capability_denied"
    assert (await api.thread(made["task_id"]))["messages"][0]["author"] == "agent"
    assert not await _types(log, api.tenant, elsewhere, ev.DelegationStarted)


async def test_an_async_task_outlives_its_parents_turn_and_finalises_the_ended_runs_node(api):
    thread = await api.create_thread(title="parent")
    parent_run = (await api.send(thread, "go", script=script(approval(), text("done"))))["run_id"]
    request = await api.wait_request(thread)  # the parent's turn waits for this answer
    async with mcp_session(api.client.base_url, api.token) as mcp:
        made = await call(mcp, "delegate_task", parent_thread_id=thread, task="t", script=script(HANG, profile="full"))
        await api.post(f"/v1/requests/{request['id']}/respond", {"decision": "accept"}, expect=200)
        ended = await api.wait_run(parent_run)  # the parent's turn completes with its task still running
        (node,) = [n for n in ended["nodes"] if n["owner"] == "app"]
        assert node["status"] == "running"
        await call(mcp, "task_cancel", task_id=made["task_id"])
        assert (await _finalised(mcp, made["task_id"]))["result"]["status"] == "interrupted"
    (node,) = [n for n in (await api.run(parent_run))["nodes"] if n["owner"] == "app"]
    assert node["status"] == "interrupted"
