"""Provider-native rollback over HTTP through real worker processes (requirements L10.5, issue #7/#8).

The scripted provider remembers the input of each turn of its provider thread; its ``recall`` step answers
with that memory, so a test can read which turns a provider conversation still holds after a rollback.
"""

from __future__ import annotations

import json

import pytest

from tests.support.rollbacks import files, replying, run_to_end
from tests.support.scripts import write
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient

pytestmark = pytest.mark.e2e

RECALL = {"type": "recall"}
ECHO = {"type": "echo"}


def script(*steps: dict, profile: str | None = "native_rollback") -> dict:
    """On the scripted provider's profile that rolls back natively, unless told otherwise."""
    return replying(*steps, profile=profile)


def reply(run: dict) -> str:
    return "\n".join(m["text"] for m in run["messages"] if m["role"] == "assistant" and m["status"] == "completed")


def remembered(run: dict) -> list[str]:
    line = next(t for t in reply(run).split("\n") if t.startswith("Remembered: "))
    return json.loads(line.removeprefix("Remembered: "))


def pth_of(run: dict) -> str:
    return run["attempts"][-1]["provider_thread_id"]


async def three_runs(api, stack, profile: str | None = "native_rollback"):
    thread = await api.create_thread(title="provider rollback")
    workspace = stack.state_dir / "workspaces" / api.tenant / "threads" / thread
    runs = [await run_to_end(api, thread, "one", script(write("keep.txt", "v1\n"), profile=profile))]
    after_run1 = files(workspace)
    runs.append(
        await run_to_end(
            api, thread, "two", script(write("keep.txt", "v2\n"), write("two.txt", "2\n"), profile=profile)
        )
    )
    runs.append(await run_to_end(api, thread, "three", script(RECALL, write("three.txt", "3\n"), profile=profile)))
    assert remembered(runs[2]) == ["one", "two"]  # the provider thread holds the earlier turns
    return thread, workspace, after_run1, runs


async def roll_back(api, thread: str, to: int) -> dict:
    """The answer is read from the log; the thread's projection catches up with it before this returns."""
    r = await api.request("POST", f"/v1/threads/{thread}/rollback", json={"to_run_ordinal": to})
    assert r.status_code == 200, r.text
    rollback = r.json()
    assert rollback["status"] == "completed", rollback
    await api.wait_thread(
        thread,
        lambda d: any(x["id"] == rollback["id"] and x["status"] == "completed" for x in d["rollbacks"]),
        "the rollback projected",
    )
    return rollback


async def test_L10_5_native_rollback_keeps_the_provider_thread_with_only_run_1_and_run_4_builds_on_it(api, stack, log):
    thread, workspace, after_run1, runs = await three_runs(api, stack)
    pth = pth_of(runs[0])
    assert {pth_of(r) for r in runs} == {pth}
    assert (await api.thread(thread))["capabilities"]["rollback"] == "native"

    rollback = await roll_back(api, thread, 1)
    assert rollback["provider_context"] == "rolled_back" and rollback["provider_thread_id"] == pth
    assert rollback["provider_turns"] == 2 and rollback["provider_error"] is None
    assert files(workspace) == after_run1
    doc = await api.thread(thread)
    assert [p["status"] for p in doc["provider_threads"]] == ["active"]
    assert doc["provider_threads"][0]["covered_ordinals"] == [1]
    # Auditable: started, the provider asked (which thread, session, how many turns), completed.
    events = [e for e in await log.read(api.tenant, thread) if e.type.startswith("rollback.")]
    assert [e.type for e in events] == ["rollback.started", "rollback.provider_requested", "rollback.completed"]
    assert (events[1].data.provider_thread_id, events[1].data.turns) == (pth, 2)

    run4 = await run_to_end(api, thread, "four", script(RECALL, ECHO, write("four.txt", "4\n")))
    assert run4["ordinal"] == 4 and pth_of(run4) == pth  # the same provider thread, resumed as it is
    assert remembered(run4) == ["one"]  # run 1's turn only: runs 2 and 3 are gone from the conversation
    assert "Received: four" in reply(run4)  # no handoff: it still has run 1, and must not hear of 2 and 3
    assert run4["handoff_ids"] == []
    assert files(workspace) == {**after_run1, "four.txt": "4\n"}
    doc = await api.thread(thread)
    assert doc["provider_threads"][0]["covered_ordinals"] == [1, 4]


