"""The typed SDK (``treadle.client``) against a real stack: every answer decodes into its view, errors are typed
per code, the event stream resumes by itself after its connection is cut, and the SDK imports and works in a
process that refuses to import any server dependency."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from tests.support.mcp_client import ToolFailed, call, mcp_session
from tests.support.scripts import HANG, approval, script, text, write
from treadle.client import (
    AsyncTreadle,
    Diff,
    Forked,
    InvalidRequest,
    MessageAccepted,
    NotFound,
    SseEvent,
    ThreadCreated,
    Treadle,
)
from treadle.ops.tokens import TokenStore
from treadle.views.checkpoints import RollbackView
from treadle.views.lineage import LineageView
from treadle.views.requests import RuntimeRequest
from treadle.views.runs import QueueView
from treadle.views.thread import RunView, ThreadView

pytestmark = pytest.mark.e2e


async def _token(stack_nc, tenant: str) -> str:
    return await TokenStore(stack_nc.jetstream()).create(tenant, "alice")


@pytest.fixture
async def sdk(stack, stack_nc, tenant):
    async with AsyncTreadle(stack.api_url, await _token(stack_nc, tenant), timeout=30) as client:
        yield client


async def test_L11_1_an_approval_answered_through_the_sdk_completes_the_run_with_typed_views(sdk):
    created = await sdk.create_thread(title="sdk")
    assert isinstance(created, ThreadCreated)
    sent = await sdk.send_message(
        created.thread_id, "go", script=script(approval("run ls?"), write("a.txt", "a\n"), text("done"))
    )
    assert isinstance(sent, MessageAccepted) and sent.run_id.startswith("run_")
    request = await sdk.wait_request(created.thread_id, timeout=30)
    assert isinstance(request, RuntimeRequest) and request.prompt == "run ls?" and request.run_id == sent.run_id
    ack = await sdk.respond(request.id, decision="accept")
    assert ack.thread_id == created.thread_id and ack.seq >= sent.seq
    run = await sdk.wait_run(sent.run_id, timeout=30)
    assert isinstance(run, RunView) and run.status == "completed"
    assert run.checkpoint is not None and [f.path for f in run.checkpoint.files] == ["a.txt"]
    doc = await sdk.get_thread(created.thread_id)
    assert isinstance(doc, ThreadView) and doc.seq >= ack.seq and doc.requests[0].status == "resolved"
    diff = await sdk.run_diff(sent.run_id)
    assert isinstance(diff, Diff) and "+a" in diff.patch and diff.files[0].path == "a.txt"
    assert (await sdk.thread_diff(created.thread_id, from_ordinal=0, to_ordinal=1)).patch == diff.patch


async def test_L3_6_queue_edit_reorder_cancel_fork_and_rollback_through_the_sdk(sdk):
    thread = (await sdk.create_thread()).thread_id
    first = await sdk.send_message(thread, "one", script=script(write("one.txt", "1\n"), text("1")))
    await sdk.wait_run(first.run_id, timeout=30)
    active = await sdk.send_message(thread, "hang", script=script(HANG))
    await sdk.wait_run(active.run_id, timeout=30, statuses={"running"})
    queued = [await sdk.send_message(thread, f"q{i}", mode="queue_after_active") for i in range(3)]
    queue = await sdk.get_queue(thread)
    assert isinstance(queue, QueueView) and [q.run_id for q in queue.queue] == [q.run_id for q in queued]
    await sdk.edit_queued(thread, queued[0].run_id, "q0 edited")
    await sdk.reorder_queue(thread, [queued[2].run_id, queued[0].run_id, queued[1].run_id])
    await sdk.cancel_queued(thread, queued[1].run_id)
    queue = await sdk.get_queue(thread)
    assert [(q.run_id, q.text) for q in queue.queue] == [(queued[2].run_id, "q2"), (queued[0].run_id, "q0 edited")]
    forked = await sdk.fork_thread(thread, "run", first.run_id, title="fork")
    assert isinstance(forked, Forked) and forked.parent_thread_id == thread
    lineage = await sdk.get_lineage(thread)
    assert isinstance(lineage, LineageView) and forked.thread_id in [c.thread_id for c in lineage.tree.children]
    ack = await sdk.interrupt_run(active.run_id)
    assert ack.run_id == active.run_id
    assert (await sdk.wait_run(active.run_id, timeout=30)).status == "interrupted"
    await sdk.wait_run(queued[0].run_id, timeout=30)  # the queue went on, in its new order
    rolled = await sdk.rollback_thread(thread, 1)
    assert isinstance(rolled, RollbackView) and rolled.status == "completed"
    assert set(rolled.rolled_back_run_ids) == {active.run_id, *(q.run_id for q in queued)}  # every run after 1
    assert (await sdk.get_run(active.run_id)).status == "rolled_back"  # read after the write: min_seq


async def test_errors_are_typed_per_code_and_change_nothing(sdk, stack, stack_nc):
    with pytest.raises(InvalidRequest) as bad:
        await sdk.get_run("run_NOT AN ID")
    assert (bad.value.status, bad.value.code) == (400, "invalid_id")
    with pytest.raises(NotFound):  # one path segment, whatever it holds: never another route
        await sdk.get_run("../threads")
    with pytest.raises(NotFound) as missing:
        await sdk.get_thread("thr_" + "0" * 26)
    assert missing.value.code == "thread_not_found" and missing.value.detail == {}
    with pytest.raises(InvalidRequest) as too_many:
        await sdk.list_threads(limit=10**9)
    assert too_many.value.code == "invalid_parameter" and too_many.value.detail["parameter"] == "limit"
    mine = (await sdk.create_thread()).thread_id
    async with AsyncTreadle(stack.api_url, await _token(stack_nc, f"other{uuid.uuid4().hex[:6]}")) as other:
        with pytest.raises(NotFound):
            await other.send_message(mine, "not yours")
        with pytest.raises(NotFound):
            await other.list_runs(mine)
        second = (await sdk.create_thread()).thread_id
        # The tenant's list has no read-your-writes of its own, but a thread's entry is written with its document:
        # once both documents read (at their creation's seq), both entries are listed.
        for thread in (mine, second):
            await sdk.get_thread(thread, runs=1)
        page = await sdk.list_threads(limit=1)
        assert page.next_cursor is not None
        with pytest.raises(InvalidRequest) as foreign:  # a cursor is the tenant's own: another's use is refused
            await other.list_threads(cursor=page.next_cursor)
        assert foreign.value.code == "invalid_cursor"
    assert (await sdk.get_thread(mine)).messages == []


async def test_an_admin_sets_the_delegation_bounds_with_both_clients_and_the_coordinator_holds_them(
    stack, stack_nc, tenant
):
    admin_token = await TokenStore(stack_nc.jetstream()).create(tenant, "root", "admin")
    bounds = {"max_delegation_depth": 2, "max_children_per_run": 1, "max_running_children": 3}
    async with AsyncTreadle(stack.api_url, admin_token, timeout=30) as admin:
        put = await admin.put_policy(**bounds, cascade_interrupts=False)
        assert (put.max_delegation_depth, put.max_children_per_run, put.max_running_children) == (2, 1, 3)
        assert put.cascade_interrupts is False  # sent: False is a setting, not "left out"
        for bad in ({"max_children_per_run": 0}, {"max_running_children": 10**9}):
            with pytest.raises(InvalidRequest) as refused:
                await admin.put_policy(**bad)
            assert refused.value.code == "invalid_policy", bad
        assert await admin.get_policy() == put  # the refused ones changed nothing

    def sync_put():
        with Treadle(stack.api_url, admin_token, timeout=30) as client:
            client.put_policy(**bounds, cascade_interrupts=True)
            return client.get_policy()

    got = await asyncio.to_thread(sync_put)
    assert (got.max_children_per_run, got.cascade_interrupts) == (1, True)

    token = await _token(stack_nc, tenant)
    async with AsyncTreadle(stack.api_url, token, timeout=30) as member, mcp_session(stack.api_url, token) as mcp:
        parent = (await member.create_thread(title="parent")).thread_id
        run = (await member.send_message(parent, "orchestrate", script=script(HANG, profile="full"))).run_id
        await member.wait_run(run, timeout=30, statuses={"running"})
        await call(mcp, "delegate_task", parent_thread_id=parent, task="one", script=script(text("ok")))
        with pytest.raises(ToolFailed) as second:  # the policy's one task per run, not the deployment's ten
            await call(mcp, "delegate_task", parent_thread_id=parent, task="two", script=script(text("ok")))
        assert (second.value.kind, second.value.error["details"]["quota"]) == ("quota_exceeded", "children_per_run")
        await member.interrupt_run(run)


class CuttableProxy:
    """A TCP proxy on 127.0.0.1 in front of the gateway whose open connections the test can cut; it records the
    request head of each connection (to see the ``Last-Event-ID`` a reconnect sends)."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.heads, self._writers = target_port, [], []
        self.connected = asyncio.Event()

    async def __aenter__(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        self._server.close()

    def cut(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_writer]
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head.decode("latin-1"))
        up_writer.write(head)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_the_event_stream_resumes_with_last_event_id_after_its_connection_is_cut(stack, stack_nc, tenant):
    port = int(stack.api_url.rsplit(":", 1)[1])
    token = await _token(stack_nc, tenant)
    async with AsyncTreadle(stack.api_url, token) as writer, CuttableProxy(port) as proxy:
        thread = (await writer.create_thread()).thread_id
        first = await writer.send_message(thread, "one", script=script(text("first")))
        await writer.wait_run(first.run_id, timeout=30)
        async with AsyncTreadle(f"http://127.0.0.1:{proxy.port}", token) as reader:
            got: list[SseEvent] = []
            retries: list[object] = []
            stream = reader.stream_events(thread, live=False, on_retry=retries.append)
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    got.append(event)
                    if event.event == "run.completed" and event.json()["data"]["run_id"] == first.run_id:
                        break
                cut_after = got[-1].id
                proxy.cut()  # mid-stream: the connection dies under the open stream
                second = await writer.send_message(thread, "two", script=script(text("second")))
                async for event in events:
                    got.append(event)
                    if event.event == "run.completed" and event.json()["data"]["run_id"] == second.run_id:
                        break
    ids = [e.id for e in got]
    assert ids == sorted(set(ids)) and None not in ids  # in order, none twice
    assert retries and f"last-event-id: {cut_after}" in proxy.heads[-1].lower()
    full = [seq async for seq in _all_events(stack.api_url, token, thread, ids[-1])]
    assert ids == full  # nothing missed across the cut


