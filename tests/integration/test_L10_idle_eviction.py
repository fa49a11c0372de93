"""Issue 35, L10: an idle thread's workspace leaves its node's disk when the archive can give all of it back, and
every request that touches it brings it back first, as it was left: a message's hydrate, a diff, a rollback's
restore, a fork's materialisation. A message arriving while the workspace is being evicted loses no file.
Real git, the real checkpoint service over a real broker, the archive in the broker's Object Store."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest

from tests.support.helpers import wait_for
from tests.support.volumes import OnVolume
from treadle.checkpoints import eviction
from treadle.checkpoints.archive import JetStreamArchive
from treadle.checkpoints.client import CheckpointClient
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.hydrate import Hydrate, request_hydrate
from treadle.checkpoints.materialize import Materialize
from treadle.checkpoints.protocol import Capture, CheckpointError, DiffRequest, Restore
from treadle.checkpoints_service.service import CheckpointService
from treadle.eventlog import streams
from treadle.runtime.volumes import held_workspaces

TENANT = "acme"


async def _idle() -> str | None:
    return None  # the thread's events say nothing needs it (core/eviction.py decides that part)


@dataclass
class Node:
    root: Path
    shadow: Path
    workspaces: Workspaces
    client: CheckpointClient
    nc: nats.aio.client.Client
    name: str
    thread: str

    @property
    def ws(self) -> str:
        return f"threads/{self.thread}"

    @property
    def workspace(self) -> Path:
        return self.root / TENANT / self.ws

    def write(self, files: dict[str, str]) -> None:
        for path, text in files.items():
            target = self.workspace / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    def read(self, top: Path | None = None) -> dict[str, str]:
        top = top or self.workspace
        out = {}
        for d, dirs, names in os.walk(top):
            dirs[:] = [x for x in dirs if not (Path(d) == top and x == ".git")]
            out.update({str((Path(d) / n).relative_to(top)): (Path(d) / n).read_text() for n in names})
        return out

    async def capture(self, ordinal: int, previous: int | None, **kw):
        return await self.client.capture(
            Capture(
                tenant=TENANT, thread=self.thread, workspace=self.ws, ordinal=ordinal, previous_ordinal=previous, **kw
            )
        )

    async def evict(self, still_needed=_idle, tenant: str = TENANT, thread: str | None = None):
        return await eviction.evict(self.workspaces, tenant, thread or self.thread, still_needed)

    def gitdirs(self) -> list[Path]:
        top = self.shadow / TENANT / "workspaces"
        return sorted(top.iterdir()) if top.is_dir() else []


@pytest.fixture
async def node(nats_url, tmp_path) -> AsyncIterator[Node]:
    nc = await nats.connect(nats_url)
    await streams.ensure(nc.jetstream())
    name = f"v{uuid.uuid4().hex[:8]}"
    root, shadow = tmp_path / "workspaces", tmp_path / "shadow"
    workspaces = Workspaces(root, shadow, archive=JetStreamArchive(nc.jetstream()))
    service = CheckpointService(nc, workspaces, name)
    await service.start()
    try:
        yield Node(
            root, shadow, workspaces, OnVolume(CheckpointClient(nc), name), nc, name, f"thr_{uuid.uuid4().hex[:8]}"
        )
    finally:
        await service.stop()
        workspaces.close()
        await nc.close()


async def _two_checkpoints(node: Node):
    await node.client.prepare(TENANT, node.thread, node.ws)
    node.write({"a.txt": "one\n", "src/b.txt": "deep\n"})
    first = await node.capture(0, None, status="baseline")
    node.write({"a.txt": "two\n", "new.txt": "new\n"})
    second = await node.capture(1, 0)
    return first, second


async def test_L10_an_evicted_workspace_comes_back_as_it_was_for_every_request_that_touches_it(node: Node):
    first, second = await _two_checkpoints(node)
    files = node.read()
    assert held_workspaces(node.root) == {TENANT: 1}

    done = await node.evict()
    assert isinstance(done, eviction.Evicted), done
    assert done.commit == second.commit and done.files >= 3 and done.bytes > 0
    assert not node.workspace.exists() and node.gitdirs() == []  # the workspace and its git dir left the disk
    assert held_workspaces(node.root) == {TENANT: 0}  # what the volume's heartbeat announces
    assert list((node.root / TENANT / "threads").iterdir()) == []

    # A message: its supervisor's hydrate names the previous checkpoint; the workspace comes back as it was left.
    made = await request_hydrate(
        node.nc, node.name, Hydrate(tenant=TENANT, thread=node.thread, workspace=node.ws, commit=second.commit)
    )
    assert made.commit == second.commit and node.read() == files
    again = await node.capture(2, 1)
    assert again.unchanged and again.commit == second.commit  # the refs are back: the chain goes on

    assert isinstance(await node.evict(), eviction.Evicted)
    diff = await node.client.diff(  # a diff of an evicted thread
        DiffRequest(
            tenant=TENANT, thread=node.thread, workspace=node.ws, from_commit=first.commit, to_commit=second.commit
        )
    )
    assert "new.txt" in diff.patch and node.read() == files

    assert isinstance(await node.evict(), eviction.Evicted)
    fork = f"thr_{uuid.uuid4().hex[:8]}"
    made_fork = await node.client.materialize(  # a fork from a point of an evicted thread
        Materialize(
            tenant=TENANT,
            source_thread=node.thread,
            source_workspace=node.ws,
            commit=first.commit,
            thread=fork,
            workspace=f"threads/{fork}",
        )
    )
    assert made_fork.created and node.read(node.root / TENANT / "threads" / fork) == {
        "a.txt": "one\n",
        "src/b.txt": "deep\n",
    }

    assert isinstance(await node.evict(), eviction.Evicted)
    await node.client.restore(  # a rollback of an evicted thread
        Restore(tenant=TENANT, thread=node.thread, workspace=node.ws, restore_id="rbk_1", commit=first.commit)
    )
    assert node.read() == {"a.txt": "one\n", "src/b.txt": "deep\n"}
    assert isinstance(await node.evict(), eviction.Evicted)  # the rollback's state is durable: evicted again
    await node.workspaces.revive(TENANT, node.ws)
    assert node.read() == {"a.txt": "one\n", "src/b.txt": "deep\n"}  # where the rollback left it


async def test_L10_a_workspace_the_archive_cannot_give_back_whole_stays(node: Node):
    await _two_checkpoints(node)
    git = ("git", "-C", str(node.workspace), "-c", "user.name=t", "-c", "user.email=t@t")

    async def stays(why: str) -> None:
        kept = await node.evict()
        assert kept == why
        assert node.workspace.is_dir() and len(node.gitdirs()) == 1

    node.write({"late.txt": "not captured\n"})
    await stays("changed since its last durable checkpoint")
    (node.workspace / "late.txt").unlink()
    node.write({".gitignore": "*.log\n"})
    await node.capture(2, 1)
    node.write({"debug.log": "ignored by checkpoints\n"})
    await stays("it holds files checkpoints leave out")
    (node.workspace / "debug.log").unlink()
    (node.workspace / "empty").mkdir()
    await stays("it holds files checkpoints leave out")
    (node.workspace / "empty").rmdir()
    subprocess.run((*git, "add", "a.txt"), check=True, capture_output=True)
    await stays("its own repository has commits or staged files")
    subprocess.run((*git, "commit", "-qm", "mine"), check=True, capture_output=True)
    await stays("its own repository has commits or staged files")

    async def busy() -> str | None:
        return "a run is playing or queued"

    os.unlink(node.workspace / ".git" / "index")
    await stays("its own repository has commits or staged files")  # the commit is still there
    assert await node.evict(busy) == "a run is playing or queued"


async def test_L10_a_message_arriving_during_an_eviction_loses_no_file(node: Node):
    _, second = await _two_checkpoints(node)
    files = node.read()
    hydrating: list[asyncio.Task] = []

    async def a_message_arrives() -> str | None:
        # The thread's events were read as idle; now its next run is appended and its hydrate sent.
        request = Hydrate(tenant=TENANT, thread=node.thread, workspace=node.ws, commit=second.commit)
        hydrating.append(asyncio.create_task(request_hydrate(node.nc, node.name, request)))
        slot = node.workspaces._workspaces[node.workspace]
        await wait_for(lambda: slot.users == 2, what="the hydrate waiting for the workspace's lock")
        return None

    done = await node.evict(a_message_arrives)
    assert isinstance(done, eviction.Evicted)
    made = await hydrating[0]
    assert made.created and made.commit == second.commit  # rebuilt after the eviction, before the run starts
    assert node.read() == files


async def test_L10_an_evicted_thread_comes_back_in_its_own_tenant_only(node: Node):
    await _two_checkpoints(node)
    assert isinstance(await node.evict(), eviction.Evicted)
    other = node.root / "other"
    with pytest.raises(CheckpointError) as refused:  # the same thread id and workspace, asked as another tenant
        await request_hydrate(node.nc, node.name, Hydrate(tenant="other", thread=node.thread, workspace=node.ws))
    assert refused.value.code == "workspace_missing"
    assert not (other / "threads" / node.thread).exists()
    for tenant, thread in (("../acme", node.thread), (TENANT, "../x"), (TENANT, "thr x"), ("acme/..", node.thread)):
        with pytest.raises(CheckpointError) as bad:
            await node.evict(tenant=tenant, thread=thread)
        assert bad.value.code == "bad_request"
    assert not node.workspace.exists()  # nothing came back or changed
    assert await node.workspaces.revive(TENANT, node.ws)
    assert node.read() == {"a.txt": "two\n", "src/b.txt": "deep\n", "new.txt": "new\n"}


async def test_L9_3_a_workspace_prepared_empty_by_an_earlier_move_is_hydrated_not_refused(node: Node):
    """A move tried while the thread had no checkpoint prepared its workspace; once it has one, the hydrate of the
    next try makes the workspace from it instead of refusing "exists and holds other checkpoints"."""
    _, second = await _two_checkpoints(node)
    files = node.read()
    shutil.rmtree(node.workspace)
    shutil.rmtree(node.shadow / TENANT)
    await node.client.prepare(TENANT, node.thread, node.ws)  # as a move of a thread without a checkpoint does
    made = await request_hydrate(
        node.nc, node.name, Hydrate(tenant=TENANT, thread=node.thread, workspace=node.ws, commit=second.commit)
    )
    assert made.created and node.read() == files
    node.write({"mine.txt": "a user's file\n"})  # anything else in it: refused as before, nothing changed
    shutil.rmtree(node.shadow / TENANT)
    with pytest.raises(CheckpointError) as refused:
        await request_hydrate(
            node.nc, node.name, Hydrate(tenant=TENANT, thread=node.thread, workspace=node.ws, commit=second.commit)
        )
    assert refused.value.code == "bad_request" and node.read() == {**files, "mine.txt": "a user's file\n"}
