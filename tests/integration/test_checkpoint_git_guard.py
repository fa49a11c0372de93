"""Issue 16: checkpoint git that agents cannot steer.

A tenant's agent writes its workspace, `.git` included. Each test plants what would make a git that obeys the
workspace run a command (config filters, fsmonitor, hooks, includes, diff drivers, ssh, submodules...) or
transform content (attributes), then drives every checkpoint path — capture (slow and incremental), diff,
restore, retention, fork materialisation — and asserts that no planted command ran (each would `touch` a
marker, and copy another tenant's file into the workspace), that no answer carries foreign bytes, that the
captured blobs are the raw bytes, and that every git child ran as the tenant's uid with an environment
free of the service's secrets (a wrapper `git` records each call).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.integration.checkpoint_repos import TENANT, THREAD, capture, checkpoint_dir, ckpt, git, restore, root  # noqa: F401
from treadle.checkpoints import packs
from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.hydrate import Hydrate
from treadle.checkpoints.materialize import Materialize, MaterializeHandler
from treadle.checkpoints.protocol import DiffRequest, Prune, encode
from treadle.memory import MemoryArchive
from treadle.sandbox.identity import TenantIdentities

FOREIGN = "FOREIGN-TENANT-SECRET-7f3a"
SECRET_ENV = "TREADLE_NATS_URL"
SECRET_VALUE = "nats://treadle:workers-password-9c1e@127.0.0.1:4222"
RAW = b"loot: $Id: keep me $\r\nline two\r\n"


@pytest.fixture
def world(root: Path, monkeypatch):
    """Markers dir (anyone may write: a planted command must be able to leave its trace, whoever runs it),
    another tenant's secret, a recording `git` on the service's PATH, the service's secret in its env."""
    base = root.parent
    markers = base / "markers"
    markers.mkdir()
    os.chmod(markers, 0o777)
    other = root / "other" / "proj"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text(FOREIGN + "\n")
    calls = base / "calls"
    calls.mkdir()
    os.chmod(calls, 0o777)
    wrapper = base / "bin" / "git"
    wrapper.parent.mkdir()
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    wrapper.write_text(f"""#!/bin/sh
f={calls}/call.$$
{{ echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"; env | sed 's/^/env:/'; echo "argv:$*"; }} > "$f"
exec {real} "$@"
""")
    os.chmod(wrapper, 0o755)
    os.chmod(wrapper.parent, 0o755)
    monkeypatch.setenv(SECRET_ENV, SECRET_VALUE)
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='touch {markers}/env-param'")
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", f"sh -c 'touch {markers}/env-extdiff'")
    return {"markers": markers, "foreign": other / "secret.txt", "calls": calls, "git": str(wrapper)}


def command(world, name: str) -> str:
    """A shell command that leaves marker ``name`` and copies the foreign secret into the workspace."""
    return (
        f"sh -c 'touch {world['markers']}/{name}; cat {world['foreign']} > stolen-{name}.txt; cat {world['foreign']}'"
    )


