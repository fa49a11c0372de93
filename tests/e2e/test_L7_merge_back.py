"""L7 merge-back over HTTP, with the scripted provider: a message on the source thread brings a fork's results
home as a recorded transfer and a delta handoff, built when its run starts (L7.1), saying what changed after the
fork point and nothing else (L7.2)."""

from __future__ import annotations

from tests.support.lineage import ECHO, NOISE, assert_projection_is_the_fold, fork, handoff, history, reply, send_done
from tests.support.scripts import HANG, approval, question, script, text, write

LONG = "word " * 2_000  # far longer than any part of a handoff may be


async def _forked(api) -> tuple[str, dict, str]:
    """A source thread with one run (app.py, util.py) and a fork from it: (source, its run, the fork)."""
    source = await api.create_thread(title="main line")
    base = await send_done(
        api,
        source,
        "set up the project",
        script=script(write("app.py", "db = None\n"), write("util.py", "u = 1\n"), text("The project is set up.")),
    )
    child = (await fork(api, source, {"type": "run", "id": base["id"]}, title="try a database"))["thread_id"]
    return source, base, child


async def _answer_next(api, thread: str, response: dict, besides: tuple[str, ...] = ()) -> dict:
    def pending(doc: dict) -> dict | None:
        return next((r for r in doc["requests"] if r["status"] == "pending" and r["id"] not in besides), None)

    request = await api.wait_thread(thread, pending, f"a pending request on {thread}")
    await api.post(f"/v1/requests/{request['id']}/respond", response, expect=200)
    return request


