"""Fair share of provider capacity across real processes: one provider host with room for three sessions.
A tenant that fills it with idle sessions cannot strand another tenant's run: the host releases an idle
session of the busiest tenant to make room."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from conftest import _quiet, make_api
from treadle.cli.stack import Stack
from treadle.domain import events as ev
from treadle.eventlog.log import EventLog

pytestmark = pytest.mark.e2e

ENV = {
    "TREADLE_PROVIDER_HOST_CAPACITY": "3",
    "TREADLE_PROVIDER_HOST_HEARTBEAT_SECONDS": "0.5",
}


@pytest.fixture(scope="module")
async def stack(tmp_path_factory):
    async with Stack(tmp_path_factory.mktemp("capacity"), env=ENV, on_output=_quiet) as s:
        yield s


@pytest.fixture(scope="module")
async def nc(stack):
    conn = await nats.connect(stack.nats_url)
    yield conn
    await conn.close()


@pytest.fixture
def log(nc) -> EventLog:
    return EventLog(nc)


async def _tenant(stack, nc, name: str):
    return await make_api(stack, nc, f"{name}{time.monotonic_ns() % 1_000_000}")


async def test_L9_3_a_full_host_releases_the_busiest_tenants_idle_session_for_another_tenants_run(stack, nc, log):
    flooder, other = await _tenant(stack, nc, "flood"), await _tenant(stack, nc, "other")
    try:
        threads = [await flooder.create_thread(title=f"idle {i}") for i in range(3)]
        runs = await asyncio.gather(*(flooder.send(t, "hello") for t in threads))
        await asyncio.gather(*(flooder.wait_run(r["run_id"]) for r in runs))  # three idle sessions: the host is full

        thread = await other.create_thread(title="mine")
        sent_at = time.monotonic()
        sent = await other.send(thread, "my turn")
        run = await other.wait_run(sent["run_id"], timeout=10)
        waited = time.monotonic() - sent_at
        print(f"\ncapacity: the other tenant's run completed {waited:.2f}s after it was sent to a full host")
        assert run["status"] == "completed"

        stopped = []
        for t in threads:
            stopped += [e.data.reason for e in await log.read(flooder.tenant, t) if isinstance(e.data, ev.ProviderStopped)]
        assert stopped == ["capacity"]  # exactly one idle session of the flooding tenant made room
    finally:
        await flooder.close()
        await other.close()
