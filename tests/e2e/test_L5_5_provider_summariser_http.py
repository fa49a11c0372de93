"""L5.5 over HTTP with a deployment whose handoff summaries are written by a provider
(``TREADLE_SUPERVISOR_SUMMARISER=provider:scripted``; the scripted provider plays the summarising model by
echoing the prompt it was given). The handoff records which summariser wrote it; a summary over the target's
budget leaves the deterministic one, and the handoff says why."""

from __future__ import annotations

import json
import os

import nats
import pytest

from tests.support.api import Api
from tests.support.scripts import script, text, write
from treadle.cli.stack import Stack
from treadle.ops.tokens import TokenStore


def _quiet(name: str, line: str) -> None:
    if os.environ.get("TREADLE_TEST_VERBOSE") or " ERROR " in line or "Traceback" in line:
        print(f"{name} | {line}")


PREFIX = "Summary by the provider: "
ECHO = {"type": "echo"}


@pytest.fixture(scope="module")
async def summarising_stack(tmp_path_factory):
    env = {
        "TREADLE_SUPERVISOR_SUMMARISER": "provider:scripted",
        "TREADLE_SUPERVISOR_SUMMARISER_SCRIPT": json.dumps({"steps": [{"type": "echo", "prefix": PREFIX}]}),
    }
    async with Stack(tmp_path_factory.mktemp("summarising-stack"), env=env, on_output=_quiet) as s:
        yield s


@pytest.fixture
async def api(summarising_stack):
    nc = await nats.connect(summarising_stack.nats_url)
    try:
        token = await TokenStore(nc.jetstream()).create("summarised", "alice")
    finally:
        await nc.close()
    client = Api(summarising_stack.api_url, token, "summarised")
    yield client
    await client.close()


async def send_done(api, thread: str, message: str, **body) -> dict:
    sent = await api.send(thread, message, **body)
    return await api.wait_run(sent["run_id"])


def reply(run: dict) -> str:
    return "\n".join(m["text"] for m in run["messages"] if m["role"] == "assistant" and m["status"] == "completed")


async def handoff(api, handoff_id: str) -> dict:
    r = await api.request("GET", f"/v1/handoffs/{handoff_id}")
    assert r.status_code == 200, r.text
    return r.json()


async def test_L5_5_a_configured_provider_writes_the_switch_summary_and_the_handoff_records_it(api):
    thread = await api.create_thread()
    await send_done(api, thread, "write the parser", script=script(write("parser.py", "p = 1\n"), text("parser done")))
    switched = await send_done(api, thread, "review it", provider="scripted-b", script=script(ECHO))
    [summary] = [await handoff(api, h) for h in switched["handoff_ids"]]
    assert (summary["strategy"], summary["summariser"], summary["version"], summary["fallback"]) == (
        "full_thread_summary",
        "provider:scripted",
        1,
        None,
    )
    heading, _, body = summary["text"].partition("\n\n")
    assert heading == "# Context: summary of this conversation so far (run 1):"
    # What the provider was asked, echoed back: the graph's record of run 1, to be summarised within the budget.
    assert body.startswith(PREFIX + "Summarise the conversation record below")
    assert "write the parser" in body and "parser.py (added, +1 -0)" in body and "at most" in body
    # The text the target got with the message is the stored artifact's (never spliced in without a record).
    assert reply(switched) == f"Received: {summary['text']}\n\n---\n\nreview it"


async def test_L5_5_a_provider_summary_over_the_targets_budget_leaves_the_deterministic_one(api):
    thread = await api.create_thread()
    await send_done(api, thread, "write the lexer", script=script(text("lexer done")))
    small = {"steps": [ECHO], "capabilities": {"max_handoff_chars": 450}}  # the echoed prompt cannot fit
    switched = await send_done(api, thread, "review it", provider="scripted-b", script=small)
    [summary] = [await handoff(api, h) for h in switched["handoff_ids"]]
    assert (summary["summariser"], summary["version"]) == ("local", 1)
    assert summary["fallback"].startswith("provider:scripted: the provider's summary has ")
    assert len(summary["text"]) <= 450 and "User asked: write the lexer" in summary["text"]
    assert reply(switched) == f"Received: {summary['text']}\n\n---\n\nreview it"
