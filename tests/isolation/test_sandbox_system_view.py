"""What a sandbox shows of the system, through the real launcher: the system read-only, minus the programs
it masks (``launcher.MASKED_PATHS``: Codex's app-server ran ``lsb_release`` twice before every start)."""

from __future__ import annotations

from tests.isolation.sandbox_fixtures import monkeypatch_module, run_script, world  # noqa: F401
from treadle.sandbox.host import SandboxSettings

TENANT = "viewer"
SCRIPT = "lsb_release -a 2>/dev/null; echo lsb=$?; . /etc/os-release && echo id=$ID; ls /usr/bin | grep -c ."


async def test_a_sandbox_runs_no_lsb_release_but_reads_os_release(world):
    _, out, _ = await run_script(world, SandboxSettings(mode="on"), SCRIPT, world.workspace(TENANT), TENANT)
    lines = out.split()
    assert "lsb=126" in lines, out  # there, but neither executable nor readable
    assert "id=debian" in lines, out  # what Codex reads instead
    assert int(lines[-1]) > 100, out  # the rest of the system is there
