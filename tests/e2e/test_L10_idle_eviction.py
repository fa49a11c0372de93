"""Issue 35, L10 on two workspace nodes: a thread idle past ``TREADLE_CHECKPOINTS_EVICT_IDLE_SECONDS`` (no run, no
live session) leaves its node's disk, its volume announces one workspace less, and its next message finds its
files (the supervisor's hydrate brings them back from the archive before the turn); a diff and a fork of an
evicted thread bring it back first too."""

from __future__ import annotations

import msgspec
import nats
import pytest

from tests.support.helpers import quiet, wait_for
from tests.support.lineage import fork
from tests.support.scripts import script, write
from treadle.cli.stack import Stack
from treadle.eventlog.kv_latest import latest
from treadle.runtime.volumes import BUCKET, VolumeRecord

pytestmark = pytest.mark.e2e

ENV = {
    "TREADLE_CHECKPOINTS_EVICT_IDLE_SECONDS": "1",
    "TREADLE_CHECKPOINTS_EVICT_INTERVAL_SECONDS": "0.2",
    "TREADLE_PROVIDER_HOST_IDLE_SECONDS": "0.5",  # the session ends soon after the run: the thread is idle
}


@pytest.fixture(scope="module")
async def stack(tmp_path_factory):
    async with Stack(tmp_path_factory.mktemp("evict"), on_output=quiet, workspace_nodes=2, env=ENV) as s:
        yield s


@pytest.fixture(scope="module")
async def stack_nc(stack):
    nc = await nats.connect(stack.nats_url)
    yield nc
    await nc.close()


async def _held(stack_nc, volume: str, tenant: str) -> int:
    records = await latest(stack_nc.jetstream(), BUCKET)
    return msgspec.json.decode(records[volume].value, type=VolumeRecord).tenants.get(tenant, 0)


async def test_L10_an_idle_thread_leaves_its_node_and_its_next_message_finds_its_files(api, stack, stack_nc):
    thread = await api.create_thread(title="idle")
    home = (await api.thread(thread))["thread"]["volume"]
    workspace = stack.workspaces(home) / api.tenant / "threads" / thread
    first = await api.send(thread, "write", script=script(write("a.txt", "one\n")))
    await api.wait_run(first["run_id"])

    async def evicted() -> bool:
        return not workspace.exists() and await _held(stack_nc, home, api.tenant) == 0

    await wait_for(evicted, timeout=60, what="the idle workspace evicted and its volume announcing it")

    second = await api.send(thread, "again", script=script(write("b.txt", "two\n")))
    done = await api.wait_run(second["run_id"])
    assert [f["path"] for f in done["checkpoint"]["files"]] == ["b.txt"]  # a.txt was there: not deleted
    assert (workspace / "a.txt").read_text() == "one\n" and (workspace / "b.txt").read_text() == "two\n"
    assert (await api.thread(thread))["thread"]["volume"] == home  # restored on its home, not moved

    await wait_for(evicted, timeout=60, what="evicted again")
    diff = await api.request("GET", f"/v1/runs/{second['run_id']}/diff")
    assert diff.status_code == 200 and "b.txt" in diff.text, diff.text

    await wait_for(evicted, timeout=60, what="evicted once more")
    child = (await fork(api, thread, {"type": "run", "id": first["run_id"]}, title="from run 1"))["thread_id"]
    forked = stack.workspace_of(api.tenant, child)
    assert (forked / "a.txt").read_text() == "one\n" and not (forked / "b.txt").exists()
