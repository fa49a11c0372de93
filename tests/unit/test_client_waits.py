"""The SDK's waits against an HTTP transport in memory: a gateway restarting is waited out, a stream refused for
the tenant's quota falls back to reading on a timer, and a stream that fails for good ends the wait."""

from __future__ import annotations

import httpx
import pytest

from treadle.client import NotFound, TreadleClient


def gateway(events_status: int, *, unreachable: int = 0):
    """Thread reads answer a document that is ``done`` from the third read on; event streams answer
    ``events_status``; the first ``unreachable`` requests find no gateway."""
    calls = {"reads": 0, "all": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        calls["all"] += 1
        if calls["all"] <= unreachable:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path.endswith("/events"):
            return httpx.Response(events_status, json={"error": {"code": "some_code", "message": "refused"}})
        calls["reads"] += 1
        return httpx.Response(200, json={"seq": calls["reads"], "runs": [], "done": calls["reads"] >= 3})

    return httpx.MockTransport(handler)


def done(doc: dict) -> dict | None:
    return doc if doc["done"] else None


async def test_a_stream_refused_by_the_quota_falls_back_to_reading_on_a_timer():
    async with TreadleClient("http://gateway", "token", transport=gateway(429)) as client:
        assert (await client.wait_thread("thr_1", done, timeout=5, poll=None))["seq"] == 3


async def test_a_gateway_that_does_not_answer_yet_is_waited_out():
    async with TreadleClient("http://gateway", "token", transport=gateway(429, unreachable=3)) as client:
        assert (await client.wait_thread("thr_1", done, timeout=5, poll=0.01))["seq"] == 3


async def test_a_stream_that_fails_for_good_ends_the_wait_with_its_error():
    async with TreadleClient("http://gateway", "token", transport=gateway(404)) as client:
        with pytest.raises(NotFound):
            await client.wait_thread("thr_1", lambda doc: None, timeout=5, poll=None)


async def test_a_wait_that_never_comes_true_times_out():
    async with TreadleClient("http://gateway", "token", transport=gateway(429)) as client:
        with pytest.raises(TimeoutError):
            await client.wait_thread("thr_1", lambda doc: None, timeout=0.2, poll=0.01)
