"""Issue 36, finding 6c: every gateway response says ``X-Content-Type-Options: nosniff`` (it was on the console's
page only), whatever answered it: a route, an error, a 404, the MCP mount, the metrics and health routes."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.e2e


async def test_every_response_says_nosniff(api, stack):
    thread = await api.create_thread(title="headers")
    answers = [
        await api.request("GET", f"/v1/threads/{thread}"),
        await api.request("GET", "/v1/threads/thr_none"),
        await api.request("POST", "/v1/threads", json={"nope": 1}),
    ]
    async with httpx.AsyncClient(base_url=stack.api_url) as http:
        answers += [
            await http.get("/healthz"),
            await http.get("/metrics"),
            await http.get("/schema/openapi.json"),
            await http.get("/no/such/route"),
            await http.get("/v1/threads"),
            await http.post("/mcp", json={}, headers={"Authorization": "Bearer trs_unknown"}),
            await http.post("/console/session", json={"token": "trd_wrong"}),
        ]
    assert {200, 400, 401, 404} <= {r.status_code for r in answers}
    for r in answers:
        assert r.headers.get("x-content-type-options") == "nosniff", (r.request.url, r.status_code)
        assert r.headers.get_list("x-content-type-options") == ["nosniff"]  # once, never doubled
