"""Fair share of provider capacity across two provider hosts of one session each (L9.3): a request to make room
may reach the host whose only session is busy; it says to ask again, and the other host releases its idle one."""

from __future__ import annotations

import time

import nats
import pytest

from tests.support.api import make_api
from tests.support.helpers import quiet
from tests.support.scripts import HANG, script, text
from treadle.cli.stack import Stack

pytestmark = pytest.mark.e2e

ENV = {"TREADLE_PROVIDER_HOST_CAPACITY": "1", "TREADLE_PROVIDER_HOST_HEARTBEAT_SECONDS": "0.5"}


@pytest.fixture(scope="module")
async def stack(tmp_path_factory):
    async with Stack(tmp_path_factory.mktemp("capacity-hosts"), env=ENV, provider_hosts=2, on_output=quiet) as s:
        yield s


@pytest.fixture(scope="module")
async def nc(stack):
    conn = await nats.connect(stack.nats_url)
    yield conn
    await conn.close()


async def test_L9_3_with_one_host_busy_and_one_idle_every_run_of_another_tenant_finds_the_idle_one(stack, nc):
    flooder = await make_api(stack, nc, f"flood{time.monotonic_ns() % 1_000_000}")
    other = await make_api(stack, nc, f"other{time.monotonic_ns() % 1_000_000}")
    try:
        busy = await flooder.create_thread(title="busy")
        hang = (await flooder.send(busy, "work forever", script=script(text("on it"), HANG)))["run_id"]
        await flooder.wait_running(hang, timeout=15)
        idle = await flooder.create_thread(title="idle")
        await flooder.wait_run((await flooder.send(idle, "hello"))["run_id"])  # both hosts are full now

        waits = []
        for i in range(4):  # each shedding request goes to either host; the busy one says to ask again
            thread = await other.create_thread(title=f"mine {i}")
            sent_at = time.monotonic()
            run = await other.wait_run((await other.send(thread, "my turn"))["run_id"], timeout=10)
            waits.append(time.monotonic() - sent_at)
            assert run["status"] == "completed"
        print(f"\ncapacity, two hosts: runs of another tenant completed in {', '.join(f'{w:.2f}' for w in waits)} s")

        await flooder.post(f"/v1/runs/{hang}/interrupt", {}, expect=202)
        assert (await flooder.wait_run(hang, status="interrupted"))["status"] == "interrupted"
    finally:
        await flooder.close()
        await other.close()