async def test_the_sync_clients_event_stream_resumes_too(stack, stack_nc, tenant):
    port = int(stack.api_url.rsplit(":", 1)[1])
    token = await _token(stack_nc, tenant)
    async with AsyncTreadle(stack.api_url, token) as writer, CuttableProxy(port) as proxy:
        thread = (await writer.create_thread()).thread_id
        first = await writer.send_message(thread, "one", script=script(text("first")))
        reached_first, second_run = threading.Event(), {}

        def read() -> list[SseEvent]:
            got = []
            with Treadle(f"http://127.0.0.1:{proxy.port}", token) as reader:
                for event in reader.stream_events(thread, live=False, deadline=time.monotonic() + 60):
                    got.append(event)
                    if event.event == "run.completed":
                        run_id = event.json()["data"]["run_id"]
                        if run_id == first.run_id:
                            reached_first.set()
                        elif run_id == second_run.get("id"):
                            return got
            return got

        reading = asyncio.create_task(asyncio.to_thread(read))
        assert await asyncio.to_thread(reached_first.wait, 60)
        proxy.cut()
        second_run["id"] = (await writer.send_message(thread, "two", script=script(text("second")))).run_id
        got = await asyncio.wait_for(reading, 90)
    ids = [e.id for e in got]
    assert ids == sorted(set(ids)) and got[-1].json()["data"]["run_id"] == second_run["id"]
    assert len(proxy.heads) >= 2 and "last-event-id:" in proxy.heads[-1].lower()
    assert ids == [seq async for seq in _all_events(stack.api_url, token, thread, ids[-1])]


