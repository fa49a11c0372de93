"""L3 over HTTP: steering natively or by interrupt-restart, the run-id rule, and the queue."""

from __future__ import annotations

import pytest

from tests.support.scripts import HANG, approval, script, text, tool, write


def user_texts(run: dict) -> list[str]:
    return [m["text"] for m in run["messages"] if m["role"] == "user"]


def replies(run: dict) -> list[str]:
    return [m["text"] for m in run["messages"] if m["role"] == "assistant" and m["status"] == "completed"]


async def test_L3_2_native_steer_during_a_tool_call_joins_the_running_attempt(api):
    thread = await api.create_thread()
    sent = await api.send(thread, "build it", script=script(tool("pytest", delay_ms=400), HANG, profile="full"))
    await api.wait_thread(
        thread, lambda d: any(n["kind"] == "tool" for r in d["runs"] for n in r["nodes"]), "tool running"
    )
    steer = await api.send(thread, "use the fast tests", mode="steer_active", target_run_id=sent["run_id"])
    assert steer["disposition"] == "steered" and steer["run_id"] == sent["run_id"]
    run = await api.wait_run(sent["run_id"])
    assert len(run["attempts"]) == 1  # native: no restart
    assert user_texts(run) == ["build it", "use the fast tests"]
    assert replies(run) == ["Steered: use the fast tests"]


@pytest.mark.parametrize("mode", ["auto", "steer_active", "restart_active"])
async def test_L3_3_steer_without_native_steering_interrupts_and_restarts_the_same_run(api, mode):
    thread = await api.create_thread()
    sent = await api.send(thread, "start", script=script(HANG, profile="no_steering"))
    await api.wait_running(sent["run_id"])
    steer = await api.send(thread, "do this instead", mode=mode, script=script(text("restarted reply")))
    assert steer["disposition"] == "restarting" and steer["run_id"] == sent["run_id"]
    run = await api.wait_run(sent["run_id"])
    first, second = run["attempts"]
    assert (first["status"], second["status"], second["reason"]) == ("interrupted", "completed", "steering_restart")
    assert replies(run) == ["restarted reply"]  # L3.7: only the last attempt completes the run
    nodes = {n["attempt_id"]: n for n in run["nodes"] if n["kind"] == "root_turn"}
    assert nodes[first["id"]]["status"] == "interrupted"  # kept in the graph for audit


async def test_L3_3_restart_active_restarts_even_when_native_steering_exists(api):
    thread = await api.create_thread()
    sent = await api.send(thread, "start", script=script(HANG, profile="full"))
    await api.wait_running(sent["run_id"])
    steer = await api.send(thread, "again", mode="restart_active", script=script(text("fresh")))
    assert steer["disposition"] == "restarting"
    run = await api.wait_run(sent["run_id"])
    assert [a["reason"] for a in run["attempts"]] == ["initial", "steering_restart"]


async def test_L3_4_steer_after_the_run_answered_creates_a_superseding_run(api):
    thread = await api.create_thread()
    sent = await api.send(thread, "start", script=script(text("here is my answer"), HANG, profile="no_steering"))
    await api.wait_thread(
        thread,
        lambda d: any(m["role"] == "assistant" and m["status"] == "completed" for m in d["messages"]),
        "the first answer",
    )
    steer = await api.send(thread, "now refine it", script=script(text("refined")))
    first = await api.wait_run(sent["run_id"], status="interrupted")
    doc = await api.thread(thread)
    second = next(r for r in doc["runs"] if r.get("supersedes_run_id") == sent["run_id"])
    assert first["superseded_by"] == second["id"] and first["checkpoint"] is not None
    done = await api.wait_run(second["id"])
    assert user_texts(done) == ["now refine it"] and replies(done) == ["refined"] and done["ordinal"] == 2
    assert steer["message_id"] == done["message_id"]