def plant(ws: Path, world) -> None:
    """Everything in the workspace (its .git included) that could make git execute or transform."""
    git(ws, "init", "-q", "-b", "main") if not (ws / ".git").exists() else None
    dotgit = ws / ".git"
    hooks = ws / "evil-hooks"
    hooks.mkdir()
    for d in (dotgit / "hooks", hooks):
        d.mkdir(exist_ok=True)
        for hook in (
            "pre-commit",
            "post-commit",
            "post-checkout",
            "reference-transaction",
            "post-index-change",
            "pre-auto-gc",
            "post-rewrite",
            "fsmonitor-watchman",
            "pre-push",
            "post-merge",
        ):
            (d / hook).write_text(f"#!/bin/sh\n{command(world, 'hook-' + hook)}\n")
            os.chmod(d / hook, 0o755)
    (ws / "included.cfg").write_text(
        f"[core]\n\tpager = {command(world, 'include-pager')}\n"
        f'[filter "y"]\n\tclean = {command(world, "include-clean")}\n'
    )
    other_tenant_tree = world["foreign"].parent
    with open(dotgit / "config", "a") as f:
        f.write(f"""
[core]
\tfsmonitor = {command(world, "fsmonitor")}
\thooksPath = {hooks}
\tsshCommand = {command(world, "ssh")}
\tpager = {command(world, "pager")}
\teditor = {command(world, "editor")}
\taskPass = {command(world, "askpass")}
\talternateRefsCommand = {command(world, "altrefs")}
\tworktree = {other_tenant_tree}
\tattributesFile = {ws / "evil.attributes"}
\tautocrlf = true
[include]
\tpath = {ws / "included.cfg"}
[filter "x"]
\tclean = {command(world, "clean")}
\tsmudge = {command(world, "smudge")}
\tprocess = {command(world, "process")}
\trequired = true
[diff "x"]
\ttextconv = {command(world, "textconv")}
\tcommand = {command(world, "diffcmd")}
[diff]
\texternal = {command(world, "external")}
[merge "x"]
\tdriver = {command(world, "merge")}
[submodule "sub"]
\tupdate = !{command(world, "submodule-update")}
[uploadpack]
\tpackObjectsHook = {command(world, "packobjects")}
[gc]
\tauto = 1
""")
    (ws / "evil.attributes").write_text("* filter=x diff=x\n")
    (ws / ".gitattributes").write_text(
        "[attr]evil filter=x diff=x merge=x\n"
        "loot.txt filter=x diff=x merge=x ident working-tree-encoding=UTF-16 text eol=crlf\n"
        "*.md evil\n"
    )
    (ws / ".gitmodules").write_text(
        f'[submodule "sub"]\n\tpath = sub\n\turl = ext::{command(world, "ext")}\n'
        f"\tupdate = !{command(world, 'gitmodules-update')}\n"
    )
    (dotgit / "info").mkdir(exist_ok=True)
    (dotgit / "info" / "attributes").write_text("* filter=x diff=x\n")
    (dotgit / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (dotgit / "objects" / "info" / "alternates").write_text(str(world["foreign"].parent / ".git" / "objects") + "\n")
    (ws / "loot.txt").write_bytes(RAW)
    (ws / "notes.md").write_text("# notes\n")


def assert_nothing_ran(ws: Path, world) -> None:
    assert sorted(p.name for p in world["markers"].iterdir()) == []
    assert sorted(p.name for p in ws.rglob("stolen-*")) == []


def assert_calls_confined(world, uid: int | None) -> list[str]:
    calls = [p.read_text() for p in world["calls"].iterdir()]
    assert calls, "the recording git was never run"
    for call in calls:
        lines = call.splitlines()
        if uid is not None:
            assert lines[0].startswith(f"uid={uid} gid={uid} groups={uid}"), lines[0]
        names = {line[4:].split("=", 1)[0] for line in lines if line.startswith("env:")}
        assert not any(n.startswith("TREADLE_") for n in names), names
        assert SECRET_VALUE not in call
        assert "GIT_CONFIG_PARAMETERS" not in names and "GIT_EXTERNAL_DIFF" not in names
        allowed = {"PATH", "HOME", "LANG", "LC_ALL", "PWD", "OLDPWD", "SHLVL", "_", "GIT_ASKPASS", "SSH_ASKPASS"}
        assert {n for n in names if not n.startswith("GIT_")} <= allowed, names
    return calls


def blob_id(data: bytes) -> str:
    return packs.object_id(packs.BLOB, data).hex()


@pytest.mark.parametrize("watch", [True, False])
async def test_planted_git_config_hooks_and_attributes_run_nothing_on_any_checkpoint_path(
    root: Path, world, watch: bool
):
    workspaces = Workspaces(root, root.parent / "state" / "shadow", git=world["git"], watch=watch)
    try:
        ws = root / TENANT / "proj"
        ws.mkdir()
        git(ws, "init", "-q", "-b", "main")
        (ws / "tracked.txt").write_text("tracked\n")
        git(ws, "add", "tracked.txt")
        git(ws, "commit", "-q", "-m", "user's own commit")
        plant(ws, world)
        ids = TenantIdentities(root).ids(TENANT)

        await workspaces.prepare(TENANT, THREAD, "proj")
        c0 = await workspaces.capture(capture(0, None))
        # Raw bytes: no clean filter, no ident, no EOL or encoding conversion.
        assert ckpt(ws, "rev-parse", f"{c0.commit}:loot.txt").strip() == blob_id(RAW)
        assert ckpt(ws, "rev-parse", f"{c0.commit}:tracked.txt").strip() == blob_id(b"tracked\n")

        # Incremental (watched) and slow paths alike, including an attribute change (the add -A fallback).
        (ws / "loot.txt").write_bytes(RAW + b"three\r\n")
        c1 = await workspaces.capture(capture(1, 0))
        (ws / ".gitattributes").write_text("*.txt filter=x diff=x ident text eol=crlf\n")
        (ws / "more.txt").write_bytes(b"$Id$\r\n")
        c2 = await workspaces.capture(capture(2, 1))
        assert ckpt(ws, "rev-parse", f"{c1.commit}:loot.txt").strip() == blob_id(RAW + b"three\r\n")
        assert ckpt(ws, "rev-parse", f"{c2.commit}:more.txt").strip() == blob_id(b"$Id$\r\n")

        diff = await workspaces.diff(
            DiffRequest(tenant=TENANT, thread=THREAD, workspace="proj", from_commit=c0.commit, to_commit=c2.commit)
        )
        assert FOREIGN not in diff.patch and "loot.txt" in diff.patch and "three" in diff.patch
        assert {f.path for f in diff.files} >= {"loot.txt", "more.txt", ".gitattributes"}

        (ws / "loot.txt").write_bytes(b"overwritten\n")
        done = await workspaces.restore(restore(c0.commit))
        assert (ws / "loot.txt").read_bytes() == RAW  # no smudge, no EOL or encoding conversion on checkout
        assert not (ws / "more.txt").exists()
        # What the restore wrote is the tenant's.
        assert os.lstat(ws / "loot.txt").st_uid == ids.uid
        assert done.undo_ref.startswith(f"refs/treadle/checkpoints/{THREAD}/undo/")

        pruned = await workspaces.prune(
            Prune(tenant=TENANT, workspace="proj", idle_seconds=0, keep_latest=1, now=10**10)
        )
        assert pruned.deleted
        await workspaces.sweep(idle_seconds=0, keep_latest=1, now=10**10)

        handler = MaterializeHandler.serving(workspaces)
        made = await handler(
            encode(
                Materialize(
                    tenant=TENANT,
                    source_thread=THREAD,
                    source_workspace="proj",
                    commit=c1.commit,
                    thread="thr_fork",
                    workspace="threads/thr_fork",
                )
            )
        )
        fork = Path(made.path)
        assert (fork / "loot.txt").read_bytes() == RAW + b"three\r\n"
        assert os.lstat(fork).st_uid == ids.uid and os.lstat(fork / "loot.txt").st_uid == ids.uid

        assert_nothing_ran(ws, world)
        assert sorted(p.name for p in fork.rglob("stolen-*")) == []
        # The user's repository was never git's git dir: its own config and HEAD are as the agent left them.
        assert not (ws / ".git" / "refs" / "treadle").exists()
        assert b"treadle" not in (
            (ws / ".git" / "packed-refs").read_bytes() if (ws / ".git" / "packed-refs").exists() else b""
        )
        assert_calls_confined(world, ids.uid)
    finally:
        workspaces.close()


async def test_the_tenant_root_and_git_dirs_are_the_tenants_and_closed_to_others(root: Path, world):
    workspaces = Workspaces(root, root.parent / "state" / "shadow", git=world["git"])
    try:
        ready = await workspaces.prepare(TENANT, THREAD, "threads/t1")
        ids = TenantIdentities(root).ids(TENANT)
        top = os.lstat(root / TENANT)
        assert (top.st_uid, top.st_gid, stat.S_IMODE(top.st_mode)) == (ids.uid, ids.gid, 0o700)
        for path in (
            Path(ready.path),
            Path(ready.path) / ".git",
            root / TENANT / "threads",
            checkpoint_dir(Path(ready.path)),
        ):
            assert os.lstat(path).st_uid == ids.uid, path
        shadow_tenant = root.parent / "state" / "shadow" / TENANT
        assert stat.S_IMODE(os.lstat(shadow_tenant).st_mode) == 0o700 and os.lstat(shadow_tenant).st_uid == ids.uid
        # A second tenant gets another uid, and cannot even list the first one's workspaces.
        await workspaces.prepare("rival", THREAD, "proj")
        rival = TenantIdentities(root).ids("rival")
        assert rival.uid != ids.uid
        peek = subprocess.run(
            ["ls", str(root / TENANT)], capture_output=True, text=True, user=rival.uid, group=rival.gid, extra_groups=[]
        )
        assert peek.returncode != 0 and "Permission denied" in peek.stderr
        (Path(ready.path) / "a.txt").write_text("a\n")
        await workspaces.capture(capture(0, None, workspace="threads/t1"))
        assert_calls_confined(world, None)
        uids = {int(c.split()[0][4:]) for c in (p.read_text() for p in world["calls"].iterdir())}
        assert uids == {ids.uid, rival.uid}
    finally:
        workspaces.close()


async def test_a_symlink_in_the_workspace_never_hands_a_file_outside_it_to_the_tenant(root: Path, world):
    workspaces = Workspaces(root, root.parent / "state" / "shadow", git=world["git"])
    try:
        ws = root / TENANT / "proj"
        ws.mkdir()
        (ws / "a.txt").write_text("1\n")
        await workspaces.prepare(TENANT, THREAD, "proj")
        c0 = await workspaces.capture(capture(0, None))
        outside = root.parent / "outside-file"
        outside.write_text("root's\n")
        (ws / "link").symlink_to(outside)
        (ws / "dirlink").symlink_to(root.parent, target_is_directory=True)
        (ws / "a.txt").write_text("2\n")
        os.chown(ws / "a.txt", 0, 0)
        os.chmod(ws / "a.txt", 0o600)  # written by another uid: unreadable to the tenant until handed over
        c1 = await workspaces.capture(capture(1, 0))
        assert ckpt(ws, "rev-parse", f"{c1.commit}:a.txt").strip() == blob_id(b"2\n")
        await workspaces.restore(restore(c0.commit))
        assert (ws / "a.txt").read_text() == "1\n"
        assert os.stat(outside).st_uid == 0 and os.stat(root.parent).st_uid == 0
        assert os.stat(world["foreign"]).st_uid != TenantIdentities(root).ids(TENANT).uid
    finally:
        workspaces.close()


async def test_without_tenant_uids_the_hardened_git_still_runs_nothing_planted(root: Path, world):
    """The service as its own user (a developer's machine): no uid to drop to, the same git dir and settings."""
    workspaces = Workspaces(root, root.parent / "state" / "shadow", git=world["git"], run_as_tenant=False)
    try:
        ws = root / TENANT / "proj"
        ws.mkdir()
        plant(ws, world)
        await workspaces.prepare(TENANT, THREAD, "proj")
        c0 = await workspaces.capture(capture(0, None))
        (ws / "loot.txt").write_bytes(b"changed\n")
        c1 = await workspaces.capture(capture(1, 0))
        diff = await workspaces.diff(
            DiffRequest(tenant=TENANT, thread=THREAD, workspace="proj", from_commit=c0.commit, to_commit=c1.commit)
        )
        await workspaces.restore(restore(c0.commit))
        assert (ws / "loot.txt").read_bytes() == RAW and FOREIGN not in diff.patch
        assert ckpt(ws, "rev-parse", f"{c0.commit}:loot.txt").strip() == blob_id(RAW)
        assert_nothing_ran(ws, world)
        assert_calls_confined(world, None)
    finally:
        workspaces.close()


async def test_hydrate_runs_git_as_the_tenant_and_hands_the_workspace_to_it(root: Path, world):
    """Issue 35: a workspace made from the checkpoint archive is made as prepare makes one: every git as the
    tenant's uid with the hardened environment, every file and git dir the tenant's, the tenant root 0700."""
    archive = MemoryArchive()
    workspaces = Workspaces(root, root.parent / "state" / "shadow", git=world["git"], archive=archive)
    ids = TenantIdentities(root).ids(TENANT)
    try:
        ready = await workspaces.prepare(TENANT, THREAD, "threads/t1")
        (Path(ready.path) / "src").mkdir()
        (Path(ready.path) / "src" / "a.txt").write_text("a\n")
        c0 = await workspaces.capture(capture(0, None, workspace="threads/t1"))
    finally:
        workspaces.close()
    shutil.rmtree(root / TENANT)  # the volume is gone: the tenant root, the workspace, the git dirs
    shutil.rmtree(root.parent / "state" / "shadow" / TENANT)
    for call in world["calls"].iterdir():
        call.unlink()
    workspaces = Workspaces(root, root.parent / "state" / "shadow", git=world["git"], archive=archive)
    try:
        made = await workspaces.hydrate(Hydrate(tenant=TENANT, thread=THREAD, workspace="threads/t1"))
        assert made.created and made.commit == c0.commit
        assert_calls_confined(world, ids.uid)
        top = os.lstat(root / TENANT)
        assert (top.st_uid, stat.S_IMODE(top.st_mode)) == (ids.uid, 0o700)
        for path in (Path(made.path), Path(made.path) / ".git", Path(made.path) / "src" / "a.txt"):
            assert os.lstat(path).st_uid == ids.uid, path
        gitdir = checkpoint_dir(Path(made.path))
        # The service's own files in it (as in every git dir it serves): the neutral attributes and the lock.
        theirs = [p for p in [gitdir, *gitdir.rglob("*")] if p.name not in ("attributes", "lock")]
        assert {os.lstat(p).st_uid for p in theirs} == {ids.uid}
    finally:
        workspaces.close()
