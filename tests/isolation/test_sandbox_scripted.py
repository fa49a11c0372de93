"""The scripted provider runs inside the host process (as root): its write_file must stay in the workspace
whatever links the agent left there, and what it writes belongs to the tenant's uid."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.isolation.sandbox_fixtures import World, monkeypatch_module, world  # noqa: F401
from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.providers.base import Turn
from treadle.providers.protocol import PlaceSession
from treadle.providers.scripted import ScriptedAdapter, ScriptFailed

TENANT = "acme"


class _Sink:
    def __init__(self) -> None:
        self.events: list = []

    async def event(self, body) -> None:
        self.events.append(body)

    async def text(self, message_id, node_id, chunk) -> None:
        return None

    async def text_done(self, message_id, node_id, text) -> None:
        return None


def _adapter(world: World, workspace: Path) -> ScriptedAdapter:
    request = PlaceSession(
        tenant=TENANT,
        thread="thr_1",
        provider="scripted",
        session_id="ps_1",
        provider_thread_id="pth_1",
        workspace=workspace.name,
    )
    return ScriptedAdapter(workspace, request, None, sandbox=world.sandbox)


@pytest.fixture
def setup(world, tmp_path):
    workspace = world.workspace(TENANT, f"w-{uuid.uuid4().hex[:6]}")
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("host file\n")
    os.symlink(outside, workspace / "out")  # the agent's links, to a dir and to a file outside
    os.symlink(victim, workspace / "link.txt")
    os.link(victim, workspace / "hard.txt")  # a hard link made while the file was reachable
    (workspace / "sub").mkdir()
    os.symlink(outside, workspace / "sub" / "deeper")
    return workspace, outside, victim


@pytest.mark.parametrize(
    "path",
    ["out/x.txt", "link.txt", "hard.txt", "sub/deeper/x.txt", "../escape.txt", "/etc/passwd-x", "sub/../../escape.txt"],
)
def test_scripted_write_file_never_follows_a_link_out_of_the_workspace(world, setup, path):
    workspace, outside, victim = setup
    adapter = _adapter(world, workspace)
    with pytest.raises(ScriptFailed):
        adapter._write(path, "written by the scripted provider\n")
    assert victim.read_text() == "host file\n"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert not (workspace.parent / "escape.txt").exists()


async def test_scripted_write_file_is_owned_by_the_tenant(world, setup):
    workspace, _, _ = setup
    adapter = _adapter(world, workspace)
    await adapter.open_thread(None, "scripted-t1")
    turn = Turn(
        run_id="run_1",
        attempt_id="att_1",
        root_node_id="root",
        text="go",
        ids=IdFactory("att_1", 1),
        script={
            "steps": [
                {"type": "write_file", "path": "new/dir/hello.py", "content": "print(1)\n"},
                {"type": "write_file", "path": "out/x.txt", "content": "escape\n"},
            ]
        },
    )
    sink = _Sink()
    await adapter.run_turn(turn, sink)
    done = [e for e in sink.events if isinstance(e, pe.TurnCompleted)][-1]
    assert done.status == "failed" and "not a directory of the workspace" in (done.error or "")
    uid = world.sandbox.identities.ids(TENANT).uid
    written = workspace / "new" / "dir" / "hello.py"
    assert written.read_text() == "print(1)\n"
    for path in (written, workspace / "new", workspace / "new" / "dir"):
        assert (path.stat().st_uid, path.stat().st_gid) == (uid, uid), path
