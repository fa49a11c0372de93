"""Issue 35: the lifecycle on three workspace nodes (``Stack(workspace_nodes=3)``: volumes node-1..node-3, each
its own directory, checkpoint service and provider host). New threads are spread over the nodes; each
lifecycle test below is the single-node suite's own, run here on this module's stack (its ``stack`` fixture
replaces the session's), so its threads live on different nodes and every request about their workspaces and
sessions must reach the right one."""

from __future__ import annotations

import nats
import pytest

from tests.e2e.test_checkpoints_rollback import (  # noqa: F401  (collected here, on three nodes)
    test_L10_5_three_runs_rolled_back_to_run_1_then_continued_gives_run_4_on_run_1_files,
)
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
from tests.support.helpers import quiet
from tests.support.scripts import script, write
from treadle.cli.stack import Stack

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
