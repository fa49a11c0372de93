"""Limits of a sandboxed runtime, through the real launcher: processes and memory are capped (cgroup v1/v2
where the machine has it, RLIMIT_NPROC otherwise), and its cgroups go away with it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tests.isolation.sandbox_fixtures import World, monkeypatch_module, run_script, world  # noqa: F401
from treadle.sandbox.host import Sandbox, SandboxSettings

TENANT = "limited"


async def _run(world: World, settings: SandboxSettings, script: str) -> tuple[int, str, object]:
    return await _run_in(world, settings, script, world.workspace(TENANT))


async def _run_in(world: World, settings: SandboxSettings, script: str, workspace: Path) -> tuple[int, str, object]:
    return await run_script(world, settings, script, workspace, TENANT)


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


BOMBED = r"""
import os, socket, sys, time
port = int(sys.argv[1])
def ask():
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := s.recv(1000):
                data += chunk
        return data.partition(b"\r\n\r\n")[2].decode() or "nothing"
    except OSError as e:
        return type(e).__name__
print("before:" + ask(), flush=True)
forked = 0
while True:  # a fork bomb that keeps what it took: every process sleeps, and the limit stays full
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    forked += 1
print(f"full after {forked}", flush=True)
for i in range(3):
    print("during:" + ask(), flush=True)
"""


async def test_issue36_a_fork_bomb_leaves_the_sandbox_its_way_to_the_model_api(world):
    """The forwarder serves connections from the one thread it started before the runtime: with the pids
    limit used up by the runtime's processes it still relays every connection (it used to start a thread per
    connection, and its accept loop ended at the first one it could not start)."""

    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nanswer")
        await writer.drain()
        writer.close()

    api = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = api.sockets[0].getsockname()[1]
    settings = SandboxSettings(mode="on", pids=40)
    sandbox = Sandbox(settings, world.sandbox.identities, world.runtime_dir)
    sandbox.start()
    assert "pids" in sandbox.result.cgroups.covers() or sandbox.result.cgroups.describe()
    home = world.runtime_dir / "bomb-home"
    prepared = await sandbox.prepare(
        tenant=TENANT,
        name=f"bomb-{uuid.uuid4().hex[:8]}",
        workspace=world.workspace(TENANT),
        homes=[home],
        binaries=[],
        argv=["/usr/bin/python3", "-c", BOMBED, str(port)],
        runtime_env={},
        model_urls=[f"http://127.0.0.1:{port}"],
        home=home,
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            *prepared.command, env={}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await prepared.close()
        api.close()
        await api.wait_closed()
    lines = out.decode().splitlines()
    assert lines[0] == "before:answer", (lines, err.decode()[-2000:])
    assert lines[1].startswith("full after "), lines
    assert lines[2:] == ["during:answer"] * 3, (lines, err.decode()[-2000:])


async def test_issue36_the_disk_budget_counts_what_a_sandboxed_command_really_wrote(world):
    """A real command in the sandbox writes a 3 GiB sparse file and a 32 MiB dense one: the tenant's usage
    (what the disk budget compares) is the dense file's, and its ceiling is passed only by it."""
    from treadle.core.disk import DiskBudget, over
    from treadle.sandbox.disk import measure

    workspace = world.workspace(TENANT, f"disk-{uuid.uuid4().hex[:6]}")
    code, out, _ = await _run_in(
        world,
        SandboxSettings(mode="on"),
        "truncate -s 3G sparse.bin && head -c 33554432 /dev/urandom > dense.bin && echo wrote",
        workspace,
    )
    assert code == 0 and "wrote" in out, out
    used = measure([workspace])
    assert (workspace / "sparse.bin").stat().st_size == 3 << 30
    assert 32 << 20 <= used.bytes < 33 << 20, used
    assert over(used, DiskBudget(bytes=16 << 20)) is not None and over(used, DiskBudget(bytes=64 << 20)) is None


async def test_issue38_the_runtimes_tree_is_weighed_against_the_hosts_processes(world):
    """The cgroup tree every runtime sits in weighs as ten ordinary processes (the setting's default), not as
    one: a turn waits on its runtime, and Treadle's own background work may wait on it instead."""
    support = world.sandbox.result.cgroups
    assert "cpu" in support.covers(), support.describe()
    sandbox = Sandbox(SandboxSettings(mode="on"), world.sandbox.identities, world.runtime_dir)
    sandbox.start()
    home = world.runtime_dir / "weight-home"
    prepared = await sandbox.prepare(
        tenant=TENANT,
        name=f"w-{uuid.uuid4().hex[:8]}",
        workspace=world.workspace(TENANT),
        homes=[home],
        binaries=[],
        argv=["/bin/true"],
        runtime_env={},
        model_urls=[],
        home=home,
    )
    try:
        (cpu,) = [Path(p).parent for p in prepared._cgroup.procs if "cpu" in Path(p).parts or support.v2]
        weighed = ("cpu.weight", "1000") if support.v2 else ("cpu.shares", "10240")
        assert (cpu.parent / weighed[0]).read_text().strip() == weighed[1]  # the host's group
        assert (cpu.parent.parent / weighed[0]).read_text().strip() == weighed[1]  # treadle-sandbox
    finally:
        await prepared.close()
