"""Workspaces are a cache of the checkpoint archive (issue 35): a thread's workspace directory and its git dir
deleted between two runs (an evicted workspace, a lost disk) come back from the archive before the next run's
provider works in them, through the real worker processes and the broker's Object Store."""

from __future__ import annotations

import shutil

import pytest

from tests.support.rollbacks import files, replying, run_to_end
from tests.support.scripts import write

pytestmark = pytest.mark.e2e


async def test_a_deleted_workspace_is_hydrated_and_the_next_run_sees_its_files(api, stack):
    thread = await api.create_thread(title="hydrate")
    workspace = stack.state_dir / "workspaces" / api.tenant / "threads" / thread
    run1 = await run_to_end(api, thread, "one", replying(write("keep.txt", "v1\n"), write("src/lib.py", "x = 1\n")))
    assert run1["status"] == "completed"
    after_run1 = files(workspace)
    assert after_run1 == {"keep.txt": "v1\n", "src/lib.py": "x = 1\n"}

    shutil.rmtree(workspace)
    shutil.rmtree(stack.state_dir / "shadow" / api.tenant)  # its checkpoints' git dir too: only the archive has them

    run2 = await run_to_end(api, thread, "two", replying(write("new.txt", "v2\n")))
    assert run2["status"] == "completed"
    # The run worked on run 1's files: its checkpoint adds one file to them, and deletes none.
    assert {(f["path"], f["change"]) for f in run2["checkpoint"]["files"]} == {("new.txt", "added")}
    assert files(workspace) == {**after_run1, "new.txt": "v2\n"}
