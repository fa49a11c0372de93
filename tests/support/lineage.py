"""What the lineage tests share (L5 provider switching, L6 fork, L7 merge-back, scripted provider): runs to their
end, handoffs and forks over HTTP, the parts of a thread none of them may rewrite, and the check that the read model
is the fold of the log. ``echo`` answers with the turn's whole input: how the tests see what a provider was given."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.api import Api
from treadle.cli.stack import Stack
from treadle.core.state import fold
from treadle.eventlog.log import EventLog
from treadle.projections.store import encode_state

ECHO = {"type": "echo"}
# Ids and refs a handoff must never contain (L7.2: no provider protocol noise).
NOISE = re.compile(r"\b(?:node|att|evt|pth|ps|msg|req|turn|cmd|run|xfer|hoff)_[0-9a-z]{10}|scripted-turn|native")


def reply(run: dict[str, Any]) -> str:
    return "\n".join(m["text"] for m in run["messages"] if m["role"] == "assistant" and m["status"] == "completed")


def pth_of(run: dict[str, Any]) -> str:
    return run["attempts"][-1]["provider_thread_id"]


async def send_done(api: Api, thread: str, message: str, **body: Any) -> dict[str, Any]:
    sent = await api.send(thread, message, **body)
    return await api.wait_run(sent["run_id"])


async def handoff(api: Api, handoff_id: str) -> dict[str, Any]:
    r = await api.request("GET", f"/v1/handoffs/{handoff_id}")
    assert r.status_code == 200, r.text
    return r.json()


def history(doc: dict[str, Any]) -> dict[str, Any]:
    """What a fork, switch or merge must never rewrite on a thread: its runs, messages and checkpoints."""
    return {"runs": doc["runs"], "messages": doc["messages"], "checkpoints": doc["checkpoints"]}


async def assert_projection_is_the_fold(api: Api, log: EventLog, thread: str) -> None:
    """The read model (Redis) equals the fold of the thread's events (docs/concepts.md principle 1)."""
    folded = fold(await log.read(api.tenant, thread))
    r = await api.request("GET", f"/v1/threads/{thread}", params={"min_seq": folded.seq})
    assert r.json() == json.loads(encode_state(folded))


def workspace(stack: Stack, tenant: str, thread: str) -> Path:
    return stack.workspace_of(tenant, thread)  # on the node that holds it


async def fork(api: Api, thread: str, source: dict[str, Any], expect: int = 201, **body: Any) -> dict[str, Any]:
    r = await api.request("POST", f"/v1/threads/{thread}/fork", json={"source": source, **body})
    assert r.status_code == expect, r.text
    return r.json()
