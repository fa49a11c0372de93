"""kill -9 of the checkpoint service in the middle of a capture (issue 4 "Tests"): no half-written ref, and
the run still ends with its checkpoint once the service is back."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import nats
import pytest

from tests.support.api import Api
from tests.support.helpers import quiet, wait_for
from treadle.checkpoints.repo import checkpoint_gitdir
from treadle.cli.stack import Stack
from treadle.ops.tokens import TokenStore

pytestmark = pytest.mark.e2e

FILES = 6_000  # enough that `git add -A` runs long enough to be caught in the act


def git(workspace: Path, *args: str, git_dir: Path | None = None) -> str:
    env = dict(os.environ, GIT_DIR=str(git_dir)) if git_dir else None
    return subprocess.run(
        ["git", "-C", str(workspace), *args], capture_output=True, text=True, check=True, env=env
    ).stdout


async def test_L10_2_kill_9_of_the_checkpoint_service_mid_capture_leaves_no_half_ref_and_the_run_still_checkpoints(
    tmp_path,
):
    # A private stack: the supervisor's checkpoint request to the killed service must time out quickly.
    env = {"TREADLE_SUPERVISOR_CHECKPOINT_TIMEOUT": "5"}
    async with Stack(tmp_path / "stack", env=env, on_output=quiet) as stack:
        nc = await nats.connect(stack.nats_url)
        api = Api(stack.api_url, await TokenStore(nc.jetstream()).create("crash", "alice"), "crash")
        try:
            thread = await api.create_thread()
            workspace = stack.state_dir / "workspaces" / "crash" / "threads" / thread
            # The checkpoints are in the service's own git dir for the workspace, not in its .git.
            gitdir = checkpoint_gitdir(stack.state_dir / "shadow", "crash", thread, Path("threads") / thread)
            first = await api.send(
                thread, "one", script={"steps": [{"type": "write_file", "path": "a.txt", "content": "1\n"}]}
            )
            await api.wait_run(first["run_id"])
            bulk = workspace / "bulk"
            bulk.mkdir()
            # A new ignore rule: the capture cannot take the incremental path (which runs in-process and
            # leaves no lock to see) and runs `git add -A` over the whole worktree, the step killed here.
            (workspace / ".gitignore").write_text("*.tmp\n")
            for i in range(FILES):
                (bulk / f"f{i:05d}.txt").write_text(f"{i}\n")

            restarts = stack.processes.restarts("checkpoints")
            second = await api.send(
                thread, "two", script={"steps": [{"type": "write_file", "path": "b.txt", "content": "2\n"}]}
            )
            lock = gitdir / "treadle" / "index.lock"
            await wait_for(lock.exists, timeout=60, interval=0.002, what="git add -A of run 2's capture running")
            await stack.processes.kill("checkpoints")

            refs = git(workspace, "for-each-ref", "--format=%(refname)", git_dir=gitdir)
            assert f"refs/treadle/checkpoints/{thread}/root/2" not in refs
            assert not list((gitdir / "refs" / "treadle").rglob("*.lock"))

            await wait_for(lambda: stack.processes.restarts("checkpoints") > restarts, timeout=30, what="restarted")
            run = await api.wait_run(second["run_id"], timeout=90)
            checkpoint = run["checkpoint"]
            assert checkpoint["status"] == "completed" and checkpoint["ordinal"] == 2
            assert git(workspace, "rev-parse", checkpoint["ref"], git_dir=gitdir).strip() == checkpoint["commit"]
            tree = git(workspace, "ls-tree", "-r", "--name-only", checkpoint["commit"], git_dir=gitdir).split()
            assert len(tree) == FILES + 3 and "b.txt" in tree
            # The event carries the first 1,000 file stats and the count; the diff API has them all.
            assert len(checkpoint["files"]) == 1000 and checkpoint["files_total"] == FILES + 2
            git(workspace, "fsck", "--no-progress", git_dir=gitdir)
            assert not lock.exists()
        finally:
            await api.close()
            await nc.close()
