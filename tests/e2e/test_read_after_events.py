"""Issue 17: reads never go back in time for a client that follows its own writes or the SSE stream. A read
with ``min_seq`` = the id of the SSE terminal event shows the terminal run and its checkpoint, every time,
however far the projector trails the log (L2.3: nothing observes a terminal run without its checkpoint)."""

from __future__ import annotations

import contextlib

import pytest

from tests.support.scripts import script, text, write
from treadle.client.http import TreadleClient

pytestmark = pytest.mark.e2e

ROUNDS = 40


async def _terminal_event_id(api, thread: str, run_id: str, after: int) -> int:
    async with contextlib.aclosing(api.events(thread, after)) as events:
        async for event in events:
            if event.event == "run.completed" and event.json()["data"]["run_id"] == run_id:
                return event.id
    raise AssertionError("stream ended")


async def test_L2_3_a_read_at_the_sse_terminal_events_sequence_shows_the_terminal_run_and_its_checkpoint(api):
    thread = await api.create_thread()
    for i in range(ROUNDS):
        sent = await api.send(thread, f"round {i}", script=script(write(f"f{i}.txt", f"{i}\n"), text("done")))
        seq = await _terminal_event_id(api, thread, sent["run_id"], sent["seq"])
        r = await api.request("GET", f"/v1/runs/{sent['run_id']}", params={"min_seq": seq})
        run = r.json()
        assert r.status_code == 200 and run["status"] == "completed", (i, run.get("status"))
        assert run["checkpoint"] is not None and run["checkpoint"]["commit"], (i, run["checkpoint"])
        doc = (await api.request("GET", f"/v1/threads/{thread}", params={"min_seq": seq})).json()
        assert doc["seq"] >= seq and next(x for x in doc["runs"] if x["id"] == sent["run_id"])["status"] == "completed"


async def test_L2_3_the_sdks_wait_run_and_reads_after_it_never_go_back_in_time(api, stack):
    async with TreadleClient(stack.api_url, api.token) as client:
        thread = (await client.create_thread())["thread_id"]
        for i in range(ROUNDS):
            sent = await client.send(thread, f"round {i}", script=script(write(f"f{i}.txt", f"{i}\n"), text("done")))
            run = await client.wait_run(sent["run_id"], timeout=30)
            assert run["status"] == "completed" and run["checkpoint"] is not None, (i, run)
            doc = await client.get_thread(thread)
            assert next(x for x in doc["runs"] if x["id"] == sent["run_id"])["status"] == "completed"
            assert doc["seq"] >= sent["seq"]
