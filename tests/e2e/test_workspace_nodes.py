"""Issue 35: the lifecycle on three workspace nodes (``Stack(workspace_nodes=3)``: volumes node-1..node-3, each
its own directory, checkpoint service and provider host). New threads are spread over the nodes; each
lifecycle test below is the single-node suite's own, run here on this module's stack (its ``stack`` fixture
replaces the session's), so its threads live on different nodes and every request about their workspaces and
sessions must reach the right one."""

from __future__ import annotations

import json
import shutil

import nats
import pytest

from tests.e2e.test_checkpoints_rollback import (  # noqa: F401  (collected here, on three nodes)
    test_L10_5_three_runs_rolled_back_to_run_1_then_continued_gives_run_4_on_run_1_files,
)
from tests.e2e.test_cli import treadle
from tests.e2e.test_L3_steer_and_queue import (  # noqa: F401
    test_L3_2_native_steer_during_a_tool_call_joins_the_running_attempt,
    test_L3_6_queue_of_five_with_one_cancelled_two_reordered_and_one_edited,
)
from tests.e2e.test_L5_L6_lineage import (  # noqa: F401
    test_L5_1_another_provider_for_the_next_run_is_a_handoff_on_the_same_thread_no_fork_no_rewrite,
    test_L6_fork_from_run_2_of_4_continues_from_run_2s_files_and_context,
)
from tests.e2e.test_L7_merge_back import (  # noqa: F401
    test_L7_1_a_merge_back_message_records_its_transfer_and_the_delta_is_built_when_its_run_starts,
)
from tests.e2e.test_L8_L11_L12_interrupts_requests_plans import (  # noqa: F401
    test_L8_1_L8_2_interrupt_while_waiting_on_a_question_ends_interrupted_with_a_checkpoint,
    test_L11_1_L11_2_an_approval_waits_for_its_answer_and_gates_the_action,
)
from tests.e2e.test_mcp_delegation import (  # noqa: F401
    test_L5_L6_delegate_async_then_task_status_until_the_result_is_recorded_once,
)
from tests.e2e.test_walking_skeleton import (  # noqa: F401
    test_L2_1_send_streams_deltas_and_completes_with_a_checkpoint_in_git,
)
from tests.support.helpers import quiet, wait_for
from tests.support.lineage import assert_projection_is_the_fold
from tests.support.provider_http import TreadleUp
from tests.support.scripts import script, write
from treadle.cli.config import DEV_TENANT
from treadle.cli.stack import Stack
from treadle.client import TreadleClient

NODES = ("node-1", "node-2", "node-3")


@pytest.fixture(scope="module")
async def stack(tmp_path_factory):
    async with Stack(tmp_path_factory.mktemp("nodes"), on_output=quiet, workspace_nodes=3) as s:
        yield s


@pytest.fixture(scope="module")
async def stack_nc(stack):
    nc = await nats.connect(stack.nats_url)
    yield nc
    await nc.close()


async def test_threads_are_spread_over_the_nodes_and_each_workspace_is_on_its_home_only(api, stack):
    chosen = await api.request("POST", "/v1/threads", json={"title": "mine", "volume": "node-1"})
    assert chosen.status_code == 400, chosen.text  # a tenant does not choose where its threads live
    threads = [await api.create_thread(title=f"t{n}") for n in range(6)]
    homes = {t: (await api.thread(t))["thread"]["volume"] for t in threads}
    assert sorted(homes.values()) == sorted(NODES * 2)  # one tenant's threads, evenly
    for thread, home in homes.items():
        sent = await api.send(thread, "write", script=script(write("here.txt", home)))
        run = await api.wait_run(sent["run_id"])
        assert [f["path"] for f in run["checkpoint"]["files"]] == ["here.txt"]
        on = [v for v in NODES if (stack.workspaces(v) / api.tenant / "threads" / thread).is_dir()]
        assert on == [home]
        assert (stack.workspaces(home) / api.tenant / "threads" / thread / "here.txt").read_text() == home
        diff = await api.request("GET", f"/v1/runs/{sent['run_id']}/diff")  # the gateway asks the home's service
        assert diff.status_code == 200 and "here.txt" in diff.text, diff.text


async def _volumes(stack, tmp_path) -> dict[str, dict]:
    code, out, err = await treadle("volumes", "list", "--json", "--nats-url", stack.nats_url, cwd=tmp_path)
    assert code == 0, out + err
    return {v["name"]: v for v in json.loads(out)}


