"""Issue 17: every command aimed at a thread, run, node, request or plan that does not exist, or belongs to
another tenant, is a fast typed 404 and changes nothing; never an assertion in a worker and a 503 later."""

from __future__ import annotations

import time
from datetime import UTC

import msgspec
import pytest

from tests.support.api import make_api
from tests.support.scripts import approval, script
from treadle.core.commands import Command, Reply
from treadle.core.ids import new_id
from treadle.core.lineage.commands import ForkSource, ForkThread
from treadle.core.requests.commands import RespondRequest
from treadle.eventlog import subjects

pytestmark = pytest.mark.e2e

MISSING = {p: new_id(p, 0) for p in ("thr", "run", "node", "req", "plan", "ckpt")}


def _calls(thread: str, run: str, node: str, req: str, plan: str, ckpt: str) -> list[tuple[str, str, dict]]:
    return [
        ("POST", f"/v1/threads/{thread}/messages", {"text": "hi"}),
        ("POST", f"/v1/threads/{thread}/fork", {"source": {"type": "run", "id": run}}),
        ("POST", f"/v1/threads/{thread}/rollback", {"to_run_ordinal": 0}),
        ("PATCH", f"/v1/threads/{thread}/queue", {"order": [run]}),
        ("PATCH", f"/v1/threads/{thread}/queue/{run}", {"text": "x"}),
        ("DELETE", f"/v1/threads/{thread}/queue/{run}", {}),
        ("POST", f"/v1/runs/{run}/interrupt", {}),
        ("POST", f"/v1/nodes/{node}/interrupt", {}),
        ("POST", f"/v1/requests/{req}/respond", {"decision": "accept"}),
        ("POST", f"/v1/plans/{plan}/implement", {}),
        ("POST", f"/v1/nodes/{node}/rollback", {"checkpoint_id": ckpt}),
        ("POST", f"/v1/nodes/{node}/rollback", {"checkpoint_id": ckpt, "thread_id": thread}),
    ]


async def _all_404(api, calls) -> None:
    for method, path, body in calls:
        started = time.monotonic()
        kw = {"json": body} if method != "DELETE" else {}
        r = await api.request(method, path, **kw)
        took = time.monotonic() - started
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert r.json()["error"]["code"].endswith("not_found"), (path, r.text)
        assert took < 5, (path, took)  # answered, not timed out


async def test_L6_1_commands_on_nonexistent_targets_are_fast_404s(api):
    await _all_404(
        api,
        _calls(
            **{
                k: MISSING[p]
                for k, p in (
                    ("thread", "thr"),
                    ("run", "run"),
                    ("node", "node"),
                    ("req", "req"),
                    ("plan", "plan"),
                    ("ckpt", "ckpt"),
                )
            }
        ),
    )


async def test_L6_1_commands_on_another_tenants_thread_and_entities_are_404_and_change_nothing(
    api, stack, stack_nc, tenant
):
    owner = await make_api(stack, stack_nc, tenant + "owner")
    try:
        thread = await owner.create_thread()
        sent = await owner.send(thread, "deploy", script=script(approval("deploy?")))
        request = await owner.wait_request(thread)
        before = await owner.thread(thread)
        await _all_404(
            api, _calls(thread, sent["run_id"], request["node_id"], request["id"], MISSING["plan"], MISSING["ckpt"])
        )
        after = await owner.thread(thread)
        assert after["seq"] == before["seq"]
    finally:
        await owner.close()


async def test_L11_2_a_command_for_a_missing_thread_sent_on_the_broker_gets_a_404_reply(stack_nc, tenant):
    """The coordinator answers every command, even one no gateway would send (a respond or a fork on a thread
    that does not exist): the thread check comes before any command's own logic."""
    from datetime import datetime

    encode, reply = msgspec.json.encode, msgspec.json.Decoder(Reply)
    for verb, body in (
        ("respond", RespondRequest(request_id=MISSING["req"], decision="accept")),
        ("fork", ForkThread(source=ForkSource(type="run", id=MISSING["run"]))),
    ):
        command = Command(
            id=new_id("cmd", 0),
            tenant=tenant,
            user="alice",
            thread=new_id("thr", 0),
            issued_at=datetime.now(UTC),
            body=body,
        )
        got = reply.decode((await stack_nc.request(subjects.command(tenant, verb), encode(command), timeout=5)).data)
        assert (got.status, got.code) == (404, "thread_not_found"), got
