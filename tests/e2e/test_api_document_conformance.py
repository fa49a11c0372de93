"""The OpenAPI document against real answers: the fuzzer rarely names an object that exists, so this test walks
a thread through a run with an approval, a plan, a queue, a diff, a fork and a rollback, and checks every
answer of every operation it calls (successes and the errors met on the way) with schemathesis: a documented
status, content type and headers, a body conforming to the schema, and an error code the document lists."""

from __future__ import annotations

import httpx
import pytest
import schemathesis

from tests.e2e.test_api_fuzz import CHECKS
from tests.support.scripts import HANG, approval, script, text, write
from treadle.ops.tokens import TokenStore

pytestmark = pytest.mark.e2e

NOWHERE = "_00000000000000000000000000"


async def test_real_answers_of_every_kind_are_what_the_document_says(api, stack, stack_nc):
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=15) as http:
        schema = schemathesis.openapi.from_dict((await http.get("/schema/openapi.json")).json())
        seen: dict[str, set[int]] = {}

        async def call(method: str, path: str, expect: int, **kw) -> dict:
            response = await http.request(method, path, headers={**api.headers, **kw.pop("headers", {})}, **kw)
            operation = schema.find_operation_by_path(method, path)
            assert operation is not None, f"{method} {path} is not in the document"
            seen.setdefault(operation.definition.raw["operationId"], set()).add(response.status_code)
            names = zip(operation.path.split("/"), path.split("/"))
            params = {name[1:-1]: value for name, value in names if name.startswith("{")}
            operation.Case(path_parameters=params).validate_response(response, **CHECKS)
            assert response.status_code == expect, response.text
            return response.json()

        thread = (await call("POST", "/v1/threads", 201, json={"title": "conformance"}))["thread_id"]
        first = await call(
            "POST",
            f"/v1/threads/{thread}/messages",
            202,
            json={"text": "go", "script": script(approval("write?"), write("a.txt", "one\n"), text("done"))},
        )
        request = await api.wait_request(thread)
        await call("GET", f"/v1/threads/{thread}/requests", 200, params={"status": "pending"})
        await call("GET", f"/v1/runs/{first['run_id']}", 200)
        await call("POST", f"/v1/requests/{request['id']}/respond", 200, json={"decision": "accept"})
        await call("POST", f"/v1/requests/{request['id']}/respond", 409, json={"decision": "accept"})
        await api.wait_run(first["run_id"])
        await call("GET", f"/v1/runs/{first['run_id']}", 200, params={"min_seq": "1"})
        await call("GET", f"/v1/threads/{thread}", 200)
        await call("GET", "/v1/threads", 200, params={"limit": "5"})
        await call("GET", f"/v1/threads/{thread}/activity", 200)
        for name in ("runs", "messages", "checkpoints", "handoffs"):
            await call("GET", f"/v1/threads/{thread}/{name}", 200, params={"limit": "1"})
        await call("GET", f"/v1/threads/{thread}/runs", 400, params={"cursor": "forged"})
        await call("GET", f"/v1/runs/{first['run_id']}/diff", 200)
        await call("GET", f"/v1/threads/{thread}/diff", 200)
        await call("GET", f"/v1/threads/{thread}/diff", 400, params={"from": "1", "to": "0"})

        planned = await call(
            "POST",
            f"/v1/threads/{thread}/messages",
            202,
            json={"text": "plan", "script": script({"type": "plan", "text": "1. test"})},
        )
        await api.wait_run(planned["run_id"])
        plan = next(p for p in (await api.thread(thread))["plans"] if p["kind"] == "proposed_plan")
        implemented = await call("POST", f"/v1/plans/{plan['id']}/implement", 202, json={"as": "run"})
        await api.wait_thread(
            thread, lambda d: any(p["status"] == "implemented" for p in d["plans"]), "the plan implemented"
        )
        await call("POST", f"/v1/plans/{plan['id']}/implement", 409, json={"as": "thread"})
        await api.wait_run(implemented["run_id"])

        active = await call(
            "POST", f"/v1/threads/{thread}/messages", 202, json={"text": "hang", "script": script(HANG)}
        )
        await api.wait_running(active["run_id"])
        queued = [
            await call(
                "POST", f"/v1/threads/{thread}/messages", 202, json={"text": f"q{i}", "mode": "queue_after_active"}
            )
            for i in range(2)
        ]
        await call("POST", f"/v1/threads/{thread}/messages", 409, json={"text": "no", "mode": "reject"})
        await call("GET", f"/v1/threads/{thread}/queue", 200)
        order = [q["run_id"] for q in reversed(queued)]
        await call("PATCH", f"/v1/threads/{thread}/queue", 200, json={"order": order})
        await call("PATCH", f"/v1/threads/{thread}/queue/{queued[0]['run_id']}", 200, json={"text": "edited"})
        await call("DELETE", f"/v1/threads/{thread}/queue/{queued[0]['run_id']}", 200)
        await call("DELETE", f"/v1/threads/{thread}/queue/{queued[0]['run_id']}", 409)
        await call("POST", f"/v1/runs/{queued[1]['run_id']}/interrupt", 202)  # still queued: cancelled
        run = await api.run(active["run_id"])
        await call("POST", f"/v1/nodes/{run['nodes'][0]['id']}/interrupt", 202, json={})
        await api.wait_run(active["run_id"], status="interrupted")
        await call("POST", f"/v1/runs/{active['run_id']}/interrupt", 409, json={})

        forked = await call(
            "POST", f"/v1/threads/{thread}/fork", 201, json={"source": {"type": "run", "id": first["run_id"]}}
        )
        await call("GET", f"/v1/threads/{forked['thread_id']}/lineage", 200)
        await call("POST", f"/v1/threads/{thread}/rollback", 200, json={"to_run_ordinal": 1})
        await call("POST", f"/v1/threads/{thread}/rollback", 400, json={"to_run_ordinal": 99})
        await call(
            "POST",
            f"/v1/nodes/node{NOWHERE}/rollback",
            404,
            json={"checkpoint_id": f"ckpt{NOWHERE}", "thread_id": thread},
        )

        # schedules, paused (the session stack's scheduler runs on the real clock)
        on = f"/v1/threads/{thread}/schedules"
        weekly = {"text": "weekly", "cron": "0 9 * * mon", "timezone": "Europe/Berlin", "paused": True}
        sid = (await call("POST", on, 201, json=weekly))["schedule"]["schedule_id"]
        tid = (await call("POST", "/v1/schedules", 201, json={"text": "t", "interval_seconds": 60, "paused": True}))[
            "schedule"
        ]["schedule_id"]
        await call("POST", on, 400, json={"text": "x", "cron": "61 * * * *"})
        await call("GET", on, 200)
        await call("GET", "/v1/schedules", 200)
        await call("GET", f"{on}/{sid}", 200, params={"count": "3"})
        await call("GET", f"/v1/schedules/{tid}", 200)
        await call("GET", f"/v1/schedules/sch{NOWHERE}", 404)
        await call("PATCH", f"{on}/{sid}", 200, json={"text": "weekly, changed"})
        await call("PATCH", f"/v1/schedules/{tid}", 200, json={"interval_seconds": 120})
        for scope, schedule in ((on, sid), ("/v1/schedules", tid)):
            await call("POST", f"{scope}/{schedule}/resume", 200)
            await call("POST", f"{scope}/{schedule}/pause", 200)
            await call("DELETE", f"{scope}/{schedule}", 200)
        # L1.3, L1.4 on the (idle) fork: rename and archive, a typed refusal, then delete and its 404s
        fork = forked["thread_id"]
        await call("PATCH", f"/v1/threads/{fork}", 200, json={"title": "renamed", "archived": True})
        await call("PATCH", f"/v1/threads/{fork}", 400, json={"title": "x" * 201})
        await call("GET", "/v1/threads", 200, params={"archived": "only"})
        await call("DELETE", f"/v1/threads/{fork}", 200)
        await call("PATCH", f"/v1/threads/{fork}", 404, json={"archived": False})
        await call("DELETE", f"/v1/threads/thr{NOWHERE}", 404)

        for path in (f"/v1/runs/run{NOWHERE}", f"/v1/handoffs/hoff{NOWHERE}", f"/v1/threads/thr{NOWHERE}/lineage"):
            await call("GET", path, 404)
        await call("GET", "/v1/threads/nope", 400)
        await call("GET", "/v1/policy", 403)
        await call("PUT", "/v1/policy", 403, json={"allowed_modes": ["approval_required"]})
        await call("POST", "/v1/threads", 401, headers={"Authorization": "Bearer nope"}, json={})
        await _webhooks(call, await TokenStore(stack_nc.jetstream()).create(api.tenant, "root", "admin"))
        await call(
            "POST",
            "/v1/threads",
            413,
            content=b'{"title": "' + b"x" * 3_000_000 + b'"}',
            headers={"Content-Type": "application/json"},
        )

    operations = {op.ok().definition.raw["operationId"] for op in schema.get_all_operations()}
    assert operations - {"stream_events"} <= seen.keys(), f"not called: {sorted(operations - seen.keys())}"