async def test_a_drained_volume_takes_no_new_thread_and_a_forgotten_ones_threads_move(api, stack, log, tmp_path):
    """``treadle volumes``: drain keeps new threads off a node; once a node is lost, forget moves its threads to
    the live ones (thread.moved, naming the checkpoint to restore from) and they run there."""
    assert all(v["placeable"] for v in (await _volumes(stack, tmp_path)).values())
    code, out, err = await treadle("volumes", "drain", "node-1", "--nats-url", stack.nats_url, cwd=tmp_path)
    assert code == 0, out + err
    try:
        await wait_for(lambda: _drained(stack, tmp_path), interval=0.5, what="node-1 draining")
        homes = [(await api.thread(await api.create_thread()))["thread"]["volume"] for _ in range(4)]
        assert "node-1" not in homes and set(homes) == {"node-2", "node-3"}
    finally:
        code, out, err = await treadle(
            "volumes", "drain", "node-1", "--off", "--nats-url", stack.nats_url, cwd=tmp_path
        )
        assert code == 0, out + err

    lost = None
    for _ in range(8):  # the tenant's threads spread: within a few creations one lands on node-3
        created = await api.create_thread(title="on node-3")
        if (await api.thread(created))["thread"]["volume"] == "node-3":
            lost = created
            break
    assert lost is not None
    sent = await api.send(lost, "write", script=script(write("kept.txt", "v1")))
    checkpoint = (await api.wait_run(sent["run_id"]))["checkpoint"]
    refused = await treadle("volumes", "forget", "node-3", "--nats-url", stack.nats_url, cwd=tmp_path)
    assert refused[0] != 0 and "still announces" in refused[2], refused  # a live node's threads stay

    node = [name for name, volume in stack.volume_of.items() if volume == "node-3"]
    for name in node:
        await stack.processes.halt(name)  # the node's machine is lost, and its disk with it
    shutil.rmtree(stack.workspaces("node-3"))
    try:
        await wait_for(
            lambda: _gone(stack, tmp_path, "node-3"), timeout=60, interval=0.5, what="node-3's heartbeat expiring"
        )
        code, out, err = await treadle("volumes", "forget", "node-3", "--nats-url", stack.nats_url, cwd=tmp_path)
        assert code == 0, out + err
        moved = {m["thread"]: m for m in map(json.loads, out.splitlines())}
        assert moved[lost]["to_volume"] in ("node-1", "node-2")
        assert moved[lost]["checkpoint_id"] == checkpoint["id"]
        doc = await api.wait_thread(lost, lambda d: d if d["thread"]["volume"] != "node-3" else None, "the move")
        [move] = doc["thread"]["moves"]
        assert (move["from_volume"], move["to_volume"], move["reason"]) == (
            "node-3",
            moved[lost]["to_volume"],
            "forgotten",
        )
        home = stack.workspaces(moved[lost]["to_volume"]) / api.tenant / "threads" / lost
        assert (home / "kept.txt").read_text() == "v1"  # hydrated from the archive before the move was recorded
        again = await api.send(lost, "after the move", script=script(write("new.txt", "v2")))
        await api.wait_run(again["run_id"])  # placed, captured and answered on the new home
        assert (home / "kept.txt").read_text() == "v1"
        await assert_projection_is_the_fold(api, log, lost)  # thread.moved projected as a replay folds it
        assert (stack.workspaces(moved[lost]["to_volume"]) / api.tenant / "threads" / lost / "new.txt").exists()
        code, out, err = await treadle("volumes", "forget", "node-3", "--nats-url", stack.nats_url, cwd=tmp_path)
        assert code == 0 and out == "", out + err  # nothing left there: run twice, each thread moves once
    finally:
        await stack.processes.start()  # the node comes back
        await stack.wait_ready()


async def _drained(stack, tmp_path) -> bool:
    return (await _volumes(stack, tmp_path))["node-1"]["draining"]


async def _gone(stack, tmp_path, volume: str) -> bool:
    found = (await _volumes(stack, tmp_path)).get(volume)
    return found is None or not found["checkpoints"]


async def test_treadle_up_runs_the_workspace_nodes_asked_for(tmp_path):
    """``treadle up --workspace-nodes 2``: volumes node-1 and node-2, each in its own directory, both used."""
    refused = await treadle(
        "up", "--workspace-nodes", "0", "--no-demo", "--state-dir", str(tmp_path / "x"), cwd=tmp_path
    )
    assert refused[0] != 0 and "--workspace-nodes must be at least 1" in refused[2], refused
    up = TreadleUp(tmp_path / "up", {}, args=("--workspace-nodes", "2"))
    await up.start()
    try:
        async with TreadleClient(up.api_url, up.token, timeout=30) as client:
            threads = [(await client.create_thread(title=f"n{n}"))["thread_id"] for n in range(2)]
            for thread in threads:
                sent = await client.send(thread, "hello")
                assert (await client.wait_run(sent["run_id"], timeout=60))["status"] == "completed"
            homes = {thread: (await client.get_thread(thread))["thread"]["volume"] for thread in threads}
        assert sorted(homes.values()) == ["node-1", "node-2"]
        for thread, home in homes.items():
            assert (tmp_path / "up" / "nodes" / home / "workspaces" / DEV_TENANT / "threads" / thread).is_dir()
    finally:
        assert await up.stop() == 0
