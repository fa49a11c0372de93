"""What a sandbox shows of the system, through the real launcher: the system read-only, minus the programs
it masks (``launcher.MASKED_PATHS``: Codex's app-server ran ``lsb_release`` twice before every start)."""

from __future__ import annotations

import asyncio
import uuid

from tests.isolation.sandbox_fixtures import World, monkeypatch_module, world  # noqa: F401

TENANT = "viewer"
SCRIPT = "lsb_release -a 2>/dev/null; echo lsb=$?; . /etc/os-release && echo id=$ID; ls /usr/bin | grep -c ."


async def _run(world: World, script: str) -> str:
    home = world.runtime_dir / "view-home"
    prepared = await world.sandbox.prepare(
        tenant=TENANT,
        name=f"view-{uuid.uuid4().hex[:8]}",
        workspace=world.workspace(TENANT),
        homes=[home],
        binaries=[],
        argv=["/bin/bash", "-c", script],
        runtime_env={},
        model_urls=[],
        home=home,
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            *prepared.command, env={}, cwd=world.workspace(TENANT), stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return out.decode(errors="replace")
    finally:
        await prepared.close()


async def test_a_sandbox_runs_no_lsb_release_but_reads_os_release(world):
    out = await _run(world, SCRIPT)
    lines = out.split()
    assert "lsb=126" in lines, out  # there, but neither executable nor readable
    assert "id=debian" in lines, out  # what Codex reads instead
    assert int(lines[-1]) > 100, out  # the rest of the system is there
