"""Issue 38 (the first turn): spare runtimes (provider_host/spares.py), on a real provider host with a real broker,
the real ``codex`` binary in its sandbox and the mock model API. A tenant that had a runtime warmed gets a spare
started before its next thread exists; that thread's hint takes it, its workspace bound into the running sandbox,
and its turn reports what a cold session's reports. The attacks: another tenant's hint, two hints racing for one
spare, a spare whose process exited, a workspace that is a link to another thread's, a spare never taken."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
from pathlib import Path

import msgspec
import nats
import pytest

from tests.codex.codex_mock import Text
from tests.codex.codex_support import codex_env
from tests.codex.test_codex_warm_host import play
from tests.support.helpers import wait_for
from treadle.core import provider_events as pe
from treadle.eventlog import streams
from treadle.ops.servers import NatsServer
from treadle.provider_host.service import ProviderHost
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient
from treadle.runtime.clock import ManualClock
from treadle.runtime.settings import ProviderHostSettings, Shared
from treadle.sandbox.attach import sandbox_pid
from treadle.sandbox.host import ATTACH_SCRIPT, SandboxUnavailable

pytestmark = pytest.mark.e2e
VOLUME = "local"


@pytest.fixture
async def env(tmp_path, monkeypatch, mock, homes_root):
    for name, value in codex_env(mock, homes_root).items():
        monkeypatch.setenv(name, value)
    server = NatsServer(tmp_path / "nats")
    await server.start()
    nc = await nats.connect(server.url)
    await streams.ensure(nc.jetstream())
    reported: dict[str, list[str]] = collections.defaultdict(list)

    async def on_event(msg) -> None:
        for event in pe.provider_event_decoder.decode(msg.data).parts():
            if not isinstance(event.body, pe.TextDelta):
                reported[event.attempt_id or ""].append(type(event.body).__name__)

    await nc.subscribe("treadle.prov.>", cb=on_event)
    clock = ManualClock()
    own = ProviderHostSettings(host_id="h1", warm_sessions=4, warm_seconds=30.0, spare_runtimes=2, spare_seconds=60.0)
    shared = Shared(state_dir=tmp_path, nats_url=server.url)
    host = ProviderHost(nc, shared, own, clock=clock)
    host._spares.delay = 0.0  # started as soon as a turn ends (the host's own waits for its run to complete)
    await host.start()
    yield nc, host, clock, reported, shared.workspaces
    await host.stop()
    await nc.close()
    await server.stop()


def hint(session_id: str, tenant: str = "acme", thread: str = "thr_1", workspace: str | None = None):
    return hp.WarmSession(
        tenant=tenant, thread=thread, provider="codex", session_id=session_id, workspace=workspace or f"w_{thread}"
    )


def placement(request: hp.WarmSession) -> hp.PlaceSession:
    return msgspec.structs.replace(request.placement(), provider_thread_id=f"pth_{request.session_id}")


async def warmed(host: ProviderHost, request: hp.WarmSession):
    assert host._warmer.offer(request)
    warm = host._warmer.pool._warm[request.session_id]
    await wait_for(warm.launch.done, timeout=60, what="the warmed runtime's start")
    return warm


async def spare_of(host: ProviderHost, tenant: str = "acme"):
    """The tenant's spare, once started (it starts when a turn of the tenant has ended)."""
    spare = await wait_for(lambda: host._spares._spares.get((tenant, "codex")), what="the spare")
    await wait_for(spare.launch.done, timeout=60, what="the spare's start")
    assert spare.launch.exception() is None and spare.ready
    return spare


def inside(adapter, path: Path) -> Path:
    """``path`` as the sandbox of ``adapter``'s runtime sees it (through its first process's root)."""
    return Path(f"/proc/{sandbox_pid(adapter.pid)}/root") / str(path).lstrip("/")


async def spare_after_a_turn(env, mock, tenant: str = "acme"):
    """A turn of ``tenant`` on a thread of its own, then the spare its end starts."""
    nc, host, _, reported, _ = env
    mock.on(f"hello from {tenant}", [Text("Hello.", chunks=1)])
    request = hint(f"ps_{tenant}_0", tenant=tenant, thread=f"thr_{tenant}_0")
    await warmed(host, request)
    await play(nc, placement(request), f"att_{tenant}_0", f"hello from {tenant}", reported)
    return await spare_of(host, tenant)


