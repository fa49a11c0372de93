"""The HTTP contract: tenancy, bad input, SSE resume, and Redis as a disposable cache."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from tests.support.api import make_api
from tests.support.helpers import wait_for
from treadle.projections.store import EPOCH_KEY, ProjectionStore

pytestmark = pytest.mark.e2e

SCRIPT = {"steps": [{"type": "text", "text": "resumable " * 20, "chunk": 7, "delay_ms": 5}]}


async def test_a_thread_of_another_tenant_is_404(api, stack, stack_nc):
    thread = await api.create_thread(title="private")
    sent = await api.send(thread, "secret", script=SCRIPT)
    other = await make_api(stack, stack_nc, f"{api.tenant}-other")
    try:
        for method, path, body in [
            ("GET", f"/v1/threads/{thread}", None),
            ("GET", f"/v1/runs/{sent['run_id']}", None),
            ("GET", f"/v1/threads/{thread}/events", None),
            ("POST", f"/v1/threads/{thread}/messages", {"text": "hi"}),
        ]:
            r = await other.request(method, path, json=body)
            assert r.status_code == 404, (path, r.text)
            assert r.json()["error"]["code"] in ("thread_not_found", "run_not_found")
        listed = (await other.request("GET", "/v1/threads")).json()["items"]
        assert all(t["id"] != thread for t in listed)
    finally:
        await other.close()


async def test_requests_without_a_valid_token_are_401(stack):
    import httpx

    async with httpx.AsyncClient(base_url=stack.api_url) as http:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
            r = await http.get("/v1/threads", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize(
    "method,path,kwargs,status,code",
    [
        (
            "POST",
            "/v1/threads",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            400,
            "bad_request",
        ),
        ("POST", "/v1/threads", {"json": {"titel": "typo"}}, 400, "bad_request"),
        ("POST", "/v1/threads", {"json": {"workspace": "../../etc"}}, 400, "invalid_workspace"),
        ("POST", "/v1/threads", {"json": {"provider": "nope"}}, 400, "invalid_provider"),
        ("GET", "/v1/threads/a.b", {}, 400, "invalid_id"),
        ("GET", "/v1/threads/thr_*", {}, 400, "invalid_id"),
        ("GET", "/v1/threads/thr_>", {}, 400, "invalid_id"),
        ("GET", "/v1/runs/run_a.b", {}, 400, "invalid_id"),
        ("GET", "/v1/threads/thr_00000000000000000000000000", {}, 404, "thread_not_found"),
        ("GET", "/v1/runs/run_00000000000000000000000000", {}, 404, "run_not_found"),
    ],
)
async def test_bad_requests_get_a_typed_error(api, method, path, kwargs, status, code):
    r = await api.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and "Traceback" not in r.text


@pytest.mark.parametrize(
    "body,status,code",
    [
        ({"text": ""}, 400, "empty_text"),
        ({"text": "x" * 100_001}, 400, "text_too_long"),
        ({"text": "x", "mode": "sideways"}, 400, "invalid_mode"),
        ({"text": "x", "target_run_id": "run_a.b"}, 400, "invalid_id"),
        ({"text": "x", "script": {"steps": [{"type": "nope"}]}}, 400, "invalid_script"),
        ({"text": "x", "extra": 1}, 400, "bad_request"),
        ({"text": 5}, 400, "bad_request"),
    ],
)
async def test_bad_messages_are_rejected_and_append_nothing(api, log, body, status, code):
    thread = await api.create_thread()
    before = await log.last_seq(api.tenant, thread)
    r = await api.request("POST", f"/v1/threads/{thread}/messages", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert await log.last_seq(api.tenant, thread) == before


async def test_an_oversized_body_is_refused(api):
    thread = await api.create_thread()
    r = await api.request("POST", f"/v1/threads/{thread}/messages", json={"text": "x" * 2_000_000})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"


async def test_an_idempotency_key_makes_a_retried_send_return_the_same_receipt(api, log):
    thread = await api.create_thread()
    headers = {"Idempotency-Key": "send-once"}
    first = await api.request("POST", f"/v1/threads/{thread}/messages", json={"text": "once"}, headers=headers)
    second = await api.request("POST", f"/v1/threads/{thread}/messages", json={"text": "once"}, headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["run_id"] == second.json()["run_id"]
    assert [e.type for e in await log.read(api.tenant, thread)].count("run.queued") == 1
    reused = await api.request("POST", f"/v1/threads/{thread}/messages", json={"text": "other"}, headers=headers)
    assert reused.status_code == 422 and reused.json()["error"]["code"] == "idempotency_key_reused"


async def test_sse_reconnect_with_last_event_id_misses_nothing_and_repeats_nothing(api):
    thread = await api.create_thread()
    sent = await api.send(thread, "stream", script=SCRIPT)
    await api.wait_run(sent["run_id"])

    async def durable(last: int | None = None) -> list[int]:
        ids = []
        async for e in api.events(thread, last):
            if e.id is not None:
                ids.append(e.id)
            if e.event == "run.completed":
                return ids
        return ids

    everything = await asyncio.wait_for(durable(), 20)
    assert len(everything) >= 6  # enough to resume from the middle (a first text carries its run.started)
    middle = everything[len(everything) // 2]
    resumed = await asyncio.wait_for(durable(middle), 20)
    assert resumed == everything[everything.index(middle) + 1 :]


async def test_flushing_redis_rebuilds_projections_that_equal_the_old_ones(api, stack):
    threads = [await api.create_thread(title=f"t{i}") for i in range(3)]
    for thread in threads:
        await api.wait_run((await api.send(thread, "hi", script=SCRIPT))["run_id"])
    redis = Redis.from_url(stack.redis_url)
    store = ProjectionStore(redis)
    try:

        async def settled():
            docs = [await store.doc(api.tenant, t) for t in threads]
            return docs if all(d and b'"status":"completed"' in d for d in docs) else None

        before = await wait_for(settled, what="projections written")
        listing = (await api.request("GET", "/v1/threads")).content
        await redis.flushall()
        await wait_for(lambda: redis.exists(EPOCH_KEY), timeout=30, what="projector rebuilt after the flush")
        after = [await store.doc(api.tenant, t) for t in threads]
        assert after == before
        assert (await api.request("GET", "/v1/threads")).content == listing
    finally:
        await redis.aclose()


async def test_openapi_document_is_served(stack):
    import httpx

    async with httpx.AsyncClient(base_url=stack.api_url) as http:
        doc = (await http.get("/schema/openapi.json")).json()
    assert "/v1/threads/{thread_id}/messages" in doc["paths"]