async def _webhooks(call, admin_token: str) -> None:
    """Every webhook operation, refused to a member and answered to an admin. The endpoint is a public literal
    address filtered to a thread that does not exist: nothing is ever sent to it (and no name is looked up)."""
    hook, delivery = f"whk{NOWHERE}", f"dlv{NOWHERE}"
    await call("GET", "/v1/webhooks", 403)
    admin = {"headers": {"Authorization": f"Bearer {admin_token}"}}
    made = await call(
        "POST",
        "/v1/webhooks",
        201,
        json={"url": "https://93.184.216.34/hook", "events": ["run.completed"], "threads": [f"thr{NOWHERE}"]},
        **admin,
    )
    hook = made["webhook"]["id"]
    await call("POST", "/v1/webhooks", 400, json={"url": "http://10.0.0.1/", "events": ["run.completed"]}, **admin)
    await call("GET", "/v1/webhooks", 200, **admin)
    await call("GET", f"/v1/webhooks/{hook}", 200, **admin)
    await call("GET", f"/v1/webhooks/whk{NOWHERE}", 404, **admin)
    await call("PATCH", f"/v1/webhooks/{hook}", 200, json={"description": "conformance"}, **admin)
    await call("GET", f"/v1/webhooks/{hook}/deliveries", 200, params={"status": "failed"}, **admin)
    await call("POST", f"/v1/webhooks/{hook}/deliveries/{delivery}/replay", 404, **admin)
    await call("DELETE", f"/v1/webhooks/{hook}", 200, **admin)
