"""L5 provider switching and L6 fork over HTTP, with the scripted provider (L7 merge-back: test_L7_merge_back.py).

Two providers: ``scripted`` and ``scripted-b`` are two provider names served by the same scripted adapter,
so switching between them goes through exactly the orchestration a Codex ↔ Claude switch does (capabilities,
provider threads, coverage, handoffs) without real runtimes. The ``echo`` step answers with the turn's whole
input, which is how these tests see the context a provider was given.
"""

from __future__ import annotations

import pytest

from tests.support.lineage import (
    ECHO,
    assert_projection_is_the_fold,
    fork,
    handoff,
    history,
    pth_of,
    reply,
    send_done,
    workspace,
)
from tests.support.rollbacks import files
from tests.support.scripts import HANG, approval, script, subagent, text, write

# --- L5 provider switching --------------------------------------------------------------------------------


async def test_L5_1_another_provider_for_the_next_run_is_a_handoff_on_the_same_thread_no_fork_no_rewrite(
    api, stack, log
):
    thread = await api.create_thread(title="one thread, two providers")
    first = await send_done(
        api, thread, "write the parser", script=script(write("parser.py", "p = 1\n"), text("parsed"))
    )
    second = await send_done(
        api, thread, "and its tests", script=script(write("test_parser.py", "t = 1\n"), text("ok"))
    )
    before = await api.thread(thread)
    [a] = before["provider_threads"]
    threads_before = [t["id"] for t in (await api.request("GET", "/v1/threads")).json()["items"]]

    sent = await api.send(
        thread, "review both", provider="scripted-b", script=script(write("REVIEW.md", "fine\n"), ECHO)
    )
    assert sent["thread_id"] == thread
    switched = await api.wait_run(sent["run_id"])
    assert (switched["thread_id"], switched["ordinal"], switched["provider"]) == (thread, 3, "scripted-b")

    # A first-class handoff: recorded for this run, from one provider to the other, delivered with the message.
    [hid] = switched["handoff_ids"]
    given = await handoff(api, hid)
    assert (given["run_id"], given["from_provider"], given["to_provider"]) == (switched["id"], "scripted", "scripted-b")
    assert given["covered_ordinals"] == [1, 2] and given["delivered"]
    assert "write the parser" in given["text"] and "test_parser.py (added, +1 -0)" in given["text"]
    assert reply(switched) == f"Received: {given['text']}\n\n---\n\nreview both"

    # No fork: the same app thread and workspace go on; no new thread, transfer or lineage.
    after = await api.thread(thread)
    assert [t["id"] for t in (await api.request("GET", "/v1/threads")).json()["items"]] == threads_before
    assert after["transfers"] == [] and after["lineage"] == before["lineage"]
    assert files(workspace(stack, api.tenant, thread)) == {
        "parser.py": "p = 1\n",
        "test_parser.py": "t = 1\n",
        "REVIEW.md": "fine\n",
    }
    assert [f["path"] for f in switched["checkpoint"]["files"]] == ["REVIEW.md"]

    # No rewrite: the earlier runs, their messages and checkpoints, and A's provider thread are as they were.
    assert [await api.run(r["id"]) for r in (first, second)] == [first, second]
    assert after["runs"][:2] == before["runs"] and after["messages"][: len(before["messages"])] == before["messages"]
    assert after["checkpoints"][: len(before["checkpoints"])] == before["checkpoints"]
    assert next(p for p in after["provider_threads"] if p["id"] == a["id"]) == a
    [b] = [p for p in after["provider_threads"] if p["id"] != a["id"]]
    assert b["provider"] == "scripted-b" and pth_of(switched) == b["id"] and b["covered_ordinals"] == [1, 2, 3]
    await assert_projection_is_the_fold(api, log, thread)