async def test_a_tenants_next_thread_takes_its_spare_with_only_its_own_workspace(env, mock):
    nc, host, _, reported, workspaces = env
    mock.on("spare hello", [Text("Hello from a spare runtime.", chunks=3)])
    mock.on("first hello", [Text("Hello from a spare runtime.", chunks=3)])
    first = hint("ps_first")
    assert len(host._spares) == 0
    await warmed(host, first)
    assert len(host._spares) == 0  # not while the thread's runtime starts, nor its first turn plays
    first_events = await play(nc, placement(first), "att_first", "first hello", reported)
    spare = await spare_of(host)
    pid = spare.adapter.pid
    assert not inside(spare.adapter, workspaces / "acme" / "w_thr_1").exists()  # no thread's workspace before

    second = hint("ps_second", thread="thr_2")
    (workspaces / "acme" / "w_thr_2").mkdir(parents=True)
    (workspaces / "acme" / "w_thr_2" / "marker").write_text("thr_2's")
    warm = await warmed(host, second)
    assert warm.adapter is spare.adapter and warm.adapter.pid == pid and warm.launch.exception() is None
    assert (acme := host._spares._spares.get(("acme", "codex"))) is None or acme is not spare  # taken for good
    assert inside(spare.adapter, workspaces / "acme" / "w_thr_2" / "marker").read_text() == "thr_2's"
    assert not inside(spare.adapter, workspaces / "acme" / "w_thr_1").exists()  # the other thread's: never
    spare_events = await play(nc, placement(second), "att_second", "spare hello", reported)
    assert host._sessions["ps_second"].adapter is spare.adapter and spare.adapter.pid == pid
    assert spare_events == first_events and spare_events[-1] == "TurnCompleted"


async def test_a_spare_is_never_taken_by_another_tenant_and_once_only(env, mock):
    """Tenant mismatch and the adoption race: globex's hint starts its own runtime; of two hints of acme at once,
    one takes the spare and the other starts a runtime of its own."""
    _, host, _, _, _ = env
    spare = await spare_after_a_turn(env, mock)

    globex = await warmed(host, hint("ps_g", tenant="globex", thread="thr_g"))
    assert globex.adapter is not spare.adapter and globex.adapter._prepared.ids != spare.adapter._prepared.ids
    assert host._spares._spares[("acme", "codex")] is spare

    assert host._warmer.offer(hint("ps_a1", thread="thr_a1")) and host._warmer.offer(hint("ps_a2", thread="thr_a2"))
    one, two = host._warmer.pool._warm["ps_a1"], host._warmer.pool._warm["ps_a2"]
    await wait_for(lambda: one.launch.done() and two.launch.done(), timeout=60, what="both starts")
    assert one.adapter is spare.adapter and two.adapter is not spare.adapter
    assert one.launch.exception() is None and two.launch.exception() is None


async def test_a_spare_whose_process_exited_is_stopped_not_handed_over(env, mock):
    _, host, _, _, _ = env
    spare = await spare_after_a_turn(env, mock)
    os.kill(spare.adapter.pid, signal.SIGKILL)
    await wait_for(lambda: not spare.ready, what="the spare's exit")

    warm = await warmed(host, hint("ps_a1", thread="thr_a1"))
    assert warm.adapter is not spare.adapter and warm.launch.exception() is None
    await wait_for(lambda: not host._spares._stopping, timeout=30, what="the dead spare's stop")
    assert spare.adapter.pid is None


async def test_a_workspace_that_is_a_link_is_never_bound_into_a_spare(env, mock):
    nc, host, _, _, workspaces = env
    spare = await spare_after_a_turn(env, mock)
    other = workspaces / "acme" / "w_other"
    other.mkdir(parents=True)
    (other / "secret").write_text("another thread's")
    (workspaces / "acme" / "w_link").symlink_to(other)

    warm = await warmed(host, hint("ps_link", thread="thr_l", workspace="w_link"))
    assert warm.adapter is spare.adapter
    assert isinstance(warm.launch.exception(), SandboxUnavailable)
    assert not inside(spare.adapter, other).exists()
    assert not inside(spare.adapter, workspaces / "acme" / "w_link").exists()
    # attach.py refuses it on its own too (a link swapped in after the host's checks)
    ids = spare.adapter._prepared.ids
    script = [sys.executable, "-I", "-S", str(ATTACH_SCRIPT), str(spare.adapter.pid)]
    done = subprocess.run(
        [*script, str(workspaces / "acme" / "w_link"), str(ids.uid), str(ids.gid)], capture_output=True
    )
    assert done.returncode == 1 and not inside(spare.adapter, other).exists(), done.stderr
    hosts = HostClient(nc, timeout=60.0)  # the placement stops it and fails as a cold start would
    refused = await hosts.place(placement(hint("ps_link", thread="thr_l", workspace="w_link")), volume=VOLUME)
    assert isinstance(refused, hp.HostFailure) and refused.code == "sandbox_unavailable"
    assert spare.adapter.pid is None


async def test_a_spare_not_taken_in_time_is_stopped(env, mock):
    _, host, clock, _, _ = env
    spare = await spare_after_a_turn(env, mock)
    placeholder = spare.adapter.workspace
    assert placeholder.is_dir() and not list(placeholder.iterdir())
    clock.advance(host._spares.seconds)
    await wait_for(lambda: len(host._spares) == 0 and not host._spares._stopping, timeout=30, what="the expiry")
    assert spare.adapter.pid is None and not spare.ready and not placeholder.exists()


async def test_a_host_that_gives_sessions_credentials_keeps_no_spares(env):
    nc, _, _, _, _ = env
    own = ProviderHostSettings(host_id="h2", mcp_url="http://127.0.0.1:18999/mcp", spare_runtimes=2)
    host = ProviderHost(nc, Shared(state_dir=Path("/nonexistent"), nats_url="nats://127.0.0.1:1"), own)
    assert host._spares.size == 0 and host._spares.want("acme", "codex") is False
