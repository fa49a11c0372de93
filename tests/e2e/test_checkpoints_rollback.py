"""Checkpoints, diffs and rollbacks over HTTP through real worker processes (requirements L10; issue 9 item 6)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import wait_for
from tests.support.rollbacks import files, replying, run_to_end
from tests.support.scripts import write

pytestmark = pytest.mark.e2e


def user_git_state(workspace: Path) -> dict[str, str]:
    git = workspace / ".git"
    return {
        f: hashlib.sha256((git / f).read_bytes()).hexdigest()
        for f in ("HEAD", "index", "refs/heads/main", "refs/stash")
        if (git / f).is_file()
    }


def run_git(workspace: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="U", GIT_AUTHOR_EMAIL="u@x", GIT_COMMITTER_NAME="U", GIT_COMMITTER_EMAIL="u@x")
    return subprocess.run(
        ["git", "-C", str(workspace), *args], env=env, capture_output=True, text=True, check=True
    ).stdout


async def test_L10_5_three_runs_rolled_back_to_run_1_then_continued_gives_run_4_on_run_1_files(api, stack):
    thread = await api.create_thread(title="rollback")
    workspace = stack.workspace_of(api.tenant, thread)
    await run_to_end(
        api,
        thread,
        "one",
        replying(write("keep.txt", "v1\n"), write("old.txt", "rename me\n"), write("gone.txt", "delete me\n")),
    )
    after_run1 = files(workspace)
    # The user commits run 1's work and stashes an experiment: none of that may move.
    run_git(workspace, "add", "-A")
    run_git(workspace, "commit", "-q", "-m", "run 1")
    (workspace / "keep.txt").write_text("stashed\n")
    run_git(workspace, "stash", "-q")
    user_before = user_git_state(workspace)

    # Run 2 modifies, creates, deletes and renames (the deletion and rename are the user's, between runs:
    # they land in run 2's checkpoint, the next capture).
    (workspace / "gone.txt").unlink()
    (workspace / "old.txt").rename(workspace / "new.txt")
    run2 = await run_to_end(api, thread, "two", replying(write("keep.txt", "v2\n"), write("src/added.py", "x = 2\n")))
    assert {(f["path"], f["change"]) for f in run2["checkpoint"]["files"]} == {
        ("keep.txt", "modified"),
        ("src/added.py", "added"),
        ("gone.txt", "deleted"),
        ("new.txt", "renamed"),
    }
    run3 = await run_to_end(api, thread, "three", replying(write("third.txt", "3\n")))

    r = await api.request("POST", f"/v1/threads/{thread}/rollback", json={"to_run_ordinal": 1})
    assert r.status_code == 200, r.text
    rollback = r.json()
    assert rollback["status"] == "completed" and rollback["kind"] == "thread" and rollback["to_run_ordinal"] == 1
    assert sorted(rollback["rolled_back_run_ids"]) == sorted([run2["id"], run3["id"]])
    assert rollback["provider_context"] == "divergent" and rollback["touches_parent_workspace"] is True
    assert files(workspace) == after_run1
    assert user_git_state(workspace) == user_before

    doc = await api.thread(thread)
    assert [run["status"] for run in doc["runs"]] == ["completed", "rolled_back", "rolled_back"]
    assert {c["ordinal"] for c in doc["checkpoints"] if c["stale"]} == {2, 3}
    assert [x["id"] for x in doc["rollbacks"]] == [rollback["id"]]
    old_threads = {p["id"] for p in doc["provider_threads"]}
    assert all(p["status"] == "divergent" for p in doc["provider_threads"])
    types = [e.type for e in await _log(stack, api, thread)]
    assert types.index("rollback.started") < types.index("rollback.completed")

    run4 = await run_to_end(api, thread, "four", replying(write("fourth.txt", "4\n")))
    assert run4["ordinal"] == 4
    assert files(workspace) == {**after_run1, "fourth.txt": "4\n"}
    assert [(f["path"], f["change"]) for f in run4["checkpoint"]["files"]] == [("fourth.txt", "added")]
    diff = (await api.request("GET", f"/v1/runs/{run4['id']}/diff")).json()
    assert diff["from"]["ordinal"] == 3 and "+4" in diff["patch"] and not diff["truncated"]
    doc = await api.thread(thread)
    assert doc["runs"][-1]["attempts"][-1]["provider_thread_id"] not in old_threads  # a fresh provider thread
    assert user_git_state(workspace) == user_before


async def _log(stack, api, thread):
    import nats

    from treadle.eventlog.log import EventLog

    nc = await nats.connect(stack.nats_url)
    try:
        return await EventLog(nc).read(api.tenant, thread)
    finally:
        await nc.close()


async def test_diff_of_a_run_and_between_ordinals_with_stats_and_a_size_cap(api):
    thread = await api.create_thread()
    await run_to_end(api, thread, "one", replying(write("a.txt", "a\n")))
    big = "".join(f"line {i}\n" for i in range(3000))
    run2 = await run_to_end(api, thread, "two", replying(write("a.txt", "a\nb\n"), write("big.txt", big)))

    r = await api.request("GET", f"/v1/runs/{run2['id']}/diff")
    assert r.status_code == 200, r.text
    diff = r.json()
    assert (diff["from"]["ordinal"], diff["to"]["ordinal"], diff["run_id"]) == (1, 2, run2["id"])
    assert {f["path"]: (f["change"], f["added"], f["removed"]) for f in diff["files"]} == {
        "a.txt": ("modified", 1, 0),
        "big.txt": ("added", 3000, 0),
    }
    assert not diff["truncated"] and "+line 2999" in diff["patch"]

    cut = (
        await api.request("GET", f"/v1/threads/{thread}/diff", params={"from": 0, "to": 2, "max_bytes": 2048})
    ).json()
    assert cut["truncated"] and len(cut["patch"].encode()) <= 2048 and cut["patch_bytes"] > 2048
    assert {f["path"] for f in cut["files"]} == {"a.txt", "big.txt"}

    bad = await api.request("GET", f"/v1/threads/{thread}/diff", params={"from": 2, "to": 1})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_range"
    missing = await api.request("GET", f"/v1/threads/{thread}/diff", params={"to": 9})
    assert missing.status_code == 409 and missing.json()["error"]["code"] == "checkpoint_unavailable"


async def test_L10_5_rollback_is_refused_while_a_run_is_active_and_changes_nothing(api, stack):
    thread = await api.create_thread()
    await run_to_end(api, thread, "one", replying(write("a.txt", "1\n")))
    sent = await api.send(thread, "hang", script={"steps": [write("a.txt", "2\n"), {"type": "hang"}]})
    await wait_for(lambda: api.run(sent["run_id"]), what="run visible")

    refused = await api.request("POST", f"/v1/threads/{thread}/rollback", json={"to_run_ordinal": 1})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run_active"
    out_of_range = await api.request("POST", f"/v1/threads/{thread}/rollback", json={"to_run_ordinal": 7})
    assert out_of_range.status_code == 400 and out_of_range.json()["error"]["code"] == "invalid_ordinal"
    doc = await api.thread(thread)
    assert doc["rollbacks"] == [] and doc["runs"][0]["status"] == "completed"


@pytest.mark.parametrize("workspace", ["../elsewhere", "/etc", "a/../../b"])
async def test_path_safety_workspaces_outside_the_tenant_root_are_refused(api, workspace):
    r = await api.request("POST", "/v1/threads", json={"workspace": workspace})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_workspace"


NESTED = {
    "steps": [
        write("root.txt", "before the subagent\n"),
        {
            "type": "subagent",
            "title": "helper",
            "steps": [
                write("sub.txt", "by the subagent\n"),
                {"type": "subagent", "title": "nested helper", "steps": [write("deep.txt", "nested\n")]},
            ],
        },
        write("after.txt", "after the subagent\n"),
        {"type": "text", "text": "done"},
    ]
}


async def test_L10_3_subagents_get_child_scopes_that_never_advance_the_run_count(api, stack):
    thread = await api.create_thread()
    run = await run_to_end(api, thread, "delegate", NESTED)
    doc = await api.thread(thread)
    assert [r["ordinal"] for r in doc["runs"]] == [1]
    helper = next(n for n in run["nodes"] if n["title"] == "helper")
    nested = next(n for n in run["nodes"] if n["title"] == "nested helper")
    children = {(c["scope"], c["ordinal"]): c for c in doc["checkpoints"] if c["scope"] != "root"}
    outer, inner = f"root/{helper['id']}", f"root/{helper['id']}/{nested['id']}"
    assert set(children) == {(outer, 0), (outer, 1), (inner, 0), (inner, 1)}
    assert {c["kind"] for k, c in children.items() if k[1] == 0} == {"baseline"}
    # Each scope's diff is what happened while that subagent ran: not the parent's earlier or later writes.
    assert sorted(f["path"] for f in children[(outer, 1)]["files"]) == ["deep.txt", "sub.txt"]
    assert [f["path"] for f in children[(inner, 1)]["files"]] == ["deep.txt"]
    assert children[(outer, 1)]["node_id"] == helper["id"]
    root = run["checkpoint"]
    assert root["scope"] == "root" and root["ordinal"] == 1
    assert {c["scope"]: c["files"] for c in root["children"]} == {outer: 2, inner: 1}
    assert sorted(f["path"] for f in root["files"]) == ["after.txt", "deep.txt", "root.txt", "sub.txt"]


async def test_L10_6_rolling_back_a_subagent_restores_its_baseline_and_says_it_touches_the_parent(api, stack):
    thread = await api.create_thread()
    workspace = stack.state_dir / "workspaces" / api.tenant / "threads" / thread
    run = await run_to_end(api, thread, "delegate", NESTED)
    helper = next(n for n in run["nodes"] if n["title"] == "helper")
    doc = await api.thread(thread)
    baseline = next(c for c in doc["checkpoints"] if c["node_id"] == helper["id"] and c["ordinal"] == 0)

    r = await api.request("POST", f"/v1/nodes/{helper['id']}/rollback", json={"checkpoint_id": baseline["id"]})
    assert r.status_code == 200, r.text
    rollback = r.json()
    assert rollback["kind"] == "node" and rollback["node_id"] == helper["id"] and rollback["status"] == "completed"
    assert rollback["touches_parent_workspace"] is True
    assert files(workspace) == {"root.txt": "before the subagent\n"}
    doc = await api.thread(thread)
    recorded = next(x for x in doc["rollbacks"] if x["id"] == rollback["id"])
    assert recorded["touches_parent_workspace"] is True
    stale = {(c["scope"], c["ordinal"]) for c in doc["checkpoints"] if c["stale"]}
    assert ("root", 1) in stale and (f"root/{helper['id']}", 1) in stale
    assert (f"root/{helper['id']}", 0) not in stale

    wrong = await api.request(
        "POST", f"/v1/nodes/{helper['id']}/rollback", json={"checkpoint_id": run["checkpoint"]["id"]}
    )
    assert wrong.status_code == 404 and wrong.json()["error"]["code"] == "checkpoint_not_found"
    unknown = await api.request(
        "POST", "/v1/nodes/node_" + "0" * 26 + "/rollback", json={"checkpoint_id": baseline["id"]}
    )
    assert unknown.status_code == 404
    malformed = await api.request("POST", "/v1/nodes/node_nope/rollback", json={"checkpoint_id": baseline["id"]})
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid_id"


async def test_client_diff_and_rollback_methods(api, stack):
    from treadle.client.http import ApiError, TreadleClient

    thread = await api.create_thread()
    await run_to_end(api, thread, "one", replying(write("a.txt", "1\n")))
    run2 = await run_to_end(api, thread, "two", replying(write("a.txt", "2\n")))
    async with TreadleClient(stack.api_url, api.token) as client:
        cut = await client.run_diff(run2["id"], max_bytes=40)
        assert cut["truncated"] and [f["path"] for f in cut["files"]] == ["a.txt"]
        between = await client.thread_diff(thread, from_ordinal=0, to_ordinal=2)
        assert between["from"]["ordinal"] == 0 and "+2" in between["patch"]
        done = await client.rollback(thread, 1, idempotency_key="rb-1")
        again = await client.rollback(thread, 1, idempotency_key="rb-1")
        assert done["status"] == "completed" and again["id"] == done["id"]
        with pytest.raises(ApiError) as refused:
            await client.rollback_node("node_" + "0" * 26, "ckpt_" + "0" * 26, thread_id=thread)
        assert refused.value.status == 404


async def test_L10_4_a_failed_run_is_captured_with_a_status_that_says_so(api, stack):
    thread = await api.create_thread()
    sent = await api.send(
        thread,
        "fail",
        script={"steps": [write("half.txt", "written before the failure\n"), {"type": "fail", "message": "boom"}]},
    )
    run = await api.wait_run(sent["run_id"], status="failed")
    checkpoint = run["checkpoint"]
    assert checkpoint["status"] == "failed" and checkpoint["commit"]
    assert [(f["path"], f["change"]) for f in checkpoint["files"]] == [("half.txt", "added")]
    # A failed run's checkpoint is a stable point: a rollback to it (or past it) works like any other.
    r = await api.request("POST", f"/v1/threads/{thread}/rollback", json={"to_run_ordinal": 0})
    assert r.status_code == 200 and r.json()["rolled_back_run_ids"] == [run["id"]]
    workspace = stack.state_dir / "workspaces" / api.tenant / "threads" / thread
    assert files(workspace) == {}