async def test_L10_5_a_released_session_is_resumed_on_a_host_to_roll_its_provider_thread_back(api, stack, stack_nc):
    thread, workspace, after_run1, runs = await three_runs(api, stack)
    pth = pth_of(runs[0])
    doc = await api.thread(thread)
    session = doc["sessions"][-1]
    # The session is let go (as the idle reaper or a host restart would): no runtime holds the thread.
    reply_ = await HostClient(stack_nc, 5.0).verb(
        session["host_id"], "session.stop", hp.StopTurn(session_id=session["id"], attempt_id="")
    )
    assert isinstance(reply_, hp.TurnAccepted)
    await api.wait_thread(thread, lambda d: d["sessions"][-1]["status"] == "stopped", "session stopped")

    rollback = await roll_back(api, thread, 1)
    assert (rollback["provider_context"], rollback["provider_thread_id"], rollback["provider_turns"]) == (
        "rolled_back",
        pth,
        2,
    )
    doc = await api.thread(thread)
    assert doc["sessions"][-1]["status"] == "live" and doc["sessions"][-1]["id"] != session["id"]

    run4 = await run_to_end(api, thread, "four", script(RECALL))
    assert pth_of(run4) == pth and remembered(run4) == ["one"]
    assert run4["attempts"][-1]["session_id"] == doc["sessions"][-1]["id"]  # the session the rollback resumed
    assert files(workspace) == after_run1


async def test_L10_5_a_provider_that_refuses_the_rollback_takes_the_divergent_path_with_its_message(
    api, stack, stack_nc
):
    thread, workspace, after_run1, runs = await three_runs(api, stack)
    pth = pth_of(runs[0])
    session = (await api.thread(thread))["sessions"][-1]
    await HostClient(stack_nc, 5.0).verb(
        session["host_id"], "session.stop", hp.StopTurn(session_id=session["id"], attempt_id="")
    )
    await api.wait_thread(thread, lambda d: d["sessions"][-1]["status"] == "stopped", "session stopped")
    # The provider's own record of the conversation is lost: resumed, it has no turns to drop.
    for memory in (stack.state_dir / "provider-runtimes" / "scripted-threads" / api.tenant).glob("*.jsonl"):
        memory.unlink()

    rollback = await roll_back(api, thread, 1)
    assert rollback["provider_context"] == "divergent"
    assert "has 0 turns, cannot drop 2" in rollback["provider_error"]
    assert files(workspace) == after_run1  # the files are rolled back all the same
    doc = await api.thread(thread)
    assert next(p for p in doc["provider_threads"] if p["id"] == pth)["status"] == "divergent"

    run4 = await run_to_end(api, thread, "four", script(RECALL, ECHO))
    assert pth_of(run4) != pth  # a fresh provider thread, told about the kept run only
    assert remembered(run4) == []
    assert "one" in reply(run4) and "two" not in reply(run4) and "three" not in reply(run4)


async def test_L10_5_a_profile_without_rollback_gets_a_fresh_provider_thread_with_the_kept_runs_context(api, stack):
    thread, workspace, after_run1, runs = await three_runs(api, stack, profile=None)
    pth = pth_of(runs[0])
    assert (await api.thread(thread))["capabilities"]["rollback"] == "fresh_thread"
    rollback = await roll_back(api, thread, 1)
    assert rollback["provider_context"] == "divergent" and rollback["provider_error"] is None
    doc = await api.thread(thread)
    assert [p["status"] for p in doc["provider_threads"]] == ["divergent"]

    run4 = await run_to_end(api, thread, "four", script(RECALL, ECHO, profile=None))
    assert pth_of(run4) != pth and remembered(run4) == []
    handoff = (await api.request("GET", f"/v1/handoffs/{run4['handoff_ids'][0]}")).json()
    assert handoff["strategy"] == "full_thread_summary" and handoff["covered_ordinals"] == [1]
    assert "one" in reply(run4) and "two" not in reply(run4) and "three" not in reply(run4)
    assert files(workspace) == after_run1


async def test_L3_1_L10_5_rollback_active_drops_the_interrupted_runs_turn_from_the_provider_thread(api, stack):
    thread = await api.create_thread(title="rollback_active, native")
    workspace = stack.state_dir / "workspaces" / api.tenant / "threads" / thread
    run1 = await run_to_end(api, thread, "one", script(write("a.txt", "1\n")))
    active = await api.send(thread, "two", script=script(write("a.txt", "2\n"), {"type": "hang"}))
    await api.wait_running(active["run_id"])
    sent = await api.send(thread, "three", mode="rollback_active", script=script(RECALL))
    assert sent["disposition"] == "rolling_back"

    await api.wait_run(active["run_id"], status="rolled_back")
    run3 = await api.wait_run(sent["run_id"])
    assert (workspace / "a.txt").read_text() == "1\n"
    assert pth_of(run3) == pth_of(run1) and remembered(run3) == ["one"]  # the interrupted turn is gone too
    doc = await api.thread(thread)
    [rollback] = doc["rollbacks"]
    assert (rollback["provider_context"], rollback["provider_turns"]) == ("rolled_back", 1)