async def test_L3_3_two_quick_steers_stay_in_one_run_and_the_last_one_answers(api):
    thread = await api.create_thread()
    sent = await api.send(thread, "start", script=script(HANG, profile="no_steering"))
    await api.wait_running(sent["run_id"])
    # The second steer may reach the first restart before or after it started: either way one run answers it.
    await api.send(thread, "first correction", script=script(HANG))
    await api.send(thread, "second correction", script=script(text("both taken")))
    run = await api.wait_run(sent["run_id"])
    assert user_texts(run) == ["start", "first correction", "second correction"]
    assert run["attempts"][-1]["reason"] == "steering_restart" and replies(run) == ["both taken"]
    doc = await api.thread(thread)
    assert len(doc["runs"]) == 1 and not any(m["role"] == "user" and not m["delivered"] for m in doc["messages"])


@pytest.mark.parametrize("profile, attempts", [("full", 1), ("no_steering", 2)])
async def test_L3_2_L3_3_steer_while_an_approval_is_pending(api, profile, attempts):
    thread = await api.create_thread()
    sent = await api.send(thread, "deploy", script=script(approval("deploy now?"), text("deployed"), profile=profile))
    request = await api.wait_request(thread)
    await api.send(thread, "wait, stage first", script=script(text("staged")))
    if profile == "full":  # native: the turn still waits for its answer, then takes the steer
        await api.post(f"/v1/requests/{request['id']}/respond", {"decision": "accept"}, expect=200)
    run = await api.wait_run(sent["run_id"])
    assert len(run["attempts"]) == attempts
    doc = await api.thread(thread)
    assert next(r for r in doc["requests"] if r["id"] == request["id"])["status"] == (
        "resolved" if profile == "full" else "cancelled"
    )


async def test_L3_5_an_explicit_new_turn_queues_even_when_steering_is_possible(api):
    thread = await api.create_thread()
    sent = await api.send(thread, "start", script=script(HANG, profile="full"))
    queued = await api.send(thread, "next task", mode="queue_after_active")
    assert queued["disposition"] == "queued" and queued["run_id"] != sent["run_id"]
    await api.post(f"/v1/runs/{sent['run_id']}/interrupt", expect=202)
    await api.wait_run(queued["run_id"])