async def test_L5_3_runs_1_to_5_on_A_6_to_8_on_B_and_run_9_back_on_A_gets_only_6_to_8(api, log):
    thread = await api.create_thread(title="switching")
    runs = {}
    for n in range(1, 6):
        runs[n] = await send_done(
            api, thread, f"A-task-{n}: step {n} of the parser", script=script(text(f"A finished step {n}"))
        )
    for n in range(6, 9):
        runs[n] = await send_done(
            api,
            thread,
            f"B-task-{n}: review part {n}",
            provider="scripted-b",
            script=script(text(f"B reviewed part {n}")),
        )
    runs[9] = await send_done(api, thread, "back to A: wrap up", provider="scripted", script=script(ECHO))

    a1, b1 = pth_of(runs[1]), pth_of(runs[6])
    assert a1 != b1
    assert {pth_of(runs[n]) for n in range(1, 6)} == {a1}
    assert {pth_of(runs[n]) for n in range(6, 9)} == {b1}
    assert pth_of(runs[9]) == a1  # L5.3: the earlier provider thread is resumed, not replaced

    # B's thread was new: it got the full summary of 1-5 (L5.2) with run 6, nothing with 7 and 8.
    assert len(runs[6]["handoff_ids"]) == 1 and runs[7]["handoff_ids"] == runs[8]["handoff_ids"] == []
    to_b = await handoff(api, runs[6]["handoff_ids"][0])
    assert (to_b["strategy"], to_b["covered_ordinals"], to_b["to_provider"]) == (
        "full_thread_summary",
        [1, 2, 3, 4, 5],
        "scripted-b",
    )

    # Run 9 on A carries only the delta of the runs A missed.
    [delta_id] = runs[9]["handoff_ids"]
    delta = await handoff(api, delta_id)
    assert (delta["strategy"], delta["covered_ordinals"]) == ("delta", [6, 7, 8])
    assert (delta["from_provider"], delta["to_provider"], delta["provider_thread_id"]) == ("scripted-b", "scripted", a1)
    assert delta["run_id"] == runs[9]["id"] and delta["run_ordinal"] == 9 and delta["delivered"]
    for n in range(6, 9):
        assert f"B-task-{n}: review part {n}" in delta["text"] and f"B reviewed part {n}" in delta["text"]
    for n in range(1, 6):
        assert f"A-task-{n}" not in delta["text"]
    assert "runs 6-8" in delta["text"]
    # L5.5: the provider received exactly the stored handoff, then the user message.
    assert reply(runs[9]) == f"Received: {delta['text']}\n\n---\n\nback to A: wrap up"

    for n in range(1, 9):  # L5.1: no rewrite of earlier history
        assert await api.run(runs[n]["id"]) == runs[n]
    doc = await api.thread(thread)
    covered = {p["id"]: p["covered_ordinals"] for p in doc["provider_threads"]}
    assert covered == {a1: list(range(1, 10)), b1: list(range(1, 9))}
    assert [h["id"] for h in doc["handoffs"]] == [to_b["id"], delta_id]
    await assert_projection_is_the_fold(api, log, thread)


async def test_L5_4_clean_context_starts_a_fresh_provider_thread_with_a_full_summary(api):
    thread = await api.create_thread()
    first = await send_done(
        api, thread, "write the lexer", script=script(write("lexer.py", "x = 1\n"), text("lexer done"))
    )
    await send_done(api, thread, "and the tests", script=script(text("tests done")))
    clean = await send_done(api, thread, "start over cleanly", clean_context=True, script=script(ECHO))
    assert pth_of(clean) != pth_of(first)
    [hid] = clean["handoff_ids"]
    summary = await handoff(api, hid)
    assert (summary["strategy"], summary["reason"], summary["covered_ordinals"]) == (
        "full_thread_summary",
        "clean context requested",
        [1, 2],
    )
    assert "write the lexer" in summary["text"] and "lexer.py (added, +1 -0)" in summary["text"]
    assert reply(clean).startswith("Received: " + summary["text"])
    # The next ordinary run stays on the fresh thread with nothing to hand over.
    after = await send_done(api, thread, "carry on", script=script(text("ok")))
    assert pth_of(after) == pth_of(clean) and after["handoff_ids"] == []


async def test_L5_4_a_message_on_another_model_gets_a_fresh_provider_thread_with_a_full_summary(api, log):
    thread = await api.create_thread()
    first = await send_done(
        api, thread, "write the parser", script=script(write("parser.py", "p = 1\n"), text("parser done"))
    )
    other = await send_done(api, thread, "review it on the big model", model="big-model", script=script(ECHO))
    assert pth_of(other) != pth_of(first) and other["model"] == "big-model"
    [hid] = other["handoff_ids"]
    summary = await handoff(api, hid)
    assert (summary["strategy"], summary["covered_ordinals"]) == ("full_thread_summary", [1])
    assert (
        summary["reason"] == f"settings incompatible with provider thread {pth_of(first)} (model default -> big-model)"
    )
    assert "write the parser" in summary["text"] and "parser.py (added, +1 -0)" in summary["text"]
    assert reply(other) == f"Received: {summary['text']}\n\n---\n\nreview it on the big model"
    # Back on the thread's own model: its first provider thread resumes with only the run it missed.
    back = await send_done(api, thread, "back to work", script=script(ECHO))
    assert pth_of(back) == pth_of(first)
    delta = await handoff(api, back["handoff_ids"][0])
    assert (delta["strategy"], delta["covered_ordinals"]) == ("delta", [2])
    doc = await api.thread(thread)
    settings = {p["id"]: p["settings"]["model"] for p in doc["provider_threads"]}
    assert settings == {pth_of(first): None, pth_of(other): "big-model"}
    bad = await api.request("POST", f"/v1/threads/{thread}/messages", json={"text": "x", "model": ""})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_model"
    await assert_projection_is_the_fold(api, log, thread)


