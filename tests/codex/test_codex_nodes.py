"""Issue 35 with a real runtime: Codex threads spread over three workspace nodes (the real ``codex`` binary, the
mock model API). Each thread's turns run on its home's provider host, its files land on its home only, and its
next message resumes the same Codex thread there, with the conversation so far."""

from __future__ import annotations

import pytest

from tests.codex.codex_mock import Exec, Text
from tests.codex.codex_support import TENANT, codex_env
from tests.codex.conftest import _quiet
from treadle.cli.stack import Stack

pytestmark = pytest.mark.e2e

NODES = ("node-1", "node-2", "node-3")


@pytest.fixture(scope="module")
async def codex_stack(tmp_path_factory, mock, homes_root):
    env = codex_env(mock, homes_root)
    async with Stack(tmp_path_factory.mktemp("codex-nodes"), env=env, on_output=_quiet, workspace_nodes=3) as s:
        yield s


async def test_L2_1_L9_2_codex_threads_on_three_nodes_work_and_resume_on_their_homes(client, codex_stack, mock):
    threads = []
    for i in range(3):
        created = await client.create_thread(title=f"node thread {i}", provider="codex", runtime_mode="full_access")
        threads.append(created["thread_id"])
    homes = {t: (await client.get_thread(t))["thread"]["volume"] for t in threads}
    assert sorted(homes.values()) == sorted(NODES)  # one tenant's threads, one per node

    for i, thread in enumerate(threads):
        mock.on(f"write node file {i}", [Exec(f"echo {i} > f{i}.txt")], [Text(f"Wrote f{i}.txt.")])
        sent = await client.send(thread, f"write node file {i}")
        run = await client.wait_run(sent["run_id"], timeout=60)
        assert run["status"] == "completed", run
        assert [(f["path"], f["change"]) for f in run["checkpoint"]["files"]] == [(f"f{i}.txt", "added")]
        on = [v for v in NODES if (codex_stack.workspaces(v) / TENANT / "threads" / thread).is_dir()]
        assert on == [homes[thread]]
        assert (codex_stack.workspaces(homes[thread]) / TENANT / "threads" / thread / f"f{i}.txt").read_text() == (
            f"{i}\n"
        )

    for i, thread in enumerate(threads):
        before = [p["native_ref"] for p in (await client.get_thread(thread))["provider_threads"]]
        mock.on(f"which file was node {i}", [Text(f"It was f{i}.txt.")])
        sent = await client.send(thread, f"which file was node {i}")
        run = await client.wait_run(sent["run_id"], timeout=60)
        assert run["status"] == "completed", run
        doc = await client.get_thread(thread)
        assert [p["native_ref"] for p in doc["provider_threads"]] == before  # the same Codex thread, resumed
        assert f"write node file {i}" in str(mock.requests[-1].body["input"])
        assert doc["thread"]["volume"] == homes[thread]
