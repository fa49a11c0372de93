"""Issue 36, finding 3, over HTTP on the embedded stack: a run whose agent writes past the tenant's disk budget
(its policy's ``max_disk_bytes``) fails with ``disk_quota: …``, which the tenant reads on the run and the
thread; the next message is allowed and completes."""

from __future__ import annotations

import pytest

from tests.support.scripts import HANG, script, text
from treadle.core.policy import TenantPolicy
from treadle.ops.policies import PolicyStore

pytestmark = pytest.mark.e2e

KIB = 1 << 10


async def test_issue36_a_run_writing_past_the_disk_budget_fails_as_disk_quota_and_the_next_completes(
    api, stack_nc, tenant
):
    await PolicyStore(stack_nc.jetstream()).put(tenant, TenantPolicy(max_disk_bytes=64 * KIB), actor="test")
    thread = await api.create_thread(workspace="w")
    writes = [{"type": "write_file", "path": f"big{i}.bin", "content": "x" * (40 * KIB)} for i in range(2)]
    first = await api.send(thread, "fill the disk", script=script(*writes, HANG))
    # the host checks every disk_check_seconds (10 s by default)
    failed = await api.wait_run(first["run_id"], "failed", timeout=60)
    assert failed["error"].startswith("disk_quota: ") and "over its disk budget of 0.1 MiB" in failed["error"]
    assert "disk_quota" in str(await api.thread(thread))  # the thread's document says it too

    # allowed: a turn that keeps what the tenant holds (no new file) completes
    second = await api.send(thread, "just talk", script=script(text("fine")))
    await api.wait_run(second["run_id"], "completed", timeout=60)
