"""Issue 36, finding 3: a provider host ends the sessions of a tenant that writes past its disk budget
(``disk_quota``, with the reason in the stop's detail); a tenant over its budget may run turns again, which
may keep what it holds but not grow it. The scripted provider writes the files, on a real broker."""

from __future__ import annotations

import pytest

from tests.integration.test_L9_provider_hosts import LOOPS_PER_HOST, TENANT, Hosts, tick
from tests.support.helpers import wait_for
from treadle.providers import protocol as hp
from treadle.runtime.clock import ManualClock

UNIT = 200 << 10  # a write step's size (a StartTurn stays under the broker's 1 MB payload limit)


async def _turn(env: Hosts, placed: hp.SessionPlaced, n: int, steps: list[dict]) -> None:
    started = await env.client.start_turn(
        placed.host_id,
        hp.StartTurn(
            session_id=placed.session_id,
            tenant=TENANT,
            thread="t1",
            run_id=f"run_{n}",
            attempt_id=f"att_{n}",
            root_node_id=f"node_{n}",
            text="write",
            script={"steps": steps},
        ),
    )
    assert isinstance(started, hp.TurnAccepted), started


def _write(name: str) -> dict:
    return {"type": "write_file", "path": name, "content": "x" * UNIT}


@pytest.mark.parametrize("setting", ["host", "policy"])
async def test_issue36_a_turn_writing_past_the_disk_budget_ends_its_session_as_disk_quota(tmp_path, setting):
    clock = ManualClock()
    async with Hosts(tmp_path) as env:
        budget = {"disk_budget_bytes": 300 << 10} if setting == "host" else {"disk_budget_bytes": 1 << 40}
        host = await env.host("h1", clock, disk_check_seconds=5, heartbeat_seconds=60, **budget)
        if setting == "policy":  # the tenant's policy overrides the deployment's budget
            from treadle.core.policy import TenantPolicy
            from treadle.ops.policies import PolicyStore

            await PolicyStore(env.nc.jetstream()).put(TENANT, TenantPolicy(max_disk_bytes=300 << 10), actor="test")
        workspace = tmp_path / "workspaces" / TENANT / "w"

        first = await env.place("t1")
        await _turn(env, first, 1, [_write("a.txt")])
        await wait_for(
            lambda: (workspace / "a.txt").exists() and not host._sessions[first.session_id].busy, what="turn 1"
        )
        await tick(clock, 5, LOOPS_PER_HOST)
        assert env.stopped(first.session_id) == []  # 200 KiB of 300: within the budget

        await _turn(env, first, 2, [_write("b.txt"), {"type": "hang"}])
        await wait_for(lambda: (workspace / "b.txt").exists(), what="b.txt")
        await tick(clock, 5, LOOPS_PER_HOST)
        await wait_for(lambda: env.stopped(first.session_id), what="the session over budget stopped")
        stop = [e for e in env.stops if e.session_id == first.session_id][0]
        assert stop.body.reason == "disk_quota" and "over its disk budget of 0.3 MiB" in (stop.body.detail or "")

        # The next message is allowed: a turn may keep what the tenant holds (400 KiB), not grow it.
        second = await env.place("t1")
        await _turn(env, second, 3, [{"type": "text", "text": "only talking"}])
        await wait_for(lambda: not host._sessions[second.session_id].busy, what="turn 3")
        await tick(clock, 5, LOOPS_PER_HOST)
        await tick(clock, 5, LOOPS_PER_HOST)
        assert env.stopped(second.session_id) == []
        await _turn(env, second, 4, [_write("c.txt"), {"type": "hang"}])
        await wait_for(lambda: (workspace / "c.txt").exists(), what="c.txt")
        await tick(clock, 5, LOOPS_PER_HOST)
        await wait_for(lambda: env.stopped(second.session_id), what="the growing session stopped")
        assert env.stopped(second.session_id) == ["disk_quota"]