async def test_L5_5_bad_handoff_ids_are_typed_errors(api):
    r = await api.request("GET", "/v1/handoffs/hoff_" + "0" * 26)
    assert r.status_code == 404 and r.json()["error"]["code"] == "handoff_not_found"
    r = await api.request("GET", "/v1/handoffs/run_x")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_id"


# --- L6 fork ----------------------------------------------------------------------------------------------


async def _four_runs(api, profile: str) -> tuple[str, list[dict]]:
    thread = await api.create_thread(title="source")
    steps = [
        (write("a.txt", "v1\n"), text("wrote a")),
        (write("b.txt", "b\n"), text("wrote b")),
        (write("a.txt", "v3\n"), text("rewrote a")),
        (write("c.txt", "c\n"), text("wrote c")),
    ]
    runs = [
        await send_done(api, thread, f"source request {i + 1}", script=script(*s, profile=profile))
        for i, s in enumerate(steps)
    ]
    return thread, runs


@pytest.mark.parametrize("profile", ["native_fork", "no_fork"])
async def test_L6_fork_from_run_2_of_4_continues_from_run_2s_files_and_context(api, stack, profile):
    source, runs = await _four_runs(api, profile)
    before = history(await api.thread(source))
    forked = await fork(api, source, {"type": "run", "id": runs[1]["id"]}, title="tangent")
    child = forked["thread_id"]

    # L6.1: lineage and a pending transfer, nothing else.
    doc = await api.wait_thread(child, lambda d: d if d["transfers"] else None, "the fork's transfer")
    assert doc["thread"]["parent_thread_id"] == source and doc["lineage"]["root_thread_id"] == source
    [transfer] = doc["transfers"]
    assert (transfer["type"], transfer["status"], transfer["source_point"]["run_id"]) == (
        "fork",
        "pending",
        runs[1]["id"],
    )
    assert doc["runs"] == [] and doc["sessions"] == [] and doc["provider_threads"] == [] and doc["handoffs"] == []

    # L6.5: the fork's own workspace, with run 2's files.
    ws = workspace(stack, api.tenant, child)
    assert (ws / "a.txt").read_text() == "v1\n" and (ws / "b.txt").read_text() == "b\n"
    assert not (ws / "c.txt").exists()

    first = await send_done(
        api, child, "continue the tangent", script=script(write("d.txt", "d\n"), ECHO, profile=profile)
    )
    doc = await api.thread(child)
    [transfer] = doc["transfers"]
    assert transfer["status"] == "consumed"
    [pth] = doc["provider_threads"]
    if profile == "native_fork":  # L6.2: same provider with native fork: the provider thread is forked natively
        assert transfer["fidelity"] == "native" and first["handoff_ids"] == []
        source_pth = (await api.thread(source))["provider_threads"][0]
        assert pth["native_ref"] != source_pth["native_ref"]
        assert f"fork-of~{source_pth['native_ref']}@{runs[1]['attempts'][-1]['native_turn_ref']}" in pth["native_ref"]
        assert reply(first) == "Received: continue the tangent"
    else:  # no native fork: portable context summarised from the source up to run 2
        assert transfer["fidelity"] == "portable" and transfer["handoff_id"] == first["handoff_ids"][0]
        context = await handoff(api, transfer["handoff_id"])
        assert (context["strategy"], context["covered_ordinals"], context["source_thread_id"]) == (
            "fork_context",
            [1, 2],
            source,
        )
        assert "source request 1" in context["text"] and "source request 2" in context["text"]
        assert "source request 3" not in context["text"] and "c.txt" not in context["text"]
        assert "b.txt (added, +1 -0)" in context["text"]
        assert reply(first) == f"Received: {context['text']}\n\n---\n\ncontinue the tangent"
    # The fork's checkpoints diff against the materialised baseline; the two workspaces share nothing.
    assert [f["path"] for f in first["checkpoint"]["files"]] == ["d.txt"]
    assert not (workspace(stack, api.tenant, source) / "d.txt").exists()
    assert (workspace(stack, api.tenant, source) / "a.txt").read_text() == "v3\n"

    after = await api.wait_thread(source, lambda d: d if d["lineage"] else None, "the source's record of its fork")
    assert history(after) == before  # deleting nothing, rewriting nothing
    assert [c["thread_id"] for c in after["lineage"]["children"]] == [child]