async def test_L3_1_reject_refuses_while_a_run_is_active_and_changes_nothing(api):
    thread = await api.create_thread()
    sent = await api.send(thread, "start", script=script(HANG))
    before = (await api.request("GET", f"/v1/threads/{thread}?min_seq={sent['seq']}")).json()
    r = await api.request("POST", f"/v1/threads/{thread}/messages", json={"text": "x", "mode": "reject"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "run_active"
    after = await api.thread(thread)
    assert len(after["messages"]) == len(before["messages"]) and len(after["runs"]) == 1
    await api.post(f"/v1/runs/{sent['run_id']}/interrupt", expect=202)


async def test_L3_1_start_immediately_interrupts_the_active_run_and_starts_before_the_queue(api):
    thread = await api.create_thread()
    active = await api.send(thread, "long", script=script(HANG))
    queued = await api.send(thread, "later", mode="queue_after_active")
    now = await api.send(thread, "urgent", mode="start_immediately")
    assert now["disposition"] == "preempting"
    await api.wait_run(active["run_id"], status="interrupted")
    urgent, later = await api.wait_run(now["run_id"]), await api.wait_run(queued["run_id"])
    assert urgent["ordinal"] == 3 and urgent["started_at"] < later["started_at"]


async def test_L3_6_queue_of_five_with_one_cancelled_two_reordered_and_one_edited(api):
    thread = await api.create_thread()
    active = await api.send(thread, "long", script=script(HANG))
    sent = [await api.send(thread, f"task {i}", mode="queue_after_active") for i in range(5)]
    runs = [s["run_id"] for s in sent]
    listed = (await api.request("GET", f"/v1/threads/{thread}/queue?min_seq={sent[-1]['seq']}")).json()
    assert [q["run_id"] for q in listed["queue"]] == runs and listed["active_run_id"] == active["run_id"]
    r = await api.request("DELETE", f"/v1/threads/{thread}/queue/{runs[2]}")
    assert r.status_code == 200, r.text
    order = [runs[0], runs[1], runs[4], runs[3]]
    r = await api.request("PATCH", f"/v1/threads/{thread}/queue", json={"order": order})
    assert r.status_code == 200, r.text
    stale = await api.request("PATCH", f"/v1/threads/{thread}/queue", json={"order": runs})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "queue_changed"
    r = await api.request("PATCH", f"/v1/threads/{thread}/queue/{runs[1]}", json={"text": "task 1, edited"})
    assert r.status_code == 200, r.text
    listed = (await api.request("GET", f"/v1/threads/{thread}/queue?min_seq={r.json()['seq']}")).json()
    assert [q["run_id"] for q in listed["queue"]] == order and listed["queue"][1]["text"] == "task 1, edited"
    await api.post(f"/v1/runs/{active['run_id']}/interrupt", expect=202)
    done = [await api.wait_run(run_id) for run_id in order]
    for earlier, later in zip(done, done[1:]):  # one at a time, in the new order
        assert earlier["ended_at"] <= later["started_at"]
    assert (await api.run(runs[2]))["status"] == "cancelled"
    assert user_texts(done[1]) == ["task 1, edited"]
    gone = await api.request("DELETE", f"/v1/threads/{thread}/queue/{runs[0]}")
    assert gone.status_code == 409 and gone.json()["error"]["code"] == "run_not_queued"


async def test_L3_7_only_the_last_attempt_completes_the_run_and_gets_its_checkpoint(api):
    thread = await api.create_thread()
    sent = await api.send(thread, "start", script=script(HANG, profile="no_steering"))
    await api.wait_running(sent["run_id"])
    await api.send(thread, "change of plan", script=script(text("done")))
    run = await api.wait_run(sent["run_id"])
    doc = await api.thread(thread)
    checkpoints = [c for c in doc["checkpoints"] if c["run_id"] == sent["run_id"]]
    assert len(checkpoints) == 1 and run["checkpoint_id"] == checkpoints[0]["id"]
    assert [a["status"] for a in run["attempts"]] == ["interrupted", "completed"]
    assert all(m["attempt_id"] == run["attempts"][-1]["id"] for m in run["messages"] if m["role"] == "assistant")


async def test_L4_1_a_follow_up_run_reuses_the_provider_thread_with_a_new_root_node(api):
    thread = await api.create_thread()
    first = await api.wait_run((await api.send(thread, "one"))["run_id"])
    second = await api.wait_run((await api.send(thread, "two"))["run_id"])
    assert (first["ordinal"], second["ordinal"]) == (1, 2)
    assert first["attempts"][0]["provider_thread_id"] == second["attempts"][0]["provider_thread_id"]
    assert first["attempts"][0]["root_node_id"] != second["attempts"][0]["root_node_id"]
    doc = await api.thread(thread)
    assert len(doc["provider_threads"]) == 1 and doc["provider_threads"][0]["covered_ordinals"] == [1, 2]


@pytest.mark.parametrize("how", ["rollback_active", "rollback_interrupting_first"])
async def test_L3_1_L10_5_rolling_back_the_active_run_interrupts_it_restores_its_baseline_then_continues(
    api, stack, how
):
    thread = await api.create_thread()
    workspace = stack.state_dir / "workspaces" / api.tenant / "threads" / thread
    await api.wait_run((await api.send(thread, "one", script=script(write("a.txt", "1\n"))))["run_id"])
    active = await api.send(thread, "two", script=script(write("a.txt", "2\n"), HANG))
    await api.wait_running(active["run_id"])
    if how == "rollback_active":
        sent = await api.send(thread, "three", mode="rollback_active", script=script(text("on run 1's files")))
        assert sent["disposition"] == "rolling_back"
        follow = sent["run_id"]
    else:
        r = await api.request(
            "POST", f"/v1/threads/{thread}/rollback", json={"to_run_ordinal": 1, "interrupt_active": True}
        )
        assert r.status_code == 200 and r.json()["status"] == "in_progress", r.text  # waits for the interrupt
        follow = (await api.send(thread, "three", script=script(text("on run 1's files"))))["run_id"]
    await api.wait_run(active["run_id"], status="rolled_back")
    done = await api.wait_run(follow)
    assert (workspace / "a.txt").read_text() == "1\n" and done["ordinal"] == 3
    doc = await api.thread(thread)
    assert doc["rollbacks"][0]["status"] == "completed" and doc["rollbacks"][0]["rolled_back_run_ids"] == [
        active["run_id"]
    ]
