"""Where the machine cannot build the sandbox, the provider host starts no runtime session (a typed failure
naming the missing piece, which the supervisor retries: the run waits) unless TREADLE_SANDBOX=off."""

from __future__ import annotations

from pathlib import Path

import pytest

from treadle.eventlog import streams
from treadle.provider_host.service import ProviderHost
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient
from treadle.runtime.settings import ProviderHostSettings, Shared
from treadle.sandbox.host import Sandbox, SandboxSettings, SandboxUnavailable
from treadle.sandbox.identity import TenantIdentities


def _sandbox(tmp_path: Path, **settings) -> Sandbox:
    return Sandbox(SandboxSettings(**settings), TenantIdentities(tmp_path / "ws"), tmp_path / "rt")


def test_a_missing_bubblewrap_is_named_and_refused(tmp_path):
    sandbox = _sandbox(tmp_path, mode="on", bwrap="/nonexistent/bwrap")
    result = sandbox.start()
    assert not result.ok and "bubblewrap" in result.missing[0]
    with pytest.raises(SandboxUnavailable, match="bubblewrap.*TREADLE_SANDBOX=off|TREADLE_SANDBOX=off.*bubblewrap"):
        sandbox.check()


def test_sandbox_off_is_explicit_and_refuses_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TREADLE_SANDBOX", "off")
    sandbox = Sandbox(SandboxSettings(bwrap="/nonexistent/bwrap"), TenantIdentities(tmp_path / "ws"), tmp_path / "rt")
    assert not sandbox.enabled
    sandbox.start()
    sandbox.check()  # no error: the operator chose to run runtimes unsandboxed


def test_this_machine_builds_the_sandbox(tmp_path):
    result = _sandbox(tmp_path, mode="on").start()
    assert result.ok, result.missing


@pytest.mark.parametrize("provider, refused", [("codex", True), ("claude", True), ("scripted", False)])
async def test_the_host_refuses_runtime_sessions_it_cannot_sandbox(tmp_path, monkeypatch, nc, provider, refused):
    """A real host on the test broker, on a volume of its own, asked for a session the way the supervisor asks."""
    monkeypatch.setenv("TREADLE_SANDBOX_BWRAP", "/nonexistent/bwrap")
    volume = f"refusal-{provider}"
    await streams.ensure(nc.jetstream())
    host = ProviderHost(nc, Shared(state_dir=tmp_path, volume=volume), ProviderHostSettings(host_id=f"host-{volume}"))
    await host.start()
    try:
        reply = await HostClient(nc, timeout=10.0).place(
            hp.PlaceSession(
                tenant="acme",
                thread="thr_1",
                provider=provider,
                session_id=f"ps_{provider}",
                provider_thread_id="pth_1",
                workspace="w",
            ),
            volume=volume,
        )
    finally:
        await host.stop()
    if refused:
        assert isinstance(reply, hp.HostFailure), reply
        assert reply.code == "sandbox_unavailable" and "bubblewrap" in reply.message, reply
    else:
        assert isinstance(reply, hp.SessionPlaced), reply
