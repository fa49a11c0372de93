"""Issue 35 with real ACP agents: the agent's home is kept off the node after each turn, so a provider host
that lost its disk still loads the agent's session (``session/load``) instead of replacing it."""

from __future__ import annotations

import json

import pytest

from tests.acp.acp_support import TENANT
from tests.codex.codex_mock import Text
from tests.support.native_states import kept, lose_the_node

pytestmark = pytest.mark.e2e


async def test_L9_2_an_acp_session_loads_natively_after_its_host_lost_the_agents_home(
    client, acp_stack, codex_api, homes_root
):
    codex_api.on("remember the word quince", [Text("Remembered: quince.")])
    codex_api.on("which fruit did I name", [Text("You named quince.")])
    thread = (await client.create_thread(title="acp native state", provider="acp-codex"))["thread_id"]
    first = await client.send(thread, "remember the word quince")
    assert (await client.wait_run(first["run_id"], timeout=90))["status"] == "completed"
    pth = (await client.get_thread(thread))["provider_threads"][0]["id"]
    await kept(acp_stack, TENANT, "acp-codex", pth, "Remembered: quince.")

    # The node is lost: its host and the agent die at once, and the agent's home goes with the disk
    await lose_the_node(acp_stack, homes_root / "codex" / TENANT)

    since = len(codex_api.requests)
    second = await client.send(thread, "which fruit did I name")
    run = await client.wait_run(second["run_id"], timeout=90)
    assert run["status"] == "completed", run
    doc = await client.get_thread(thread)
    assert len(doc["provider_threads"]) == 1, doc["provider_threads"]  # loaded, not replaced (L4.2/L9.4)
    told = next(r.body["input"] for r in codex_api.requests[since:] if "which fruit" in r.prompt)
    said = [i for i in told if i.get("type") == "message" and i.get("role") == "assistant"]
    assert "Remembered: quince." in json.dumps(said), json.dumps(told)