async def test_L6_5_a_fork_gets_the_source_points_checkpoint_not_the_source_workspace_as_it_is_now(api, stack):
    source = await api.create_thread(title="source")
    runs = [
        await send_done(api, source, f"step {n}", script=script(*steps, text(f"step {n} done")))
        for n, steps in enumerate(
            [
                (write("a.txt", "v1\n"), write("b.txt", "b\n")),
                (write("a.txt", "v2\n"), write("c.txt", "c\n")),
                (write("a.txt", "v3\n"), write("d.txt", "d\n")),
            ],
            start=1,
        )
    ]
    src = workspace(stack, api.tenant, source)
    (src / "stray.txt").write_text("in the workspace, in no checkpoint\n")  # the live workspace is not the source
    (src / "b.txt").write_text("edited by hand\n")

    at_two = (await fork(api, source, {"type": "run", "id": runs[1]["id"]}, title="from run 2"))["thread_id"]
    at_one = (await fork(api, source, {"type": "run", "id": runs[0]["id"]}, title="from run 1"))["thread_id"]
    assert files(workspace(stack, api.tenant, at_two)) == {"a.txt": "v2\n", "b.txt": "b\n", "c.txt": "c\n"}
    assert files(workspace(stack, api.tenant, at_one)) == {"a.txt": "v1\n", "b.txt": "b\n"}

    # Its own workspace: its checkpoints diff against that baseline, and neither side sees the other's writes.
    mine = await send_done(
        api, at_two, "fork work", script=script(write("a.txt", "fork\n"), write("e.txt", "e\n"), text("forked"))
    )
    assert sorted((f["path"], f["change"]) for f in mine["checkpoint"]["files"]) == [
        ("a.txt", "modified"),
        ("e.txt", "added"),
    ]
    theirs = await send_done(api, source, "source work", script=script(write("c.txt", "source\n"), text("on")))
    assert files(workspace(stack, api.tenant, at_two)) == {
        "a.txt": "fork\n",
        "b.txt": "b\n",
        "c.txt": "c\n",
        "e.txt": "e\n",
    }
    assert (src / "a.txt").read_text() == "v3\n" and not (src / "e.txt").exists()
    assert files(workspace(stack, api.tenant, at_one)) == {"a.txt": "v1\n", "b.txt": "b\n"}
    assert theirs["checkpoint"] is not None

    # A fork of the fork gets the fork's own checkpoint: what it inherited and what it wrote.
    grandchild = (await fork(api, at_two, {"type": "run", "id": mine["id"]}))["thread_id"]
    assert files(workspace(stack, api.tenant, grandchild)) == {
        "a.txt": "fork\n",
        "b.txt": "b\n",
        "c.txt": "c\n",
        "e.txt": "e\n",
    }


async def test_L6_5_a_fork_from_a_provider_thread_at_a_turn_gets_that_turns_run_checkpoint(api, stack):
    source = await api.create_thread()
    first = await send_done(
        api, source, "first", script=script(write("x.txt", "1\n"), text("one"), profile="native_fork")
    )
    second = await send_done(
        api,
        source,
        "second",
        script=script(write("x.txt", "2\n"), write("y.txt", "y\n"), text("two"), profile="native_fork"),
    )
    pth = pth_of(second)
    at_turn = await fork(
        api, source, {"type": "provider_thread", "id": pth, "turn": first["attempts"][-1]["native_turn_ref"]}
    )
    at_end = await fork(api, source, {"type": "provider_thread", "id": pth})
    assert files(workspace(stack, api.tenant, at_turn["thread_id"])) == {"x.txt": "1\n"}
    assert files(workspace(stack, api.tenant, at_end["thread_id"])) == {"x.txt": "2\n", "y.txt": "y\n"}


