"""Issue 9, item 4: per-token rate limits answer 429 with Retry-After, per token, and refill over time."""

from __future__ import annotations

from litestar import Litestar, get
from litestar.middleware import DefineMiddleware
from litestar.testing import AsyncTestClient

from treadle.gateway.limits import RateLimitMiddleware, TokenBuckets


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_allows_its_burst_then_says_how_long_to_wait_and_refills():
    clock = Clock()
    buckets = TokenBuckets(rate=2.0, burst=3, clock=clock)
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == 0.5
    assert buckets.take("b") == 0.0  # another token has its own bucket
    clock.now = 0.5
    assert buckets.take("a") == 0.0


async def test_the_api_answers_429_with_retry_after_per_token():
    @get("/v1/ping")
    async def ping() -> dict:
        return {"ok": True}

    @get("/healthz")
    async def healthz() -> dict:
        return {"ok": True}

    app = Litestar([ping, healthz], middleware=[DefineMiddleware(RateLimitMiddleware, buckets=TokenBuckets(0.1, 2))])
    async with AsyncTestClient(app) as client:
        alice = {"Authorization": "Bearer alice"}
        assert [(await client.get("/v1/ping", headers=alice)).status_code for _ in range(2)] == [200, 200]
        limited = await client.get("/v1/ping", headers=alice)
        assert limited.status_code == 429 and limited.headers["retry-after"] == "10"
        assert limited.json()["error"]["code"] == "rate_limited"
        assert (await client.get("/v1/ping", headers={"Authorization": "Bearer bob"})).status_code == 200
        assert [(await client.get("/healthz", headers=alice)).status_code for _ in range(5)] == [200] * 5
