"""The real Codex app-server in Treadle's sandbox, attacked by its own agent: a shell command (as the mock
model scripts it) tries every way out. What the model API receives back as the command's output must
hold none of the host's bytes, and nothing may be written or connected to outside. Both of Codex's own
sandbox modes run inside ours: workspace-write (Codex nests its own bubblewrap) and danger-full-access."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.codex.codex_mock import Exec, MockResponses, Text
from tests.codex.codex_support import Driver
from tests.isolation.sandbox_fixtures import END, World, marker_dir, monkeypatch_module, world  # noqa: F401
from tests.support.helpers import wait_for
from treadle.core import provider_events as pe
from treadle.providers.base import Response
from treadle.providers.codex import CodexAdapter, CodexSettings
from treadle.providers.protocol import PlaceSession

TENANT = "acme"


@pytest.fixture(scope="module")
async def mock():
    server = await MockResponses().start()
    yield server
    await server.stop()


def _adapter(world: World, mock: MockResponses, runtime_mode: str, sandbox=None) -> CodexAdapter:
    session = f"ps_{uuid.uuid4().hex[:8]}"
    request = PlaceSession(
        tenant=TENANT,
        thread="thr_1",
        provider="codex",
        session_id=session,
        provider_thread_id="pth_1",
        workspace="w",
        runtime_mode=runtime_mode,
    )
    settings = CodexSettings(
        base_url=mock.base_url,
        api_key_env="MOCK_MODEL_KEY",
        api_key="sk-mock",
        home_root=world.runtime_dir / "codex-homes",
        request_timeout=30,
    )
    return CodexAdapter(
        world.workspace(TENANT), request, world.runtime_dir / session, settings, sandbox=sandbox or world.sandbox
    )


async def _play_attack(world: World, mock: MockResponses, runtime_mode: str, marker_dir) -> tuple[str, object]:
    prompt = f"attack {runtime_mode} {uuid.uuid4().hex[:6]}"
    mock.on(prompt, [Exec(world.attack(marker_dir))], [Text("done")])
    adapter = _adapter(world, mock, runtime_mode)
    try:
        await adapter.open_thread(None, "unused")
        driver = Driver(adapter)
        _, sink, task = driver.start(prompt)
        answered: set[str] = set()

        async def accepted_until_done() -> bool:  # whatever the runtime asks (an escalation out of Codex's sandbox too)
            for request in sink.of(pe.RequestOpened):
                if request.request_id not in answered:
                    answered.add(request.request_id)
                    await adapter.respond(request.request_id, Response(decision="accept"))
            return task.done()

        await wait_for(accepted_until_done, timeout=90, interval=0.05, what="the attack's turn")
        await task
        seen = [r for r in mock.requests if r.prompt == prompt and r.tool_outputs]
        assert seen, [r.prompt for r in mock.requests]
        output = "\n".join(str(o.get("output")) for o in seen[-1].tool_outputs)
        return output, sink
    finally:
        await adapter.close()


@pytest.mark.parametrize("runtime_mode", ["auto_accept_edits", "full_access"])
async def test_codex_shell_command_cannot_reach_outside_its_sandbox(world, mock, marker_dir, runtime_mode):
    output, sink = await _play_attack(world, mock, runtime_mode, marker_dir)
    world.assert_clean(output, marker_dir)
    assert sink.completed.status == "completed"
    if runtime_mode == "full_access":  # (in workspace-write Codex's own seccomp filter refuses every socket)
        assert output.count("403 Forbidden") == 2  # the egress proxy refused the broker and Redis
    uid = world.sandbox.identities.ids(TENANT).uid
    assert f"\n{uid}\n" in f"\n{output}\n" or str(uid) in output  # ran as the tenant's uid, not root
    # Codex kept its files in the tenant's home, owned by the tenant
    home = world.runtime_dir / "codex-homes" / TENANT
    assert os.stat(home).st_uid == uid and os.stat(home).st_mode & 0o077 == 0


async def test_issue36_after_a_fork_bomb_in_the_sandbox_the_next_turn_on_the_thread_completes(world, mock):
    """The agent's command fills the sandbox's pids limit with a fork bomb that outlives the command (its own
    session, so Codex's cleanup of the command's process group misses it); the runtime still reaches its model
    API over new connections (the forwarder starts nothing per connection), so this turn and the next one on
    the same runtime complete. (Before: "stream disconnected before completion" on the bomb's own turn.)"""
    from treadle.sandbox.host import Sandbox, SandboxSettings

    bombed = f"bomb {uuid.uuid4().hex[:6]}"
    after = f"after {uuid.uuid4().hex[:6]}"
    mock.on(
        bombed, [Exec("setsid bash -c ':(){ :|: & wait; };:' </dev/null >/dev/null 2>&1 & echo lit")], [Text("lit it")]
    )
    mock.on(after, [Text("still here")])
    sandbox = Sandbox(SandboxSettings(mode="on", pids=96), world.sandbox.identities, world.runtime_dir)
    assert sandbox.start().ok and "pids" in sandbox.result.cgroups.covers()
    adapter = _adapter(world, mock, "full_access", sandbox)
    try:
        await adapter.open_thread(None, "unused")
        driver = Driver(adapter)
        first = await driver.play(bombed, timeout=120)
        assert first.completed.status == "completed", first.completed
        pids = [p for p in adapter._prepared._cgroup.dirs if (p / "pids.max").exists()]
        assert pids, adapter._prepared._cgroup.dirs
        # the bomb has hit the limit (the kernel counts the refused forks), and goes on
        await wait_for(lambda: _refused_forks(pids[0]) > 0, timeout=30, what="the fork bomb at the pids limit")
        assert int((pids[0] / "pids.current").read_text()) >= 90  # held: its processes wait, and never exit
        mock.drop_connections()  # the API closed its idle connection: the next turn must open a new one
        second = await driver.play(after, timeout=120)
        assert second.completed.status == "completed", second.completed
        assert second.reply == "still here"
    finally:
        await adapter.close()


def _refused_forks(group: Path) -> int:
    for line in (group / "pids.events").read_text().splitlines():
        name, _, count = line.partition(" ")
        if name == "max":
            return int(count)
    return 0