async def test_L6_1_a_retried_fork_names_the_same_thread_once(api):
    source = await api.create_thread()
    base = await send_done(api, source, "base", script=script(text("ok")))
    body = {"source": {"type": "run", "id": base["id"]}}
    first = await api.request("POST", f"/v1/threads/{source}/fork", json=body, headers={"Idempotency-Key": "fork-1"})
    again = await api.request("POST", f"/v1/threads/{source}/fork", json=body, headers={"Idempotency-Key": "fork-1"})
    assert first.status_code == again.status_code == 201 and first.json()["thread_id"] == again.json()["thread_id"]
    doc = await api.wait_thread(source, lambda d: d if d["lineage"] else None, "the source's record")
    assert [c["thread_id"] for c in doc["lineage"]["children"]] == [first.json()["thread_id"]]
    bad = await api.request("POST", f"/v1/threads/{source}/fork", json={"source": {"type": "run", "id": "node_x"}})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_id"


async def test_L6_3_fork_from_a_provider_thread_at_a_turn_or_at_its_end(api):
    source = await api.create_thread()
    first = await send_done(api, source, "first", script=script(text("one"), profile="native_fork"))
    second = await send_done(api, source, "second", script=script(text("two"), profile="native_fork"))
    pth = pth_of(second)
    at_end = await fork(api, source, {"type": "provider_thread", "id": pth})
    at_turn = await fork(
        api, source, {"type": "provider_thread", "id": pth, "turn": first["attempts"][0]["native_turn_ref"]}
    )
    points = []
    for forked in (at_end, at_turn):
        doc = await api.wait_thread(forked["thread_id"], lambda d: d if d["transfers"] else None, "fork")
        points.append(doc["transfers"][0]["source_point"])
    assert [(p["type"], p["run_id"]) for p in points] == [
        ("provider_thread", second["id"]),
        ("provider_thread", first["id"]),
    ]
    unknown = await fork(api, source, {"type": "provider_thread", "id": pth, "turn": "no-such-turn"}, expect=404)
    assert unknown["error"]["code"] == "source_not_found"


async def test_L6_2_a_transfer_that_cannot_be_resolved_fails_the_run_before_any_provider_work(api):
    source = await api.create_thread()
    base = await send_done(api, source, "base", script=script(write("x.txt", "x\n"), text("ok"), profile="no_fork"))
    child = (await fork(api, source, {"type": "run", "id": base["id"]}))["thread_id"]
    # The target neither forks natively nor takes any context text: the fork's context cannot reach it.
    no_context = {"steps": [ECHO], "capabilities": {"fork": False, "max_handoff_chars": 0}}
    sent = await api.send(child, "go on", script=no_context)
    run = await api.wait_run(sent["run_id"], "failed")
    assert run["error"].startswith("context transfer failed: scripted accepts no context handoff")
    doc = await api.thread(child)
    assert doc["transfers"][0]["status"] == "failed"
    assert doc["sessions"] == [] and doc["provider_threads"] == [] and run["messages"][-1]["role"] == "user"


async def test_L6_2_native_fork_of_a_provider_thread_no_longer_live_opens_and_forks_it(api):
    source = await api.create_thread()
    await send_done(api, source, "one", script=script(text("1"), profile="native_fork"))
    point = await send_done(api, source, "two", script=script(text("2"), profile="native_fork"))
    # The source moves on to another provider: its first provider thread is no longer live anywhere.
    await send_done(api, source, "three", provider="scripted-b", script=script(text("3")))
    doc = await api.thread(source)
    a1 = next(p for p in doc["provider_threads"] if p["provider"] == "scripted")
    assert [s["status"] for s in doc["sessions"]] == ["stopped", "live"]
    child = (await fork(api, source, {"type": "run", "id": point["id"]}))["thread_id"]
    first = await send_done(api, child, "go on", script=script(ECHO, profile="native_fork"))
    fork_doc = await api.thread(child)
    assert fork_doc["transfers"][0]["status"] == "consumed" and fork_doc["transfers"][0]["fidelity"] == "native"
    assert (
        f"fork-of~{a1['native_ref']}@{point['attempts'][-1]['native_turn_ref']}"
        in fork_doc["provider_threads"][0]["native_ref"]
    )
    assert reply(first) == "Received: go on"


