"""The real Codex app-server in Treadle's sandbox, attacked by its own agent: a shell command (as the mock
model scripts it) tries every way out. What the model API receives back as the command's output must
hold none of the host's bytes, and nothing may be written or connected to outside. Both of Codex's own
sandbox modes run inside ours: workspace-write (Codex nests its own bubblewrap) and danger-full-access."""

from __future__ import annotations

import os
import uuid

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


def _adapter(world: World, mock: MockResponses, runtime_mode: str) -> CodexAdapter:
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
    return CodexAdapter(world.workspace(TENANT), request, world.runtime_dir / session, settings, sandbox=world.sandbox)


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
