"""Issue 17: reads never go back in time for a client that follows its own writes or the SSE stream. A read
with ``min_seq`` = the id of the SSE terminal event shows the terminal run and its checkpoint, every time,
however far the projector trails the log (L2.3: nothing observes a terminal run without its checkpoint)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal

import pytest

from tests.support.scripts import question, script, text, write
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


async def test_L2_3_once_the_stream_shows_the_runs_end_wait_run_reads_the_run_alone(api, stack):
    """The SDK's dict client reads the run (min_seq: its sequence) and never the whole thread document (it costs
    the thread's length): one read between the run's end on the stream and the answer. A run it sent itself had
    not ended at the sequence it was accepted at: it follows the stream from there and reads the run once, after
    its end (issue 38: no read before the stream nor on the run's start, mid-turn). A run another client sent is
    read first, the thread's sequence coming from a one-item runs page, read once."""
    async with TreadleClient(stack.api_url, api.token) as client:
        thread = (await client.create_thread())["thread_id"]
        for i in range(3):
            # The reply takes a moment, so the wait follows the stream rather than finding the run ended at once
            steps = script(write(f"f{i}.txt", f"{i}\n"), text("done", delay_ms=300))
            sent = await client.send(thread, f"round {i}", script=steps)
            asked: list[str] = []

            async def record(request, asked: list[str] = asked) -> None:
                asked.append(f"{request.method} {request.url.path}")

            client._http.event_hooks["request"] = [record]
            run = await client.wait_run(sent["run_id"], timeout=30)
            client._http.event_hooks["request"] = []
            assert run["status"] == "completed" and run["checkpoint"] is not None, (i, run)
            assert asked == [f"GET /v1/threads/{thread}/events", f"GET /v1/runs/{sent['run_id']}"], asked
        async with TreadleClient(stack.api_url, api.token) as other:
            steps = script(text("done", delay_ms=300))
            sent = await client.send(thread, "round 3", script=steps)
            asked = []

            async def record_other(request, asked: list[str] = asked) -> None:
                asked.append(f"{request.method} {request.url.path}")

            other._http.event_hooks["request"] = [record_other]
            run = await other.wait_run(sent["run_id"], timeout=30)
            assert run["status"] == "completed", run
            streamed = asked.index(f"GET /v1/threads/{thread}/events")
            assert asked[:streamed] == [f"GET /v1/runs/{sent['run_id']}", f"GET /v1/threads/{thread}/runs"] + [
                f"GET /v1/runs/{sent['run_id']}"
            ], asked
            assert asked[streamed + 1 :] and set(asked[streamed + 1 :]) == {f"GET /v1/runs/{sent['run_id']}"}, asked


_TERMINAL_EVENTS = {"run.completed", "run.failed", "run.interrupted", "run.cancelled"}


async def _terminal_event(api, thread: str, run_id: str, after: int) -> tuple[str, int]:
    async with contextlib.aclosing(api.events(thread, after)) as events:
        async for event in events:
            if event.event in _TERMINAL_EVENTS and event.json()["data"]["run_id"] == run_id:
                # The envelope carries its sequence too, once: the same as the SSE id.
                keys = [k for k, _ in json.loads(event.data, object_pairs_hook=list)]
                assert keys.count("seq") == 1 and event.json()["seq"] == event.id, event.data[:300]
                return event.event, event.id
    raise AssertionError("stream ended")


async def test_L2_3_every_read_at_a_terminal_events_sequence_by_query_or_header_shows_the_end_and_its_checkpoint(api):
    """Completed and failed runs alike: the run, the thread's runs and checkpoints lists, read with the SSE
    terminal event's id as ``min_seq`` or as ``X-Treadle-Min-Seq``, show the run ended and its checkpoint."""
    thread = await api.create_thread()
    for i in range(ROUNDS // 2):
        fails = i % 2 == 1
        steps = [write(f"g{i}.txt", f"{i}\n"), {"type": "fail", "message": "boom"} if fails else text("done")]
        sent = await api.send(thread, f"round {i}", script=script(*steps))
        kind, seq = await _terminal_event(api, thread, sent["run_id"], sent["seq"])
        assert kind == ("run.failed" if fails else "run.completed"), (i, kind)
        status = kind.removeprefix("run.")
        run = (await api.request("GET", f"/v1/runs/{sent['run_id']}", headers={"X-Treadle-Min-Seq": str(seq)})).json()
        assert run["status"] == status and run["checkpoint"] and run["checkpoint"]["commit"], (i, run)
        runs = (await api.request("GET", f"/v1/threads/{thread}/runs", params={"min_seq": seq, "limit": 200})).json()
        listed = next(r for r in runs["items"] if r["id"] == sent["run_id"])
        assert runs["seq"] >= seq and listed["status"] == status and listed["checkpoint_id"] == run["checkpoint"]["id"]
        checkpoints = (
            await api.request(
                "GET",
                f"/v1/threads/{thread}/checkpoints",
                headers={"X-Treadle-Min-Seq": str(seq)},
                params={"limit": 200},
            )
        ).json()
        assert checkpoints["seq"] >= seq and run["checkpoint"] in checkpoints["items"], i


async def test_a_list_asked_for_a_sequence_beyond_the_threads_last_event_shows_the_thread_as_it_is(api):
    """A ``min_seq`` beyond the thread's last event (another thread's sequence, or any larger number): a
    projection that has the thread's last event is current for it."""
    thread = await api.create_thread()
    sent = await api.send(thread, "one", script=script(write("a.txt", "a\n"), text("done")))
    await api.wait_run(sent["run_id"])
    doc = await api.thread(thread)
    far = doc["seq"] + 1_000_000
    page = (await api.request("GET", f"/v1/threads/{thread}/messages", params={"min_seq": far})).json()
    assert page["items"] == doc["messages"] and page["seq"] == doc["seq"] and page["next_cursor"] is None


async def test_L2_3_reads_at_a_clients_sequence_never_go_back_in_time_while_the_projector_is_stopped(api, stack):
    """With the projector stopped, a run read at the sequence its send answered with (the run index does not
    know the run yet), and the run and the thread's lists read at its terminal event's sequence, come from the
    log: never a 404 for a run the client made, never a run that has not ended, never one without its checkpoint."""
    thread = await api.create_thread()
    first = await api.send(thread, "before", script=script(text("ok")))
    await api.wait_run(first["run_id"])
    pid = stack.processes.pid("projector")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        sent = await api.send(thread, "while stopped", script=script(write("s.txt", "s\n"), text("done")))
        r = await api.request("GET", f"/v1/runs/{sent['run_id']}", params={"min_seq": sent["seq"]})
        assert r.status_code == 200 and r.json()["thread_id"] == thread, r.text
        _, seq = await _terminal_event(api, thread, sent["run_id"], sent["seq"])
        run = (await api.request("GET", f"/v1/runs/{sent['run_id']}", params={"min_seq": seq})).json()
        assert run["status"] == "completed" and run["checkpoint"] and run["checkpoint"]["commit"], run
        runs = (await api.request("GET", f"/v1/threads/{thread}/runs", headers={"X-Treadle-Min-Seq": str(seq)})).json()
        assert runs["seq"] >= seq and [r["status"] for r in runs["items"]] == ["completed", "completed"], runs
    finally:
        os.kill(pid, signal.SIGCONT)


# Issue 36, finding 7: without ``min_seq`` (any HTTP client, not only the SDK) a read right after a run's terminal
# SSE event showed the run still running, with no checkpoint, in 3-7 of 40 runs. Every read now reflects the
# thread's last event in the log when it came.


async def test_L2_3_a_plain_read_right_after_each_terminal_sse_event_shows_the_run_ended(api):
    thread = await api.create_thread()
    for i in range(ROUNDS):
        sent = await api.send(thread, f"round {i}", script=script(write(f"p{i}.txt", f"{i}\n"), text("done")))
        _, seq = await _terminal_event(api, thread, sent["run_id"], sent["seq"])
        run = (await api.request("GET", f"/v1/runs/{sent['run_id']}")).json()
        assert run["status"] == "completed" and run["checkpoint"] and run["checkpoint"]["commit"], (i, run)
        assert all(a["status"] != "running" for a in run["attempts"]), (i, run["attempts"])
        runs = (await api.request("GET", f"/v1/threads/{thread}/runs", params={"limit": 1})).json()
        assert runs["seq"] >= seq and runs["items"][0]["status"] == "completed", (i, runs)


async def _stopped_projector(stack) -> int:
    pid = stack.processes.pid("projector")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    return pid


async def test_L2_3_L11_plain_reads_after_the_stream_shows_an_answered_turn_end_never_show_the_thread_before_it(
    api, stack
):
    """Deterministic: the projector is stopped (a real pause) while the question is answered and the run ends, so
    the projection is surely behind the stream; every plain read still shows the end (from the log, after its
    bounded wait), and once the projector goes on a read waiting for it is woken by its notice."""
    thread = await api.create_thread()
    sent = await api.send(thread, "ask", script=script(question("which db?", ["pg", "sqlite"]), text("using it")))
    request = await api.wait_request(thread)
    pid = await _stopped_projector(stack)
    try:
        await api.post(f"/v1/requests/{request['id']}/respond", {"answers": {"0": "pg"}}, expect=200)
        _, seq = await _terminal_event(api, thread, sent["run_id"], sent["seq"])
        run = (await api.request("GET", f"/v1/runs/{sent['run_id']}")).json()
        assert run["status"] == "completed" and run["checkpoint"] and run["checkpoint"]["commit"], run
        doc = (await api.request("GET", f"/v1/threads/{thread}")).json()
        assert doc["seq"] >= seq and [r["status"] for r in doc["requests"]] == ["resolved"], doc["requests"]
        requests = (await api.request("GET", f"/v1/threads/{thread}/requests")).json()
        assert requests["seq"] >= seq and [r["status"] for r in requests["items"]] == ["resolved"], requests
        checkpoints = (await api.request("GET", f"/v1/threads/{thread}/checkpoints")).json()
        assert checkpoints["seq"] >= seq and run["checkpoint"]["id"] in [c["id"] for c in checkpoints["items"]]
    finally:
        os.kill(pid, signal.SIGCONT)
    again = await api.send(thread, "more", script=script(text("done")))
    _, seq = await _terminal_event(api, thread, again["run_id"], again["seq"])
    run = (await api.request("GET", f"/v1/runs/{again['run_id']}")).json()
    assert run["status"] == "completed", run


async def test_L8_L11_a_plain_read_after_run_interrupted_on_the_stream_shows_its_request_cancelled(api, stack):
    """A question pending when its run is interrupted: once the stream says ``run.interrupted``, a read without
    ``min_seq`` never shows the request still pending (the projector is stopped meanwhile, as above)."""
    thread = await api.create_thread()
    sent = await api.send(thread, "ask me", script=script(question("which db?", ["pg", "sqlite"]), profile="full"))
    request = await api.wait_request(thread)
    pid = await _stopped_projector(stack)
    try:
        await api.post(f"/v1/runs/{sent['run_id']}/interrupt", expect=202)
        kind, seq = await _terminal_event(api, thread, sent["run_id"], sent["seq"])
        assert kind == "run.interrupted"
        requests = (await api.request("GET", f"/v1/threads/{thread}/requests")).json()
        assert [(r["id"], r["status"]) for r in requests["items"]] == [(request["id"], "cancelled")], requests
        run = (await api.request("GET", f"/v1/runs/{sent['run_id']}")).json()
        assert run["status"] == "interrupted", run
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_L2_2_a_stream_asked_without_live_deltas_gets_the_durable_events_alone(api, stack):
    """Issue 38: the SDK's waits read durable events only, yet the gateway sent every raw chunk as a live.delta
    frame for the client to drop (a frame each, mid-turn). ``live=false`` asks for none; the durable events are
    the same as the default stream's, which still carries the live text."""
    async with TreadleClient(stack.api_url, api.token) as client:
        thread = (await client.create_thread())["thread_id"]
        connected = [asyncio.Event(), asyncio.Event()]

        async def until_end(live: bool, ready: asyncio.Event) -> list:
            seen = []
            async with contextlib.aclosing(client.events(thread, connected=ready, live=live)) as events:
                async for event in events:
                    seen.append(event)
                    if event.event == "run.completed":
                        return seen
            return seen

        both = [asyncio.create_task(until_end(live, ready)) for live, ready in zip((True, False), connected)]
        for ready in connected:
            await asyncio.wait_for(ready.wait(), 10)
        await client.send(thread, "stream", script=script(text("streamed in many pieces " * 4, delay_ms=5, chunk=5)))
        with_live, durable = await asyncio.wait_for(asyncio.gather(*both), 30)
    assert any(e.event == "live.delta" for e in with_live)
    assert not any(e.event == "live.delta" or e.id is None for e in durable), [e.event for e in durable]
    assert [e.id for e in durable] == [e.id for e in with_live if e.id is not None]
