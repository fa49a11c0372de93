"""The SDK's pure parts and its two clients over an in-memory transport: the answer shapes match the gateway's,
writes are retried with one Idempotency-Key on 503/429 within bounds and after Retry-After, a quota is not
retried, pages are iterated to their end, and the sync and async clients send the same requests."""

from __future__ import annotations

import json

import httpx
import msgspec
import pytest

from treadle import api
from treadle.checkpoints.protocol import FileStat as GatewayFileStat
from treadle.client import (
    AsyncTreadle,
    QuotaExceeded,
    RetryPolicy,
    Treadle,
    Unavailable,
    results,
)
from treadle.client.calls import ENDING_EVENTS, TERMINAL, retryable
from treadle.client.errors import ApiError
from treadle.core.events import RUN_ENDING
from treadle.core.policy import TenantPolicy
from treadle.core.run.model import TERMINAL_RUN_STATUSES
from treadle.gateway import checkpoints
from treadle.webhooks.model import DeliveryView, EndpointView

FAST = RetryPolicy(attempts=4, total=5, max_delay=0.01, first_delay=0.001)
CREATED = {"thread_id": "thr_1", "seq": 3}


def fields(struct: type) -> set[str]:
    return {f.encode_name for f in msgspec.structs.fields(struct)}


@pytest.mark.parametrize(
    "mine, gateways",
    [
        (results.ThreadCreated, api.ThreadCreated),
        (results.MessageAccepted, api.MessageAccepted),
        (results.Acknowledged, api.Acknowledged),
        (results.Implemented, api.Implemented),
        (results.Forked, api.Forked),
        (results.Diff, checkpoints.Diff),
        (results.CheckpointPoint, checkpoints.CheckpointPoint),
        (results.FileStat, GatewayFileStat),
        (results.Policy, TenantPolicy),
        (results.Webhook, EndpointView),
        (results.WebhookDelivery, DeliveryView),
    ],
)
def test_the_sdks_answer_shapes_are_the_gateways(mine, gateways):
    assert fields(mine) == fields(gateways)


def test_the_sdks_terminal_statuses_are_the_domains():
    assert TERMINAL == TERMINAL_RUN_STATUSES


def test_the_sdks_run_ending_events_are_every_event_the_domain_ends_a_run_with():
    assert RUN_ENDING and set(RUN_ENDING) <= ENDING_EVENTS and ENDING_EVENTS - set(RUN_ENDING) == {"rollback.completed"}


def gateway(*answers: tuple[int, dict, dict]):
    """Answers in turn (status, body, headers), the last one repeated; records every request."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status, body, headers = answers[min(len(seen), len(answers) - 1)]
        seen.append(request)
        return httpx.Response(status, json=body, headers=headers)

    return httpx.MockTransport(handler), seen


def error(code: str) -> dict:
    return {"error": {"code": code, "message": code, "details": {}}}


UNAVAILABLE = (503, error("unavailable"), {"Retry-After": "0"})
RATE_LIMITED = (429, error("rate_limited"), {"Retry-After": "0"})


def test_a_write_is_retried_on_503_and_429_with_one_idempotency_key():
    transport, seen = gateway(UNAVAILABLE, RATE_LIMITED, (201, CREATED, {}))
    with Treadle("http://gw", "t", retry=FAST, transport=transport) as client:
        assert client.create_thread(title="x") == results.ThreadCreated(thread_id="thr_1", seq=3)
    keys = {r.headers["idempotency-key"] for r in seen}
    assert len(seen) == 3 and len(keys) == 1 and keys.pop().startswith("sdk-")


async def test_retries_are_bounded_by_attempts():
    transport, seen = gateway(UNAVAILABLE)
    async with AsyncTreadle("http://gw", "t", retry=FAST, transport=transport) as client:
        with pytest.raises(Unavailable):
            await client.create_thread()
    assert len(seen) == FAST.attempts


def test_a_quota_is_not_retried():
    transport, seen = gateway((429, error("quota_exceeded"), {"Retry-After": "1"}))
    with Treadle("http://gw", "t", retry=FAST, transport=transport) as client:
        with pytest.raises(QuotaExceeded) as exc:
            client.send_message("thr_1", "hi")
    assert len(seen) == 1 and exc.value.status == 429 and exc.value.retry_after == 1


def test_retry_after_is_honoured_within_the_total_time():
    policy = RetryPolicy(attempts=10, total=5, max_delay=10)
    wait = ApiError(503, "unavailable", "", retry_after=3)
    assert policy.delay(1, 0, wait) == 3  # the server's word, not the backoff
    assert policy.delay(1, 2.5, wait) is None  # past the total: give up
    assert policy.delay(10, 0, wait) is None  # past the attempts
    assert RetryPolicy(max_delay=1).delay(1, 0, wait) == 1  # never longer than max_delay
    assert not retryable(ApiError(404, "thread_not_found", ""))


def paged(total: int):
    def handler(request: httpx.Request) -> httpx.Response:
        start = int(request.url.params.get("cursor", "0"))
        end = min(start + 2, total)
        items = [
            {"id": f"thr_{i}", "title": "", "provider": "scripted", "created_at": "x", "seq": i, "runs": 0}
            for i in range(start, end)
        ]
        return httpx.Response(200, json={"items": items, "next_cursor": str(end) if end < total else None, "seq": None})

    return httpx.MockTransport(handler)


async def test_pages_are_iterated_to_their_end_by_both_clients():
    with Treadle("http://gw", "t", transport=paged(5)) as client:
        first = client.list_threads(limit=2)
        assert [t.id for t in first.items] == ["thr_0", "thr_1"] and first.next_cursor == "2"
        assert [t.id for t in first] == [f"thr_{i}" for i in range(5)]
    async with AsyncTreadle("http://gw", "t", transport=paged(5)) as aclient:
        assert [t.id async for t in await aclient.list_threads(limit=2)] == [f"thr_{i}" for i in range(5)]


async def test_a_title_search_is_sent_with_every_page_by_both_clients():
    asked: list[str | None] = []
    pages = paged(5)

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get("q"))
        return pages.handle_request(request)

    transport = httpx.MockTransport(handler)
    with Treadle("http://gw", "t", transport=transport) as client:
        assert len(list(client.list_threads(q="Fix it", limit=2))) == 5
    async with AsyncTreadle("http://gw", "t", transport=transport) as aclient:
        assert len([t async for t in await aclient.list_threads(q="Fix it", limit=2)]) == 5
    assert asked == ["Fix it"] * 6  # three pages each: the cursor continues the same search


async def test_the_sync_and_async_clients_send_the_same_requests():
    def record(into: list):
        def handler(request: httpx.Request) -> httpx.Response:
            into.append((request.method, str(request.url), json.loads(request.content or b"null")))
            return httpx.Response(202, json={"thread_id": "thr_1", "run_id": "run_1", "disposition": "x", "seq": 4})

        return httpx.MockTransport(handler)

    sync_seen: list = []
    async_seen: list = []
    with Treadle("http://gw", "t", transport=record(sync_seen)) as client:
        client.interrupt_run("run_1", allow_destructive=False, idempotency_key="k")
        client.reorder_queue("thr_1", ["run_2", "run_1"], idempotency_key="k2")
    async with AsyncTreadle("http://gw", "t", transport=record(async_seen)) as aclient:
        await aclient.interrupt_run("run_1", allow_destructive=False, idempotency_key="k")
        await aclient.reorder_queue("thr_1", ["run_2", "run_1"], idempotency_key="k2")
    assert sync_seen == async_seen and sync_seen[1][2] == {"order": ["run_2", "run_1"]}
