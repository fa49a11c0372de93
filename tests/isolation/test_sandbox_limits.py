"""Limits of a sandboxed runtime, through the real launcher: processes and memory are capped (cgroup v1/v2
where the machine has it, RLIMIT_NPROC otherwise), and its cgroups go away with it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tests.isolation.sandbox_fixtures import World, monkeypatch_module, world  # noqa: F401
from treadle.sandbox.host import Sandbox, SandboxSettings

TENANT = "limited"


async def _run(world: World, settings: SandboxSettings, script: str) -> tuple[int, str, object]:
    sandbox = Sandbox(settings, world.sandbox.identities, world.runtime_dir)
    sandbox.start()
    home = world.runtime_dir / "limits-home"
    prepared = await sandbox.prepare(
        tenant=TENANT,
        name=f"lim-{uuid.uuid4().hex[:8]}",
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
            *prepared.command,
            env={},
            cwd=world.workspace(TENANT),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, out.decode(errors="replace"), prepared
    finally:
        await prepared.close()


async def test_a_sandbox_cannot_start_more_processes_than_its_limit(world):
    code, out, _ = await _run(
        world,
        SandboxSettings(mode="on", pids=24),
        "for i in $(seq 60); do sleep 5 & done 2>&1 | "
        "grep -c -i 'fork\\|resource' ; kill $(jobs -p) 2>/dev/null; echo done",
    )
    assert "done" in out
    assert int(out.split()[0]) > 0, out  # some forks were refused


async def test_a_sandbox_cannot_use_more_memory_than_its_limit(world):
    assert "memory" in world.sandbox.result.cgroups.covers(), world.sandbox.result.cgroups.describe()
    code, out, prepared = await _run(
        world,
        SandboxSettings(mode="on", memory_mb=128),
        'python3 -c \'b = bytearray(400 << 20); print("got" + "it")\'; echo rc=$?',
    )
    assert "gotit" not in out and "rc=137" in out, out  # killed by the OOM killer of its own group
    assert all(not Path(p).parent.exists() for p in prepared._cgroup.procs)  # removed with the runtime


async def test_a_restarted_host_sweeps_the_cgroups_and_processes_its_killed_life_left(world):
    """Issue 36, finding 6a: a host killed with its runtimes running closes none of their groups; its next life
    (same runtime dir) ends what still runs in them and removes them, and leaves another host's groups alone."""
    crashed_dir, other_dir = world.root / "provider-runtimes" / "host-crashed", world.root / "provider-runtimes" / "h2"
    lives = [Sandbox(SandboxSettings(mode="on"), world.sandbox.identities, d) for d in (crashed_dir, other_dir)]
    running = []
    for sandbox in lives:
        sandbox.start()
        home = sandbox.runtime_dir / "home"
        prepared = await sandbox.prepare(
            tenant=TENANT,
            name=f"left-{uuid.uuid4().hex[:8]}",
            workspace=world.workspace(TENANT),
            homes=[home],
            binaries=[],
            argv=["/bin/bash", "-c", "echo up; sleep 600"],
            runtime_env={},
            model_urls=[],
            home=home,
        )
        proc = await asyncio.create_subprocess_exec(
            *prepared.command, env={}, cwd=world.workspace(TENANT), stdout=asyncio.subprocess.PIPE
        )
        assert (await asyncio.wait_for(proc.stdout.readline(), 60)).strip() == b"up"
        running.append((prepared, proc))
    (left, killed), (kept, alive) = running
    assert all(Path(p).exists() for p in left._cgroup.procs + kept._cgroup.procs)

    # The crashed host's next life: same runtime dir, a new Sandbox (nothing of the old one's state)
    swept = Sandbox(SandboxSettings(mode="on"), world.sandbox.identities, crashed_dir)
    await asyncio.to_thread(swept.host_start, world.workspaces)
    assert await asyncio.wait_for(killed.wait(), 30) == -9  # what ran in the groups was ended
    assert all(not Path(p).parent.exists() for p in left._cgroup.procs)
    assert alive.returncode is None and all(Path(p).exists() for p in kept._cgroup.procs)
    alive.kill()
    await alive.wait()
    await kept.close()
    assert all(not Path(p).parent.exists() for p in kept._cgroup.procs)
