"""Issue 42, item 2: schedules on the real stack, two scheduler replicas, time moved by the scheduler's test
clock (``TREADLE_SCHEDULER_CLOCK_FILE``): an interval schedule fires once and its run completes, a tenant
schedule makes a thread, pause stops firings, ``on_active=skip`` skips while a run is active, a restart of both
replicas fires nothing twice, a firing sent again gets the first one's receipt, another tenant sees nothing.
Every wait is on the schedule's record or the run's status, never on time."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import msgspec
import nats
import pytest

from tests.support.api import Api, make_api
from tests.support.helpers import quiet, wait_for
from tests.support.scripts import approval, script
from treadle.api.schedules import Schedule
from treadle.cli.stack import Stack
from treadle.runtime.settings import SchedulerSettings
from treadle.scheduler.service import Scheduler

pytestmark = pytest.mark.e2e
_tenants = itertools.count(1)
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class World:
    def __init__(self, stack: Stack, nc: nats.NATS, clock: Path) -> None:
        self.stack, self.nc, self.clock = stack, nc, clock

    def set_clock(self, moment: datetime) -> None:
        self.clock.write_text(moment.isoformat())

    async def api(self) -> Api:
        return await make_api(self.stack, self.nc, f"sched{next(_tenants)}")


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    state = tmp_path_factory.mktemp("schedstack")
    clock = state / "clock"
    clock.write_text(EPOCH.isoformat())  # nothing is due until a test moves the clock
    env = {"TREADLE_SCHEDULER_CLOCK_FILE": str(clock), "TREADLE_SCHEDULER_TICK_SECONDS": "0.1"}
    async with Stack(state / "stack", env=env, on_output=quiet, replicas=2) as stack:
        nc = await nats.connect(stack.nats_url)
        try:
            yield World(stack, nc, clock)
        finally:
            await nc.close()


@pytest.fixture(autouse=True)
def rewound(world: World) -> None:
    """Each test starts with nothing due: a clock an earlier test left at its own schedule's time plus a minute
    would make a schedule this test creates a few seconds later due at once (a pause could come too late)."""
    world.set_clock(EPOCH)


async def make(api: Api, path: str, **body: Any) -> dict[str, Any]:
    r = await api.request("POST", path, json={"interval_seconds": 60, **body})
    assert r.status_code == 201, r.text
    return r.json()


async def schedule_of(api: Api, path: str) -> dict[str, Any]:
    r = await api.request("GET", path)
    assert r.status_code == 200, r.text
    return r.json()


async def until(api: Api, path: str, ready: Any) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        found = (await schedule_of(api, path))["schedule"]
        return found if ready(found) else None

    return await wait_for(check, timeout=30, interval=0.05, what=f"{path} to fire")


def created(view: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(view["schedule"]["created_at"])


async def runs_of(api: Api, thread: str) -> list[dict[str, Any]]:
    return (await api.thread(thread))["runs"]


async def test_interval_schedule_fires_once_across_two_replicas_and_a_restart(world: World) -> None:
    api = await world.api()
    thread = await api.create_thread(title="scheduled")
    view = await make(api, f"/v1/threads/{thread}/schedules", text="scheduled hello")
    sid = view["schedule"]["schedule_id"]
    path = f"/v1/threads/{thread}/schedules/{sid}"
    first = created(view) + timedelta(seconds=60)
    assert [datetime.fromisoformat(t) for t in view["next_firings"][:2]] == [first, first + timedelta(seconds=60)]
    listed = await schedule_of(api, f"{path}?count=12")
    assert len(listed["next_firings"]) == 12

    world.set_clock(first + timedelta(seconds=1))
    fired = await until(api, path, lambda s: s["fired"] == 1)
    assert fired["last_outcome"] == "started"
    assert datetime.fromisoformat(fired["next_at"]) == first + timedelta(seconds=60)
    await api.wait_run(fired["last_run_id"])
    async with httpx.AsyncClient() as http:  # the replica that fired counted it
        ports = [world.stack.health_ports[n] for n in world.stack.replicas["scheduler"]]
        texts = [(await http.get(f"http://127.0.0.1:{port}/metrics")).text for port in ports]
    assert any('treadle_schedule_firings_total{outcome="started"}' in text for text in texts)

    for name in world.stack.replicas["scheduler"]:  # both replicas, the clock still at the first firing
        await world.stack.processes.restart(name)
    await world.stack.wait_ready(names=world.stack.replicas["scheduler"])
    world.set_clock(first + timedelta(seconds=61))  # the second firing, made by the restarted replicas
    second = await until(api, path, lambda s: s["fired"] == 2)
    await api.wait_run(second["last_run_id"])
    runs = await runs_of(api, thread)
    assert len(runs) == 2, runs  # one per firing: neither replica nor the restart fired one twice
    await api.client.aclose()


async def test_a_firing_sent_again_gets_the_first_receipt(world: World) -> None:
    """A replica that dies between sending a firing and recording it: the next sender uses the same key."""
    api = await world.api()
    thread = await api.create_thread(title="resent")
    view = await make(api, f"/v1/threads/{thread}/schedules", text="once only", paused=True)
    schedule = msgspec.convert(view["schedule"], Schedule, strict=False)
    planned = created(view) + timedelta(seconds=60)
    sender = Scheduler(world.nc, SchedulerSettings())
    first = await sender.send(api.tenant, schedule, planned)
    again = await sender.send(api.tenant, schedule, planned)
    assert first == again and first[2] is not None
    assert len(await runs_of(api, thread)) == 1
    await api.client.aclose()


async def test_tenant_schedule_creates_a_thread_per_firing(world: World) -> None:
    api = await world.api()
    view = await make(api, "/v1/schedules", text="nightly", title="nightly upgrade")
    path = f"/v1/schedules/{view['schedule']['schedule_id']}"
    world.set_clock(created(view) + timedelta(seconds=61))
    fired = await until(api, path, lambda s: s["fired"] == 1)
    assert fired["last_thread_id"] and fired["thread_id"] is None
    await api.wait_run(fired["last_run_id"])
    assert (await api.thread(fired["last_thread_id"]))["thread"]["title"] == "nightly upgrade"
    await api.client.aclose()


async def test_pause_stops_firings_and_skip_skips_while_a_run_is_active(world: World) -> None:
    api = await world.api()
    quiet_thread = await api.create_thread(title="paused")
    paused = await make(api, f"/v1/threads/{quiet_thread}/schedules", text="never")
    paused_path = f"/v1/threads/{quiet_thread}/schedules/{paused['schedule']['schedule_id']}"
    r = await api.request("POST", paused_path + "/pause")
    assert r.status_code == 200 and r.json()["schedule"]["paused"] and r.json()["next_firings"] == []
    # A probe on the same thread is in the same partition: the scan that fires it saw the paused one.
    probe = await make(api, f"/v1/threads/{quiet_thread}/schedules", text="probe")
    probe_path = f"/v1/threads/{quiet_thread}/schedules/{probe['schedule']['schedule_id']}"

    busy = await api.create_thread(title="busy")
    held = await api.send(busy, "wait for me", script=script(approval()))
    skipper = await make(api, f"/v1/threads/{busy}/schedules", text="skipped", on_active="skip")
    skip_path = f"/v1/threads/{busy}/schedules/{skipper['schedule']['schedule_id']}"

    world.set_clock(created(skipper) + timedelta(seconds=61))
    await until(api, probe_path, lambda s: s["fired"] == 1)
    assert (await schedule_of(api, paused_path))["schedule"]["fired"] == 0
    assert len(await runs_of(api, quiet_thread)) == 1  # the probe's run only
    skipped = await until(api, skip_path, lambda s: s["last_outcome"] is not None)
    assert (skipped["last_outcome"], skipped["fired"], skipped["skipped"]) == ("skipped_active", 0, 1)
    assert [r["id"] for r in await runs_of(api, busy)] == [held["run_id"]]

    resumed = await api.request("POST", paused_path + "/resume")
    assert resumed.status_code == 200 and len(resumed.json()["next_firings"]) == 5
    await api.client.aclose()


async def test_another_tenant_cannot_see_or_touch_a_schedule(world: World) -> None:
    owner, other = await world.api(), await world.api()
    thread = await owner.create_thread(title="mine")
    view = await make(owner, f"/v1/threads/{thread}/schedules", text="mine")
    sid = view["schedule"]["schedule_id"]
    for method, path in (
        ("GET", f"/v1/threads/{thread}/schedules/{sid}"),
        ("GET", f"/v1/schedules/{sid}"),
        ("PATCH", f"/v1/schedules/{sid}"),
        ("POST", f"/v1/schedules/{sid}/pause"),
        ("DELETE", f"/v1/threads/{thread}/schedules/{sid}"),
    ):
        r = await other.request(method, path, json={"text": "theirs"} if method == "PATCH" else None)
        assert r.status_code == 404 and r.json()["error"]["code"] == "schedule_not_found", (method, path, r.text)
    r = await other.request("POST", f"/v1/threads/{thread}/schedules", json={"text": "x", "interval_seconds": 60})
    assert r.status_code == 404 and r.json()["error"]["code"] == "thread_not_found"
    assert (await schedule_of(other, "/v1/schedules"))["schedules"] == []
    assert (await schedule_of(owner, f"/v1/schedules/{sid}"))["schedule"]["text"] == "mine"
    await owner.client.aclose()
    await other.client.aclose()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"cron": "61 * * * *"}, "invalid_cron"),
        ({"cron": "* * * *"}, "invalid_cron"),
        ({"cron": "0 9 * * mon", "timezone": "Mars/Olympus"}, "invalid_timezone"),
        ({"cron": "0 9 * * mon", "timezone": "../../etc/passwd"}, "invalid_timezone"),
        ({"interval_seconds": 59}, "invalid_interval"),
        ({"interval_seconds": 60, "cron": "* * * * *"}, "invalid_schedule"),
        ({}, "invalid_schedule"),
        ({"interval_seconds": 60, "text": "x" * 100_001}, "text_too_long"),
        ({"interval_seconds": 60, "on_active": "sometimes"}, "bad_request"),
    ],
)
async def test_bad_schedules_are_refused_and_nothing_is_stored(world: World, body: dict[str, Any], code: str) -> None:
    api = await world.api()
    thread = await api.create_thread(title="bad")
    r = await api.request("POST", f"/v1/threads/{thread}/schedules", json={"text": "x", **body})
    assert r.status_code == 400 and r.json()["error"]["code"] == code, r.text
    assert (await schedule_of(api, f"/v1/threads/{thread}/schedules"))["schedules"] == []
    await api.client.aclose()


async def test_schedules_per_tenant_quota(world: World) -> None:
    api = await world.api()
    from treadle.core.policy import TenantPolicy
    from treadle.ops.policies import PolicyStore

    await PolicyStore(world.nc.jetstream()).put(api.tenant, TenantPolicy(max_schedules=1), actor="test")
    await make(api, "/v1/schedules", text="one", paused=True)
    r = await api.request("POST", "/v1/schedules", json={"text": "two", "interval_seconds": 60})
    assert r.status_code == 429 and r.json()["error"]["details"]["quota"] == "schedules_per_tenant", r.text
    await api.client.aclose()


async def test_an_agent_schedules_a_follow_up_on_its_own_thread_only(world: World) -> None:
    from tests.support.mcp_client import ToolFailed, call, mcp_session
    from treadle.ops.session_credentials import SessionCredentials

    api = await world.api()
    own, other = await api.create_thread(title="agent's"), await api.create_thread(title="not the agent's")
    tools = ("schedule_follow_up", "schedule_list", "schedule_delete")
    token = await SessionCredentials(world.nc.jetstream()).mint(
        tenant=api.tenant, thread=own, session_id="ps_schedules", capabilities=tools
    )
    async with mcp_session(world.stack.api_url, token) as agent:
        made = await call(agent, "schedule_follow_up", thread_id=own, text="check CI", interval_seconds=3600)
        sid = made["schedule"]["schedule_id"]
        assert len(made["next_firings"]) == 5
        assert [s["schedule_id"] for s in (await call(agent, "schedule_list", thread_id=own))["schedules"]] == [sid]
        with pytest.raises(ToolFailed) as refused:
            await call(agent, "schedule_follow_up", thread_id=other, text="not mine", interval_seconds=3600)
        assert refused.value.code == "forbidden"
        with pytest.raises(ToolFailed) as bad:
            await call(agent, "schedule_follow_up", thread_id=own, text="bad", cron="0 25 * * *")
        assert bad.value.code == "invalid_cron"
        await call(agent, "schedule_delete", thread_id=own, schedule_id=sid)
    assert (await schedule_of(api, f"/v1/threads/{own}/schedules"))["schedules"] == []
    assert (await schedule_of(api, f"/v1/threads/{other}/schedules"))["schedules"] == []
    await api.client.aclose()


async def test_after_long_downtime_only_the_latest_missed_firing_is_made(world: World) -> None:
    """Last in this module: it moves the shared clock days ahead. Five days of 60 s firings missed: the latest
    (30 s old, within the hour's window) fires once, the other 7,199 are counted as skipped."""
    api = await world.api()
    thread = await api.create_thread(title="was down")
    view = await make(api, f"/v1/threads/{thread}/schedules", text="catch up")
    path = f"/v1/threads/{thread}/schedules/{view['schedule']['schedule_id']}"
    latest = created(view) + timedelta(days=5)
    world.set_clock(latest + timedelta(seconds=30))
    fired = await until(api, path, lambda s: s["last_outcome"] is not None)
    assert (fired["fired"], fired["skipped"], fired["last_outcome"]) == (1, 7199, "started")
    assert datetime.fromisoformat(fired["last_fired_at"]) == latest
    assert datetime.fromisoformat(fired["next_at"]) == latest + timedelta(seconds=60)
    await api.wait_run(fired["last_run_id"])
    assert len(await runs_of(api, thread)) == 1
    await api.client.aclose()
