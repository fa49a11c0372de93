"""L9.1 while Redis is lost (issue 17): the embedded stack restarts redis-server like a worker; meanwhile reads
answer 503 with Retry-After and the gateway is not ready, and afterwards every read answers again (a pooled
connection that died with Redis is retried once), never a 500."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from tests.support.helpers import wait_for

pytestmark = pytest.mark.e2e


def reaped(pid: int) -> bool:
    """No process, not even a zombie, has ``pid`` any more."""
    try:
        psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    return False


async def test_L9_1_kill_9_of_redis_is_503_until_it_is_restarted_then_reads_answer_and_none_was_a_500(api, stack):
    thread = await api.create_thread(title="redis outage")
    sent = await api.send(thread, "before the outage")
    assert (await api.wait_run(sent["run_id"], timeout=30))["status"] == "completed"
    paths = [f"/v1/threads/{thread}", "/v1/threads", f"/v1/runs/{sent['run_id']}"]
    for path in paths:  # every pooled connection of the gateway is in use once
        assert (await api.request("GET", path)).status_code == 200
    old = stack.redis.pid
    statuses: list[tuple[str, int, str | None]] = []

    async def read(path: str) -> int:
        r = await api.request("GET", path)
        statuses.append((path, r.status_code, r.headers.get("retry-after")))
        return r.status_code

    os.kill(old, signal.SIGKILL)  # an operator's kill -9, not the stack's own stop
    assert await read("/readyz") == 503
    assert await read(paths[0]) == 503
    await wait_for(lambda: stack.redis.pid not in (None, old), timeout=30, what="redis-server restarted")
    assert reaped(old)  # not left defunct

    async def all_answer():
        return all([await read(path) == 200 for path in ["/readyz", *paths]])

    await wait_for(all_answer, timeout=30, what="every read answering again")
    for _ in range(3):  # every pooled connection that died with Redis is used again: none fails
        assert await all_answer()
    assert not [s for s in statuses if s[1] >= 500 and s[1] != 503], statuses
    assert all(s[2] == "1" for s in statuses if s[1] == 503), statuses