async def _all_events(api_url: str, token: str, thread: str, last: int):
    async with AsyncTreadle(api_url, token) as client:
        async with contextlib.aclosing(client.stream_events(thread, live=False)) as events:
            async for event in events:
                yield event.id
                if event.id == last:
                    return


GUARDED = textwrap.dedent(
    """
    import json, sys

    FORBIDDEN = ("nats", "redis", "litestar", "uvicorn", "claude_agent_sdk", "treadle.core", "treadle.views.of_state")

    class Guard:
        def find_spec(self, name, path=None, target=None):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
                raise ImportError(f"the SDK imported {name}")
            return None

    sys.meta_path.insert(0, Guard())
    from treadle.client import Treadle, NotFound

    url, token = sys.argv[1], sys.argv[2]
    with Treadle(url, token, timeout=30) as client:
        thread = client.create_thread(title="guarded").thread_id
        sent = client.send_message(thread, "hi", script={"steps": [{"type": "text", "text": "hello"}]})
        run = client.wait_run(sent.run_id, timeout=60)
        try:
            client.get_thread("thr_" + "0" * 26)
            missing = None
        except NotFound as exc:
            missing = exc.code
        events = []
        for event in client.stream_events(thread, live=False):
            events.append(event.event)
            if event.event == "run.completed":
                break
        print(json.dumps({"status": run.status, "reply": [m.text for m in run.messages if m.role == "assistant"],
                          "missing": missing, "events": events,
                          "server_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("nats", "redis", "litestar"))}))
    """
)


async def test_the_sdk_imports_and_works_without_any_server_dependency(stack, stack_nc, tenant):
    token = await _token(stack_nc, tenant)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        GUARDED,
        stack.api_url,
        token,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    got = json.loads(out)
    assert got["status"] == "completed" and got["reply"] == ["hello"] and got["missing"] == "thread_not_found"
    assert got["events"][0] == "thread.created" and got["events"][-1] == "run.completed"
    assert got["server_modules"] == []


CLI_GUARDED = textwrap.dedent(
    """
    import sys

    FORBIDDEN = ("nats", "redis", "litestar", "uvicorn", "claude_agent_sdk")

    class Guard:
        def find_spec(self, name, path=None, target=None):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
                raise ImportError(f"the CLI imported {name}")
            return None

    sys.meta_path.insert(0, Guard())
    from treadle.cli.main import main

    sys.exit(main(sys.argv[1:]))
    """
)


async def test_the_clis_api_commands_run_without_any_server_dependency(stack, stack_nc, tenant):
    token = await _token(stack_nc, tenant)
    api = ["--api", stack.api_url, "--token", token, "--output", "json"]
    outputs = []
    for args in (["threads", "create", "--title", "guarded cli"], ["threads", "list"]):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CLI_GUARDED, *args, *api, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        outputs.append(json.loads(out))
    created, listed = outputs
    assert created["thread_id"] in [t["id"] for t in listed["items"]]
