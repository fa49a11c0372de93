"""Issue 35 with the real ``codex app-server``: a thread's rollout is kept off the node after each turn, so a
provider host that lost its disk (the tenant's CODEX_HOME gone) still resumes the Codex thread natively."""

from __future__ import annotations

import json

import pytest

from tests.codex.codex_mock import Text
from tests.codex.codex_support import TENANT, roll_back
from tests.support.native_states import kept, lose_the_node

pytestmark = pytest.mark.e2e


async def test_L9_2_a_codex_thread_resumes_natively_after_its_host_lost_the_codex_home(
    client, codex_stack, mock, homes_root
):
    mock.on("remember the word kumquat", [Text("Remembered: kumquat.")])
    mock.on("which word did I ask you to remember", [Text("You asked me to remember kumquat.")])
    thread = (await client.create_thread(title="native state", provider="codex"))["thread_id"]
    first = await client.send(thread, "remember the word kumquat")
    assert (await client.wait_run(first["run_id"], timeout=90))["status"] == "completed"
    pth = (await client.get_thread(thread))["provider_threads"][0]["id"]
    await kept(codex_stack, TENANT, "codex", pth, "Remembered: kumquat.")

    # The node is lost: its host and runtime die at once and its disk goes with them (the tenant's homes)
    await lose_the_node(codex_stack, homes_root / TENANT)

    since = len(mock.requests)
    second = await client.send(thread, "which word did I ask you to remember")
    run = await client.wait_run(second["run_id"], timeout=90)
    assert run["status"] == "completed", run
    doc = await client.get_thread(thread)
    assert len(doc["provider_threads"]) == 1, doc["provider_threads"]  # resumed, not replaced (L4.2/L9.4)
    assert [s["status"] for s in doc["sessions"]][-1] == "live"
    # The model sees the earlier conversation as Codex's own items (a replacement would restate it as text)
    told = next(r.body["input"] for r in mock.requests[since:] if "which word" in r.prompt)
    said = [i for i in told if i.get("type") == "message" and i.get("role") == "assistant"]
    assert "Remembered: kumquat." in json.dumps(said), json.dumps(told)


async def test_L9_2_a_codex_thread_resumes_natively_on_a_node_whose_home_never_held_it(
    client, codex_stack, mock, homes_root
):
    """Re-homed: the tenant's CODEX_HOME is there (with codex's own index of its other threads) but this
    thread's rollout is not."""
    mock.on("remember the number 417", [Text("Remembered: 417.")])
    mock.on("which number did I give you", [Text("You gave me 417.")])
    thread = (await client.create_thread(title="re-homed", provider="codex"))["thread_id"]
    first = await client.send(thread, "remember the number 417")
    assert (await client.wait_run(first["run_id"], timeout=90))["status"] == "completed"
    pth = (await client.get_thread(thread))["provider_threads"][0]
    await kept(codex_stack, TENANT, "codex", pth["id"], "Remembered: 417.")

    await codex_stack.processes.halt("provider-host")
    rollouts = list((homes_root / TENANT / "sessions").rglob(f"rollout-*-{pth['native_ref']}.jsonl"))
    assert len(rollouts) == 1
    rollouts[0].unlink()
    await codex_stack.processes.start()
    await codex_stack.wait_ready(names=["provider-host"])

    since = len(mock.requests)
    second = await client.send(thread, "which number did I give you")
    run = await client.wait_run(second["run_id"], timeout=90)
    assert run["status"] == "completed", run
    doc = await client.get_thread(thread)
    assert len(doc["provider_threads"]) == 1, doc["provider_threads"]
    told = next(r.body["input"] for r in mock.requests[since:] if "which number" in r.prompt)
    said = [i for i in told if i.get("type") == "message" and i.get("role") == "assistant"]
    assert "Remembered: 417." in json.dumps(said), json.dumps(told)


async def test_L10_5_a_rolled_back_codex_thread_resumes_natively_without_its_dropped_turn_on_a_new_node(
    client, codex_stack, mock, homes_root
):
    """``thread/revert`` writes a new rollout beside the thread's first (``…-<thread id>_<uuid>.jsonl``) and
    later turns go there: it is what is kept from then on, so a lost node resumes the conversation as it now is,
    not as it was before the rollback."""
    mock.on("remember the word quince", [Text("Remembered: quince.")])
    mock.on("now remember the word medlar", [Text("Remembered: medlar.")])
    mock.on("then remember the word sloe", [Text("Remembered: sloe.")])
    mock.on("which words do you remember", [Text("Quince and sloe.")])
    thread = (await client.create_thread(title="rolled back", provider="codex", runtime_mode="full_access"))[
        "thread_id"
    ]
    for prompt in ("remember the word quince", "now remember the word medlar"):
        sent = await client.send(thread, prompt)
        assert (await client.wait_run(sent["run_id"], timeout=90))["status"] == "completed"
    await roll_back(client, thread, 1)
    sent = await client.send(thread, "then remember the word sloe")
    assert (await client.wait_run(sent["run_id"], timeout=90))["status"] == "completed"
    pth = (await client.get_thread(thread))["provider_threads"][0]["id"]
    files = await kept(codex_stack, TENANT, "codex", pth, "Remembered: sloe.", where=lambda name: "_" in name)
    assert len(files) == 2, sorted(files)  # the first rollout, as the revert left it, and the revert's own

    await lose_the_node(codex_stack, homes_root / TENANT)

    since = len(mock.requests)
    sent = await client.send(thread, "which words do you remember")
    run = await client.wait_run(sent["run_id"], timeout=90)
    assert run["status"] == "completed", run
    doc = await client.get_thread(thread)
    assert len(doc["provider_threads"]) == 1, doc["provider_threads"]  # resumed, not replaced
    told = json.dumps(next(r.body["input"] for r in mock.requests[since:] if "which words" in r.prompt))
    assert "Remembered: quince." in told and "Remembered: sloe." in told, told
    assert "Remembered: medlar." not in told, told