async def test_L6_3_forking_an_active_run_uses_the_latest_completed_checkpoint_or_is_refused(api, stack):
    thread = await api.create_thread()
    done = await send_done(api, thread, "first", script=script(write("one.txt", "1\n"), text("one")))
    active = await api.send(
        thread, "second", script=script(write("two.txt", "2\n"), approval("rm -rf build?"), HANG, profile="full")
    )
    req = await api.wait_request(thread)

    refused = await fork(api, thread, {"type": "run", "id": active["run_id"]}, expect=409, on_active="refuse")
    assert refused["error"]["code"] == "unstable_source" and refused["error"]["details"]["reason"] == "run_active"
    pending = await fork(api, thread, {"type": "node", "id": req["node_id"]}, expect=409)
    assert pending["error"]["details"]["reason"] == "pending_approval"
    missing = await fork(api, thread, {"type": "run", "id": "run_" + "0" * 26}, expect=404)
    assert missing["error"]["code"] == "source_not_found"

    forked = await fork(api, thread, {"type": "run", "id": active["run_id"]})
    doc = await api.wait_thread(forked["thread_id"], lambda d: d if d["transfers"] else None, "fork")
    point = doc["transfers"][0]["source_point"]
    assert (point["run_id"], point["substituted_for"]) == (done["id"], active["run_id"])
    ws = workspace(stack, api.tenant, forked["thread_id"])
    assert (ws / "one.txt").exists() and not (ws / "two.txt").exists()  # the checkpoint, not the live files

    await api.post(f"/v1/runs/{active['run_id']}/interrupt", expect=202)
    await api.wait_run(active["run_id"], "interrupted")


async def test_L6_4_fork_from_a_completed_subagent_is_a_synthetic_lower_fidelity_fork(api):
    thread = await api.create_thread()
    run = await send_done(
        api,
        thread,
        "investigate",
        script=script(
            {"type": "subagent", "title": "explorer", "steps": [text("found the bug in parse()")]},
            text("done"),
            profile="native_fork",
        ),
    )
    node = next(n for n in run["nodes"] if n["kind"] == "subagent")
    forked = await fork(api, thread, {"type": "node", "id": node["id"]})
    first = await send_done(api, forked["thread_id"], "dig deeper", script=script(ECHO, profile="native_fork"))
    [transfer] = (await api.thread(forked["thread_id"]))["transfers"]
    # These subagents own no provider thread: even with native fork available the fork is synthetic, and the
    # capabilities said so before the fork was made.
    assert (transfer["fidelity"], transfer["status"]) == ("synthetic", "consumed")
    assert "explorer" in reply(first) and "investigate" in reply(first)
    caps = (await api.thread(thread))["capabilities"]
    assert (caps["fork"], caps["subagent_fork"]) == ("native", "synthetic")
    no_subagents = await api.create_thread()
    await send_done(api, no_subagents, "plain", script={"steps": [text("ok")], "capabilities": {"subagents": False}})
    assert (await api.thread(no_subagents))["capabilities"]["subagent_fork"] == "unavailable"


async def test_L6_4_fork_from_a_subagent_that_owns_a_provider_thread_forks_it_natively_from_its_checkpoint(api, stack):
    thread = await api.create_thread()
    run = await send_done(
        api,
        thread,
        "investigate",
        script=script(
            subagent(
                "explorer", write("notes.txt", "parse() drops the last token\n"), text("found the bug in parse()")
            ),
            write("after.txt", "written after the subagent\n"),
            text("done"),
            profile="subagent_fork",
        ),
    )
    doc = await api.thread(thread)
    assert (doc["capabilities"]["fork"], doc["capabilities"]["subagent_fork"]) == ("native", "native")
    node = next(n for n in run["nodes"] if n["kind"] == "subagent")
    assert node["native_thread_ref"].startswith(doc["provider_threads"][0]["native_ref"])
    forked = await fork(api, thread, {"type": "node", "id": node["id"]})
    child = forked["thread_id"]
    point = (await api.wait_thread(child, lambda d: d if d["transfers"] else None, "fork"))["transfers"][0][
        "source_point"
    ]
    assert (point["node_id"], point["subagent_native_ref"], point["baseline"]) == (
        node["id"],
        node["native_thread_ref"],
        "subagent_end",
    )
    # The baseline is the subagent's own end checkpoint: its files, not those its run wrote afterwards.
    ws = workspace(stack, api.tenant, child)
    assert (ws / "notes.txt").exists() and not (ws / "after.txt").exists()

    first = await send_done(api, child, "dig deeper", script=script(ECHO, profile="subagent_fork"))
    fork_doc = await api.thread(child)
    [transfer] = fork_doc["transfers"]
    assert (transfer["fidelity"], transfer["status"]) == ("native", "consumed") and first["handoff_ids"] == []
    [pth] = fork_doc["provider_threads"]
    assert pth["native_ref"].endswith(f"fork-of~{node['native_thread_ref']}@end")
    assert reply(first) == "Received: dig deeper"
