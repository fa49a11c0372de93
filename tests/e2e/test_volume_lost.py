"""Issue 35: a workspace node lost while runs play on it. Its provider host and checkpoint service are killed
(SIGKILL) and its directory deleted; once its volume has announced nothing for the bound, the coordinator moves
its threads by itself (``thread.moved``, reason ``lost``) and the runs that were playing there go on on the new
homes: workspace hydrated from the last checkpoint, the pending approval asked again, each message answered once.
"""

from __future__ import annotations

import collections
import json
import shutil
import time

import nats
import pytest

from tests.e2e.test_cli import treadle
from tests.support.helpers import quiet, wait_for
from tests.support.scripts import approval, script, text, write
from treadle.cli.stack import Stack
from treadle.core import events as ev
from treadle.core.state import fold

pytestmark = pytest.mark.e2e

LOST_SECONDS = 1.0
STREAMED = "".join(f"part {i:02d}. " for i in range(60))


@pytest.fixture(scope="module")
async def stack(tmp_path_factory):
    env = {"TREADLE_COORDINATOR_VOLUME_LOST_SECONDS": str(LOST_SECONDS)}
    async with Stack(tmp_path_factory.mktemp("lost"), on_output=quiet, workspace_nodes=3, env=env) as s:
        yield s


@pytest.fixture(scope="module")
async def stack_nc(stack):
    nc = await nats.connect(stack.nats_url)
    yield nc
    await nc.close()


async def _on_node_3(api, title: str) -> str:
    for _ in range(12):  # the tenant's threads spread: within a few creations one lands on node-3
        created = await api.create_thread(title=title)
        if (await api.thread(created))["thread"]["volume"] == "node-3":
            return created
    raise AssertionError("no thread was placed on node-3")


def _answered_once(events: list[ev.Envelope], run_id: str) -> None:
    state = fold(events)
    run = state.run(run_id)
    assert run is not None and run.status == "completed"
    assert [a.status for a in run.attempts] == ["lost", "completed"] and run.attempt.reason == "provider_recovery"
    replies = [m for m in state.messages if m.role == "assistant" and m.run_id == run_id and m.status == "completed"]
    assert [m.attempt_id for m in replies] == [run.attempt.id]  # one reply, of the attempt that completed
    assert len([e for e in events if isinstance(e.data, ev.RunEnded) and e.data.run_id == run_id]) == 1
    assert max(collections.Counter(m.id for m in state.messages).values()) == 1
    assert len({e.id for e in events}) == len(events)


async def test_L9_3_runs_playing_on_a_lost_node_go_on_on_their_new_homes(api, stack, log, tmp_path):
    asking = await _on_node_3(api, "asks")
    streaming = await _on_node_3(api, "streams")
    for thread in (asking, streaming):
        first = await api.send(thread, "keep", script=script(write("kept.txt", thread)))
        await api.wait_run(first["run_id"])
    waiting = await api.send(
        asking, "ask first", script=script(write("mid.txt", "a"), approval("go on?"), text("approved and done"))
    )
    first_request = await api.wait_request(asking)
    playing = await api.send(streaming, "stream", script=script(write("mid.txt", "b"), text(STREAMED, 100, 10)))

    async def streaming_now() -> bool:
        return any(
            isinstance(e.data, ev.MessageDelta) and e.data.run_id == playing["run_id"]
            for e in await log.read(api.tenant, streaming)
        )

    await wait_for(streaming_now, timeout=30, what="the streaming run's first delta")
    lost = time.monotonic()
    for name in [name for name, volume in stack.volume_of.items() if volume == "node-3"]:
        await stack.processes.halt(name)  # SIGKILL: the node's machine is lost, and its disk with it
    shutil.rmtree(stack.workspaces("node-3"))

    def asked_again(doc: dict) -> dict | None:
        return next((r for r in doc["requests"] if r["status"] == "pending" and r["id"] != first_request["id"]), None)

    request = await api.wait_thread(asking, asked_again, "the approval asked again on the new home", timeout=120)
    answered_after = time.monotonic() - lost
    print(f"\nnode loss: the thread asked again {answered_after:.1f} s after the kill (bound {LOST_SECONDS} s)")
    await api.post(f"/v1/requests/{request['id']}/respond", {"decision": "accept"}, expect=200)
    said = {asking: "ask first", streaming: "stream"}
    for thread, run in ((asking, waiting), (streaming, playing)):
        done = await api.wait_run(run["run_id"], timeout=120)
        doc = await api.thread(thread)
        [move] = doc["thread"]["moves"]
        assert (move["from_volume"], move["reason"]) == ("node-3", "lost")
        assert doc["thread"]["volume"] == move["to_volume"] != "node-3"
        home = stack.workspaces(move["to_volume"]) / api.tenant / "threads" / thread
        assert (home / "kept.txt").read_text() == thread  # as of its last checkpoint, hydrated there
        assert sorted(f["path"] for f in done["checkpoint"]["files"]) == ["mid.txt"]  # the retried turn wrote it
        events = await log.read(api.tenant, thread)
        _answered_once(events, run["run_id"])
        assert [m.text for m in fold(events).messages if m.role == "user"] == ["keep", said[thread]]
    old = next(r for r in (await api.thread(asking))["requests"] if r["id"] == first_request["id"])
    assert old["status"] != "pending"  # its callback died with the node

    await stack.processes.start()  # node-3 comes back, empty: the threads' homes are elsewhere now
    await stack.wait_ready()
    again = await api.send(asking, "after the return", script=script(write("after.txt", "c")))
    await api.wait_run(again["run_id"])
    home = (await api.thread(asking))["thread"]["volume"]
    assert home != "node-3" and (stack.workspaces(home) / api.tenant / "threads" / asking / "after.txt").exists()
    assert not (stack.workspaces("node-3") / api.tenant).exists()  # nothing of them made on the old node
    code, out, err = await treadle(
        "check", "--nats-url", stack.nats_url, "--redis-url", stack.redis_url, "--tenant", api.tenant, "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0 and json.loads(out)["problems"] == [], out + err