async def test_L7_merge_back_carries_files_tests_and_open_questions_without_protocol_noise(api, log):
    source = await api.create_thread(title="main line")
    base = await send_done(
        api, source, "set up the project", script=script(write("app.py", "print('app')\n"), text("set up"))
    )
    child = (await fork(api, source, {"type": "run", "id": base["id"]}, title="try a cache"))["thread_id"]
    await send_done(
        api,
        child,
        "add a cache layer",
        script=script(
            write("cache.py", "CACHE = {}\n\ndef get(k):\n    return CACHE.get(k)\n"),
            {
                "type": "tool",
                "name": "shell",
                "input": {"command": "pytest -q tests/test_cache.py"},
                "output": "3 passed in 0.02s",
            },
            text("The cache works.\nShould entries expire after an hour?"),
            profile="full",
        ),
    )
    fork_before = history(await api.thread(child))
    source_before = history(await api.thread(source))

    r = await api.request(
        "POST", f"/v1/threads/{source}/messages", json={"text": "bring the cache work home", "merge_back_from": source}
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "not_a_fork"

    merged = await send_done(api, source, "bring the cache work home", merge_back_from=child, script=script(ECHO))
    [hid] = merged["handoff_ids"]
    delta = await handoff(api, hid)
    assert (delta["strategy"], delta["source_thread_id"], delta["covered_ordinals"]) == ("merge_back", child, [1])
    assert "cache.py (added, +4 -0)" in delta["text"]  # files changed with stats
    assert "shell `pytest -q tests/test_cache.py` → completed: 3 passed" in delta["text"]  # tests and outcome
    assert "Open questions: Should entries expire after an hour?" in delta["text"]
    assert "set up the project" not in delta["text"]  # only what happened after the fork point
    assert not NOISE.search(delta["text"]), NOISE.search(delta["text"])
    assert reply(merged) == f"Received: {delta['text']}\n\n---\n\nbring the cache work home"

    doc = await api.thread(source)
    transfer = next(t for t in doc["transfers"] if t["type"] == "merge_back")
    assert transfer["status"] == "consumed" and transfer["handoff_id"] == hid
    assert transfer["base_point"]["run_id"] == base["id"] and transfer["source_point"]["thread_id"] == child
    assert history(await api.thread(child)) == fork_before
    after = history(doc)
    assert after["runs"][:1] == source_before["runs"] and after["checkpoints"][:2] == source_before["checkpoints"]

    # Nothing new in the fork since: a second merge has nothing to bring.
    r = await api.request("POST", f"/v1/threads/{source}/messages", json={"text": "again", "merge_back_from": child})
    assert r.status_code == 409 and r.json()["error"]["code"] == "nothing_to_merge"

    tree = (await api.request("GET", f"/v1/threads/{child}/lineage")).json()
    assert tree["root_thread_id"] == source and tree["tree"]["thread_id"] == source
    assert [c["thread_id"] for c in tree["tree"]["children"]] == [child]
    assert tree["tree"]["children"][0]["relationship"] == "fork"
    await assert_projection_is_the_fold(api, log, source)
    await assert_projection_is_the_fold(api, log, child)


async def test_L7_1_a_merge_back_message_records_its_transfer_and_the_delta_is_built_when_its_run_starts(api, log):
    source, base, child = await _forked(api)
    done = await send_done(api, child, "add a database", script=script(write("db.py", "DB = 'pg'\n"), text("db added")))
    busy = await api.send(source, "keep working", script=script(text("working"), HANG))
    await api.wait_running(busy["run_id"])

    # Accepted behind the active run: the transfer is recorded with the message, from the fork point S to the
    # fork's last finished run F; nothing is summarised yet.
    sent = await api.send(source, "bring the database home", merge_back_from=child, script=script(ECHO))
    assert sent["disposition"] == "queued"
    doc = await api.wait_thread(
        source,
        lambda d: d if any(t["type"] == "merge_back" for t in d["transfers"]) else None,
        "the merge-back transfer",
    )
    [transfer] = [t for t in doc["transfers"] if t["type"] == "merge_back"]
    assert (transfer["status"], transfer["run_id"], transfer["source_thread_id"]) == ("pending", sent["run_id"], child)
    assert (
        transfer["base_point"]["thread_id"],
        transfer["base_point"]["run_id"],
        transfer["base_point"]["ordinal"],
    ) == (source, base["id"], 1)
    assert (
        transfer["source_point"]["thread_id"],
        transfer["source_point"]["run_id"],
        transfer["source_point"]["ordinal"],
    ) == (child, done["id"], 1)
    assert transfer["handoff_id"] is None and doc["handoffs"] == []

    # The fork goes on meanwhile: that run came after F, so it is not part of this merge.
    later = await send_done(
        api, child, "add an index", script=script(write("index.py", "I = 1\n"), text("index added"))
    )
    await api.post(f"/v1/runs/{busy['run_id']}/interrupt", expect=202)
    await api.wait_run(busy["run_id"], "interrupted")
    merged = await api.wait_run(sent["run_id"])

    # Built when the run started, stored, and injected with that message alone.
    [hid] = merged["handoff_ids"]
    delta = await handoff(api, hid)
    assert (delta["strategy"], delta["run_id"], delta["source_thread_id"], delta["covered_ordinals"]) == (
        "merge_back",
        merged["id"],
        child,
        [1],
    )
    assert delta["transfer_id"] == transfer["id"] and delta["delivered"]
    assert "db.py (added, +1 -0)" in delta["text"] and "index.py" not in delta["text"]
    assert reply(merged) == f"Received: {delta['text']}\n\n---\n\nbring the database home"
    interrupted = await api.run(busy["run_id"])
    assert interrupted["handoff_ids"] == [] and "db.py" not in reply(interrupted)
    doc = await api.thread(source)
    [transfer] = [t for t in doc["transfers"] if t["type"] == "merge_back"]
    assert (transfer["status"], transfer["handoff_id"]) == ("consumed", hid)

    # The next merge starts where this one ended: only the fork's later run.
    again = await send_done(api, source, "and the index", merge_back_from=child, script=script(ECHO))
    second = await handoff(api, again["handoff_ids"][0])
    assert second["covered_ordinals"] == [later["ordinal"]] == [2]
    assert "index.py (added, +1 -0)" in second["text"] and "db.py" not in second["text"]
    await assert_projection_is_the_fold(api, log, source)


async def test_L7_2_the_delta_has_decisions_files_commands_and_outcomes_conclusions_and_open_questions_only(api):
    source, base, child = await _forked(api)
    sent = await api.send(
        child,
        "switch the app to a database " + LONG,
        script=script(
            question("which database?", ["pg", "sqlite"]),
            approval("run the migrations?"),
            write("app.py", "db = 'pg'\n"),
            write("db.py", "DB = 'pg'\n"),
            {
                "type": "tool",
                "name": "shell",
                "input": {"command": "pytest -q"},
                "output": "1 failed, 2 passed\n" + LONG,
                "status": "failed",
            },
            {"type": "tool", "name": "shell", "input": {"command": "ruff check ."}, "output": "All checks passed!"},
            text("Conclusion: pg it is; the failing test is a flaky fixture.\nShould old rows be migrated?"),
            profile="full",
        ),
    )
    asked = await _answer_next(api, child, {"answers": {"0": "pg"}})
    await _answer_next(api, child, {"decision": "accept"}, besides=(asked["id"],))
    await api.wait_run(sent["run_id"])
    fork_before = history(await api.thread(child))

    merged = await send_done(api, source, "bring it home", merge_back_from=child, script=script(ECHO))
    delta = (await handoff(api, merged["handoff_ids"][0]))["text"]
    assert 'Decisions: asked "which database?" → answered pg; command approval "run the migrations?" → accept' in delta
    assert "Files changed: app.py (modified, +1 -1), db.py (added, +1 -0)" in delta
    assert (
        "shell `pytest -q` → failed: 1 failed, 2 passed" in delta
        and "shell `ruff check .` → completed: All checks passed!" in delta
    )
    assert "Conclusion: pg it is; the failing test is a flaky fixture." in delta
    assert "Open questions: Should old rows be migrated?" in delta
    # What changed after the fork point only: nothing of the source's own run before it.
    assert "set up the project" not in delta and "util.py" not in delta and "The project is set up." not in delta
    # No protocol noise and no transcript: ids, refs and raw output stay out, long texts are cut short.
    assert not NOISE.search(delta), NOISE.search(delta)
    assert LONG not in delta and delta.count("word") < 400 and len(delta) < 3_000
    assert '"type"' not in delta and "chunk" not in delta
    assert history(await api.thread(child)) == fork_before  # the fork is read, never changed
